#!/usr/bin/env bash
# Puts NVIDIA's cuDNN frontend (header-only C++, MIT licence) under $DPTRAIN_ROOT/.deps/cudnn-frontend-VERSION/include
# for the cuda backend's fused attention (src/compute/cudnn/). The headers come from the nvidia-cudnn-frontend wheel
# on PyPI (Debian packages neither the frontend nor cuDNN): pip downloads the wheel, and only its include/ folder is
# kept. Idempotent: returns at once when the headers are there. Prints the include folder on stdout; exits 1 with
# the reason on stderr when the wheel cannot be had (the build then goes on without fused attention).
set -euo pipefail
source "$(dirname "$0")/env.sh"
version=1.32.0
dest="$DPTRAIN_ROOT/.deps/cudnn-frontend-$version"
if [ ! -f "$dest/include/cudnn_frontend.h" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # One wheel of the version, whatever this machine's Python: only its headers are used, and they are the same in all.
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3.11 --implementation cp --abi cp311 --dest "$work" "nvidia-cudnn-frontend==$version" >"$work/pip.log" 2>&1; then
    echo "cudnn-frontend: pip could not download nvidia-cudnn-frontend==$version: $(tail -1 "$work/pip.log")" >&2
    exit 1
  fi
  python3 - "$work"/*.whl "$work/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [n for n in wheel.namelist() if n.startswith("include/")])
PY
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mkdir "$dest"
  mv "$work/unpacked/include" "$dest/include"
fi
echo "$dest/include"
