#!/usr/bin/env bash
# mpirun on the bare GPU machine, which has no Open MPI of its own: runs the launcher that scripts/gpu-bundle.sh
# packed into build-gpu/ (Debian's Open MPI 4.1.4, built for /usr, /etc/openmpi and an external PMIx under
# /usr/lib/x86_64-linux-gnu/pmix2), telling Open MPI and PMIx where the bundle keeps each of those pieces. The
# machine has no network, no ssh, and runs us as root, so every rank stays on it: started by mpirun itself (the
# default launcher gives up where it finds no ssh, even for local ranks), shared memory between ranks, the
# launcher's own wire-up on the loopback, no binding (the ranks share the cores with whatever else runs).
# gpu-check.sh's singleton settings are dropped here: with them a rank would not join the others. The CUDA
# libraries come from the caller's LD_LIBRARY_PATH, as gpu-check.sh sets it.
# Usage (from the repository root, build-gpu/ unpacked): scripts/gpu-mpirun.sh -np N [mpirun options] PROGRAM ARGS...
#   e.g. scripts/gpu-mpirun.sh -np 2 build-gpu/bin/dpbench --op allreduce -b 1K -e 1M -f 4 -c 1
set -euo pipefail
usage="usage: scripts/gpu-mpirun.sh -np N [mpirun options] PROGRAM ARGS..."
[ $# -ge 3 ] && [[ $1 == -np || $1 == -n ]] || { echo "gpu-mpirun: $usage" >&2; exit 2; }
[[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "gpu-mpirun: $1 must be a whole number of at least 1, got '$2' ($usage)" >&2; exit 2; }
bundle="$(cd "$(dirname "$0")/.." && pwd)/build-gpu"
[ -x "$bundle/bin/orterun" ] ||
  { echo "gpu-mpirun: no $bundle/bin/orterun: unpack a build-gpu.tar.xz that scripts/gpu-bundle.sh packed" >&2; exit 2; }
unset OMPI_MCA_ess_singleton_isolated
# OPAL_PREFIX moves what Debian put under /usr as the bundle has it (bin, share/openmpi); the bundle's flatter
# libraries and plugins and the MCA defaults (Debian's are in /etc/openmpi) are named one by one. PMIx reads none of
# Open MPI's variables, and would load its plugins from its own libdir first, wherever else it is told to look.
export OPAL_PREFIX="$bundle" OPAL_LIBDIR="$bundle/lib" OPAL_PKGLIBDIR="$bundle/openmpi" OPAL_SYSCONFDIR="$bundle/etc"
export PMIX_PKGLIBDIR="$bundle/pmix" PMIX_PKGDATADIR="$bundle/share/pmix" PMIX_SYSCONFDIR="$bundle/etc"
export PATH="$bundle/bin:$PATH" LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
exec "$bundle/bin/orterun" --oversubscribe --bind-to none --mca plm isolated --mca btl self,vader \
  --mca oob_tcp_if_include lo "$@"
