#!/usr/bin/env bash
# Benchmarks the hand-written ring and tree all-reduce against MPI's own (native) with dpbench at several rank
# counts and prints, per size, each algorithm's bus bandwidth and the ratio ring / native. The goal
# (docs/collectives.md): ring busbw ≥ 0.9 × native from 4 MiB up.
#
#   scripts/bench-collectives.sh                 # bf16, np 2 and 4, 1 KiB .. 64 MiB by 4×, 3 repeats
#   NPS="2" DTYPE=fp32 REPEATS=5 scripts/bench-collectives.sh -n 40
#
# Environment: BUILD_DIR (default $DPTRAIN_BUILD, else build; configured and built if needed), NPS, DTYPE, REPEATS (medians over
# repeats: a shared or virtual machine's speed drifts), OUT_DIR (JSON and text of every run). Extra arguments go to
# dpbench (a repeated flag overrides the sweep's). More ranks than cores run oversubscribed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

BUILD_DIR=${BUILD_DIR:-$DPTRAIN_BUILD}
NPS=${NPS:-"2 4"}
DTYPE=${DTYPE:-bf16}
REPEATS=${REPEATS:-3}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench-collectives}
dptrain_require_counts NPS "$NPS" 1
dptrain_require_count REPEATS "$REPEATS" 1
[[ $DTYPE == bf16 || $DTYPE == fp32 ]] || dptrain_refuse "DTYPE must be bf16 or fp32, got '$DTYPE'"
CORES=$(getconf _NPROCESSORS_ONLN)
SWEEP=(--op allreduce --algo all -b 1K -e 64M -f 4 -c 1 -d "$DTYPE")

# Open MPI as root, in containers where ptrace-based single copy (CMA) is not allowed.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1

command -v jq > /dev/null || { echo "bench-collectives: jq is required (apt-get install jq)" >&2; exit 2; }
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
cmake --build "$BUILD_DIR" --target dpbench -j "$CORES" > /dev/null
mkdir -p "$OUT_DIR"

echo "# $(date -u +%FT%TZ)  $CORES cores  load $(cut -d' ' -f1-3 /proc/loadavg)  mpirun: $(mpirun --version | head -1)"
echo "# dpbench ${SWEEP[*]} $*   (${REPEATS} repeats per np)"
for np in $NPS; do
  for ((i = 1; i <= REPEATS; ++i)); do
    mpirun -np "$np" --oversubscribe "$BUILD_DIR/dpbench" "${SWEEP[@]}" "$@" --json "$OUT_DIR/np$np-$i.json" \
      > "$OUT_DIR/np$np-$i.txt"
    # A wrong element is a bug, not noise: stop.
    if ! jq -e 'all(.[]; .wrong == 0 or .wrong == null)' "$OUT_DIR/np$np-$i.json" > /dev/null; then
      echo "bench-collectives: wrong results at np $np (see $OUT_DIR/np$np-$i.txt)" >&2
      exit 1
    fi
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Per size: each algorithm's median busbw over the repeats, and the median over repeats of ring / native taken
# within one run (ring and native of a size run seconds apart, so a machine that slows down between runs
# moves both).
printf '\n%4s %12s %12s %12s %12s %12s  %s\n' np "size(B)" "ring GB/s" "tree GB/s" "native GB/s" "ring/native" \
  "goal (>= 0.9 from 4 MiB)"
for np in $NPS; do
  runs=()  # this call's files only: OUT_DIR may hold an earlier call's with more repeats
  for ((i = 1; i <= REPEATS; ++i)); do runs+=("$OUT_DIR/np$np-$i.json"); done
  jq -s -r --argjson goal_from $((4 << 20)) '
    def median: map(select(. != null)) | sort
      | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
        else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    [.[] | group_by(.size)[] | (map({key: .algo, value: .busbw}) | from_entries) + {size: .[0].size, ranks: .[0].ranks}]
    | group_by(.size)[]
    | [.[0].ranks, .[0].size, (map(.ring) | median), (map(.tree) | median), (map(.native) | median),
       (map(if .ring != null and .native > 0 then .ring / .native else null end) | median)]
    | map(. // "-")
    | . + [if .[1] < $goal_from or .[5] == "-" then "" elif .[5] >= 0.9 then "met" else "MISSED" end]
    | @tsv' "${runs[@]}" |
    awk -F'\t' 'function f(v, d) { return v == "-" ? v : sprintf("%." d "f", v) }
      { printf "%4d %12d %12s %12s %12s %12s  %s\n", $1, $2, f($3, 3), f($4, 3), f($5, 3), f($6, 2), $7 }'
done
