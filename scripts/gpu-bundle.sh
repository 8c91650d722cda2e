#!/usr/bin/env bash
# Packs the CUDA build for a bare GPU machine (no Open MPI, no OpenBLAS there: scripts/gpu-check.sh runs what this
# packs): the programs and the GPU-relevant test executables, every shared library they load that is neither glibc
# nor CUDA's (the GPU machine has its own CUDA 13), and Open MPI's plugins, which a singleton rank (one process,
# no mpirun) loads at MPI_Init. Writes build-gpu.tar.xz in the repository root (under the 64 MiB a carried path
# may take). Usage: scripts/gpu-bundle.sh   (builds into $DPTRAIN_BUILD first, with CUDA where nvcc is found)
set -euo pipefail
source "$(dirname "$0")/env.sh"
command -v nvcc >/dev/null || { echo "gpu-bundle: nvcc not found: a bundle without the cuda backend is of no use" >&2; exit 2; }
dptrain_build --target dptrain dpbench compute_test dp_test train_test kernels_test
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
bundle="$stage/build-gpu"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/openmpi"
programs=("$DPTRAIN_BUILD/dptrain" "$DPTRAIN_BUILD/dpbench" "$DPTRAIN_BUILD/tests/compute/compute_test"
          "$DPTRAIN_BUILD/tests/dp/dp_test" "$DPTRAIN_BUILD/tests/train/train_test")
cp "${programs[@]}" "$bundle/bin/"
# Libraries: ldd's closure of the programs and of the plugins, less glibc, the loader and CUDA's.
plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
cp -L "$plugins"/*.so "$bundle/openmpi/"
{ for f in "${programs[@]}" "$plugins"/*.so; do ldd "$f"; done; } | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so|/libcud|/libcublas|/libnccl|/libnv' |
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
cp -r "$DPTRAIN_ROOT/configs" "$bundle/"
# The commit it was built from (with "-dirty" where the working tree had changes), for the check's summary.
git -C "$DPTRAIN_ROOT" describe --always --dirty --abbrev=40 > "$bundle/COMMIT"
tar -C "$stage" -cJf "$DPTRAIN_ROOT/build-gpu.tar.xz" build-gpu
du -h "$DPTRAIN_ROOT/build-gpu.tar.xz"
