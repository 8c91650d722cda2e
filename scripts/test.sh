#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite (ctest).
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$DPTRAIN_ROOT/scripts/setup.sh"
dptrain_build
cd "$DPTRAIN_BUILD"
ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
