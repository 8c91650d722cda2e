#!/usr/bin/env bash
# The demo: trains the `small` config on the default data (Debian's fortunes) and prints one line per step.
# Ranks: DPTRAIN_RANKS (default 2); extra flags are passed to dptrain, e.g. scripts/demo.sh --steps 50.
set -euo pipefail
source "$(dirname "$0")/env.sh"
ranks="${DPTRAIN_RANKS:-2}"
dptrain_require_count DPTRAIN_RANKS "$ranks" 1
"$DPTRAIN_ROOT/scripts/setup.sh"
dptrain_build --target dptrain
exec mpiexec -n "$ranks" "$DPTRAIN_BUILD/dptrain" --config "$DPTRAIN_ROOT/configs/small.toml" "$@"
