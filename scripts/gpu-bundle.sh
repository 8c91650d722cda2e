#!/usr/bin/env bash
# Packs the CUDA build for a bare GPU machine (no Open MPI, no OpenBLAS there: scripts/gpu-check.sh runs what this
# packs): the programs and the GPU-relevant test executables, every shared library they load that is neither glibc
# nor CUDA's (the GPU machine has its own CUDA 13), and Open MPI's plugins, which a singleton rank (one process,
# no mpirun) loads at MPI_Init. Beside them, Debian's Open MPI 4.1.4 launcher (orterun, orted, their libraries,
# PMIx's plugins, the help texts and the MCA defaults), for several ranks through scripts/gpu-mpirun.sh, which
# points Open MPI at this layout. Writes build-gpu.tar.xz in the repository root (under the 64 MiB a carried path
# may take, or at $DPTRAIN_BUNDLE). Usage: scripts/gpu-bundle.sh   (builds into $DPTRAIN_BUILD first, with CUDA
# where nvcc is found); DPTRAIN_BUNDLE_CUDA=0 packs dptrain and dpbench without CUDA: for testing the packing where
# there is no nvcc or no time for the CUDA build (scripts/test-gpu-bundle.sh does).
set -euo pipefail
source "$(dirname "$0")/env.sh"
programs=("$DPTRAIN_BUILD/dptrain" "$DPTRAIN_BUILD/dpbench")
if [ "${DPTRAIN_BUNDLE_CUDA:-1}" = 0 ]; then
  cmake -S "$DPTRAIN_ROOT" -B "$DPTRAIN_BUILD" -DDPTRAIN_CUDA=OFF >/dev/null
  dptrain_build --target dptrain dpbench
else
  command -v nvcc >/dev/null ||
    { echo "gpu-bundle: nvcc not found: a bundle without the cuda backend is of no use" >&2; exit 2; }
  # ON said outright: a build folder last configured by DPTRAIN_BUNDLE_CUDA=0 keeps OFF in its cache otherwise.
  cmake -S "$DPTRAIN_ROOT" -B "$DPTRAIN_BUILD" -DDPTRAIN_CUDA=ON >/dev/null
  dptrain_build --target dptrain dpbench compute_test dp_test train_test
  programs+=("$DPTRAIN_BUILD/tests/compute/compute_test" "$DPTRAIN_BUILD/tests/dp/dp_test"
             "$DPTRAIN_BUILD/tests/train/train_test")
  # The programs packed have the cuda backend (without a GPU here, --device cuda is refused for that, not for its
  # absence from the build).
  # (The output first, then grep: under pipefail the pipeline would take dptrain's refusal as its status.)
  refusal=$("$DPTRAIN_BUILD/dptrain" --device cuda --steps 1 2>&1 || true)
  if grep -q "this build has no CUDA backend" <<< "$refusal"; then
    echo "gpu-bundle: $DPTRAIN_BUILD/dptrain was built without the cuda backend" >&2
    exit 2
  fi
fi
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
bundle="$stage/build-gpu"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/openmpi" "$bundle/pmix" "$bundle/share" "$bundle/etc"
cp "${programs[@]}" "$bundle/bin/"
# Debian's Open MPI keeps its plugins under its libdir and PMIx (an external 4.2) in a prefix of its own; both
# are flattened here and found again through the variables gpu-mpirun.sh sets. mpirun is orterun by another name.
plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_plugins=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
launcher=(/usr/bin/orterun /usr/bin/orted)
cp "${launcher[@]}" "$bundle/bin/"
ln -s orterun "$bundle/bin/mpirun"
cp -L "$plugins"/*.so "$bundle/openmpi/"
cp -L "$pmix_plugins"/*.so "$bundle/pmix/"
cp -r /usr/share/openmpi /usr/lib/x86_64-linux-gnu/pmix2/share/pmix "$bundle/share/"
# Debian's MCA defaults (no ucx, ofi or openib components): the ranks pick the same ones as where this was built.
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$bundle/etc/"
# Libraries: ldd's closure of the programs, the launcher and the plugins, less glibc, the loader and CUDA's.
{ for f in "${programs[@]}" "${launcher[@]}" "$plugins"/*.so "$pmix_plugins"/*.so; do ldd "$f"; done; } |
  awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so|/libcud|/libcublas|/libnccl|/libnv' |
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
cp -r "$DPTRAIN_ROOT/configs" "$bundle/"
# The commit it was built from (with "-dirty" where the working tree had changes), for the check's summary.
git -C "$DPTRAIN_ROOT" describe --always --dirty --abbrev=40 > "$bundle/COMMIT"
out="${DPTRAIN_BUNDLE:-$DPTRAIN_ROOT/build-gpu.tar.xz}"
tar -C "$stage" -cJf "$out" build-gpu
du -h "$out"
