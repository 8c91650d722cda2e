# Sourced by the scripts: Open MPI settings for running as root, oversubscribed, in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
DPTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DPTRAIN_BUILD="${DPTRAIN_BUILD:-$DPTRAIN_ROOT/build}"
export DPTRAIN_ROOT DPTRAIN_BUILD

# Configures and builds (Release) into $DPTRAIN_BUILD.
dptrain_build() {
  cmake -S "$DPTRAIN_ROOT" -B "$DPTRAIN_BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$DPTRAIN_BUILD" -j "$(nproc)" "$@"
}

# Fits α and B to a ring all-reduce sweep on $1 ranks and writes them to $2 (a link.json for dptrain --link).
dptrain_calibrate() {
  mpirun -np "$1" --oversubscribe "$DPTRAIN_BUILD/dpbench" --op allreduce --algo ring -b 64K -e 64M -f 4 \
    --fit "$2" > "$2.txt"
}
