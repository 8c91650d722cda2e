# shellcheck shell=bash
# Sourced by the GPU checks (gpu-check.sh, gpu-check-multi.sh) on a bare GPU machine: unpacks the carried build,
# points the loader at it and at CUDA 13's runtime, cuBLASLt and NCCL (the toolkit's, else those of the Python
# packages beside PyTorch), and records what machine this is in $OUT/device.txt and $OUT/device-name.txt.
# Sets root, OUT, bin, bundle_lib, started, log(), ours(), nccl_loaded_version(), seconds_left() and step_timeout().
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$root/gpu-check-out}"
mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ] || {
  echo "gpu-check: OUT='$OUT' is not a directory this user can write (expected a directory, or a path to create)" >&2
  exit 2
}
cd "$root" || exit 2
# The deadline of the check that sources this: whole seconds, at least 30 (a word or a 0 is no deadline at all).
[[ ${GPU_CHECK_SECONDS:-} =~ ^([1-9][0-9]{1,5})?$ ]] && (( ${GPU_CHECK_SECONDS:-30} >= 30 )) || {
  echo "gpu-check: GPU_CHECK_SECONDS must be whole seconds from 30 to 999999, got '$GPU_CHECK_SECONDS'" >&2
  exit 2
}
started=$(date +%s)
# Each line with the seconds since the start: what each step took, to size the next call's deadline by.
log() { echo "gpu-check | $(( $(date +%s) - started )) s | $*" | tee -a "$OUT/progress.txt"; }

# ---- the carried build --------------------------------------------------------------------------------------
# Unpacked afresh from the tarball on every call (a machine kept between calls may hold an older build-gpu/), once:
# the second check of scripts/gpu-check-all.sh finds it unpacked from the same tarball (its size and time recorded).
if [ -f build-gpu.tar.xz ]; then
  tarball="$(stat -c '%s %Y' build-gpu.tar.xz)"
  if [ "$(cat build-gpu/.unpacked-from 2>/dev/null)" != "$tarball" ]; then
    rm -rf build-gpu
    tar -xJf build-gpu.tar.xz ||
      { log "build-gpu.tar.xz did not unpack (damaged or incomplete): run scripts/gpu-bundle.sh again and carry it"; exit 2; }
    echo "$tarball" > build-gpu/.unpacked-from
  fi
elif [ ! -d build-gpu ]; then
  log "no build-gpu.tar.xz: run scripts/gpu-bundle.sh and carry it"
  exit 2
fi
bin="$root/build-gpu/bin"
bundle_lib="$root/build-gpu/lib"
# CUDA 13's runtime, cuBLASLt, NCCL, cuDNN 9 (the fused attention) and NVRTC (which cuDNN compiles some of its
# attention kernels with): the toolkit's, else those of the Python packages beside PyTorch (asked of Python, not
# searched for on the disk), for every process.
cuda_libs=""
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
  found=$(ls /usr/local/cuda/lib64/$lib 2>/dev/null | head -1)
  [ -n "$found" ] || found=$(python3 - "$lib" <<'PY' 2>/dev/null
import glob, os, sys, nvidia  # the nvidia-* wheels: nvidia/<package>/lib/<library>
for root in nvidia.__path__:
    for path in glob.glob(os.path.join(root, "*", "lib", sys.argv[1])):
        print(path)
        raise SystemExit
PY
)
  [ -n "$found" ] && cuda_libs="$cuda_libs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="${cuda_libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The bundle's own libraries (Debian 12's libstdc++, libgomp, OpenBLAS, ...) for dptrain's programs only: Python,
# PyTorch and torch.compile's compiler keep the machine's newer ones. `ours PROGRAM ARGS...` runs one of ours.
ours() { LD_LIBRARY_PATH="$bundle_lib:$LD_LIBRARY_PATH" "$@"; }
# One process without mpirun: Open MPI's singleton, told not to start a daemon, its plugins from the bundle
# (scripts/gpu-mpirun.sh starts several ranks instead, and clears these).
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_mca_base_component_path="$root/build-gpu/openmpi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=4
export DPTRAIN_SOURCE_DIR="$root" DPTRAIN_BINARY_DIR="$root/build-gpu"
# The NCCL that dptrain loads (the first libnccl.so.2 on the path above), as "2.28.3", or "unknown".
nccl_loaded_version() {
  python3 -c 'import ctypes; v = ctypes.c_int(); ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); v = v.value; print(f"{v // 10000}.{v // 100 % 100}.{v % 100}")' 2>/dev/null || echo unknown
}
# Seconds left before `deadline` (set by the caller), never below 0; `step_timeout S` is S or what is left.
seconds_left() { local left=$(( deadline - $(date +%s) )); echo $(( left > 0 ? left : 0 )); }
step_timeout() { local left; left=$(seconds_left); echo $(( $1 < left ? $1 : left )); }

# ---- what machine -------------------------------------------------------------------------------------------
# Each with a time limit: a driver that does not answer must not hold the call before any summary is written.
timeout -k 5 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 > "$OUT/device-name.txt"
{
  timeout -k 5 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,compute_mode --format=csv
  timeout -k 5 30 nvcc --version | tail -2
  timeout -k 5 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "cudnn", torch.backends.cudnn.version())'
  echo "nccl loaded by dptrain: $(nccl_loaded_version)"
  ours ldd "$bin/dptrain" | grep -E "not found|cublas|cudart|nccl|cudnn|nvrtc|stdc" || true
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
