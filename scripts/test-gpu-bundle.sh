#!/usr/bin/env bash
# Proves, on a machine that has Open MPI, that the bundle's launcher does not need it: the GPU machine has none, and
# a launch that quietly reads /usr or /etc/openmpi here would work here and fail there. Packs a cpu-only bundle
# (DPTRAIN_BUNDLE_CUDA=0 scripts/gpu-bundle.sh, into $DPTRAIN_BUILD, build-nocuda by default), unpacks it beside a
# copy of gpu-mpirun.sh in a temporary folder, and there, in a mount namespace where the system's Open MPI and PMIx
# (programs, libraries, plugins, help texts, configuration) and ssh are covered by empty stand-ins, runs a dpbench
# all-reduce sweep on 2 and on 3 ranks through scripts/gpu-mpirun.sh. Fails unless every row has 0 wrong results
# and, where strace is found, unless no process of the launch so much as tried to open a covered path.
# A manual check (root, for the mounts), not one of ctest's. Usage: scripts/test-gpu-bundle.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
export DPTRAIN_BUILD="${DPTRAIN_BUILD:-$DPTRAIN_ROOT/build-nocuda}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
DPTRAIN_BUNDLE="$work/build-gpu.tar.xz" DPTRAIN_BUNDLE_CUDA=0 "$DPTRAIN_ROOT/scripts/gpu-bundle.sh"
mkdir -p "$work/root/scripts" "$work/empty"
cp "$DPTRAIN_ROOT/scripts/gpu-mpirun.sh" "$work/root/scripts/"
tar -C "$work/root" -xJf "$work/build-gpu.tar.xz"
touch "$work/empty-file"

lib=/usr/lib/x86_64-linux-gnu
covered_dirs=("$lib/openmpi" "$lib/pmix2" /usr/share/openmpi /etc/openmpi)
# Links are followed by the bind mount, so covering the files they end at covers them too.
mapfile -t covered_files < <(find /usr/bin "$lib" -maxdepth 1 -type f \( -name 'orte*' -o -name 'ompi*' -o \
  -name 'libmpi*.so*' -o -name 'libopen-rte.so*' -o -name 'libopen-pal.so*' -o -name 'libpmix.so*' -o \
  -name 'libmca_common_*.so*' -o -name 'liboshmem.so*' -o -name 'libompitrace.so*' -o -name ssh \))
covered="$lib/(openmpi|pmix2|libmpi|libopen-rte|libopen-pal|libpmix|libmca_common|liboshmem)"
covered+="|/usr/share/openmpi|/etc/openmpi|/usr/bin/(orte|ompi|mpirun|mpiexec|ssh)"
# Debian linked Open MPI's programs, libraries and plugins (and so ours) with a RUNPATH of $lib/openmpi/lib, where
# the loader looks for glibc's libraries, which the bundle leaves out, before it finds them in its cache: misses
# that use nothing of Open MPI's.
glibc_miss="\"$lib/openmpi/lib/([^\"]*/)?lib(c|m|dl|pthread|rt|resolv)\\.so[.0-9]*\""
trace=()
command -v strace >/dev/null && trace=(strace -f -qq -e 'trace=openat,execve' -o "$work/trace")

unshare --mount bash -s -- "$work" "${trace[*]}" "${covered_dirs[@]}" -- "${covered_files[@]}" <<'EOF'
set -euo pipefail
work=$1 trace=$2; shift 2
while [ "$1" != -- ]; do mount --bind "$work/empty" "$1"; shift; done
shift
for f in "$@"; do mount --bind "$work/empty-file" "$f"; done
cd "$work/root"
for np in 2 3; do
  echo "== scripts/gpu-mpirun.sh -np $np build-gpu/bin/dpbench --op allreduce -b 1K -e 1M -f 4 -c 1"
  $trace scripts/gpu-mpirun.sh -np "$np" build-gpu/bin/dpbench --op allreduce -b 1K -e 1M -f 4 -c 1 |
    tee "$work/np$np.txt"
  [ -z "$trace" ] || mv "$work/trace" "$work/trace-np$np"
done
EOF

status=0
for np in 2 3; do
  # The "#wrong" column: every data row must name 0.
  if ! awk '$1 ~ /^#/ { for (i = 1; i <= NF; i++) if ($i == "#wrong") col = i - 1; next }
            NF && col { rows++; if ($col != 0) bad++ } END { exit !(col && rows && !bad) }' "$work/np$np.txt"; then
    echo "test-gpu-bundle: np $np: no rows, no #wrong column, or wrong results" >&2; status=1
  fi
  if [ -f "$work/trace-np$np" ] &&
     grep -E "\"($covered)" "$work/trace-np$np" | grep -v -E "$glibc_miss" | head -20 | grep .; then
    echo "test-gpu-bundle: np $np: the launch tried the system's Open MPI (above)" >&2; status=1
  fi
done
[ $status -eq 0 ] && echo "test-gpu-bundle: passed: 2 and 3 ranks, no wrong results, nothing of the system's Open MPI"
exit $status
