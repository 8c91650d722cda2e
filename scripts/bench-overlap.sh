#!/usr/bin/env bash
# Overlap of gradient communication with the backward pass: step time and exposed communication with overlap on,
# off and auto (on and off timed on steps 2-7, the faster kept; its row is the steps after that), at several rank
# counts, for the small config and for a wide, shallow-batch config where communication
# weighs more. Prints medians over the steps after the first two, measured next to the α–β model (calibrated once
# per rank count with dpbench --fit).
#
#   scripts/bench-overlap.sh                  # np 2 and 4, 12 steps per run
#   NPS="2" STEPS=12 scripts/bench-overlap.sh
#   NPS=2 ONLY="tiny small" scripts/bench-overlap.sh   # only the configs named
#   DPTRAIN_MPI_WAIT=spin scripts/bench-overlap.sh     # the comm thread's wait policy (docs/cpu-speed.md)
#
# Columns: comm = wall time of the step's collectives on the comm thread; exposed = time the compute thread waited
# for them; hidden = the median of the steps' 1 − exposed/comm (each in [0, 1]); "model" = the same from the α–β times of the step's real units, released at
# the measured per-unit backward times (cost::simulate_overlap).
set -euo pipefail
source "$(dirname "$0")/env.sh"
NPS=${NPS:-"2 4"}
STEPS=${STEPS:-12}
ONLY=${ONLY:-}
dptrain_require_counts NPS "$NPS" 2  # each np calibrates a link first
dptrain_require_count STEPS "$STEPS" 8  # auto's row is of the steps after its trial (steps 2-7)
for name in $ONLY; do  # the names of CONFIGS below
  [[ " tiny small small/block wide " == *" $name "* ]] ||
    dptrain_refuse "ONLY: unknown config '$name' (expected tiny, small, small/block or wide)"
done
dptrain_build --target dptrain dpbench
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# name | flags
CONFIGS=(
  "tiny|--config $DPTRAIN_ROOT/configs/tiny.toml"
  "small|--config $DPTRAIN_ROOT/configs/small.toml"
  "small/block|--config $DPTRAIN_ROOT/configs/small.toml --bucket-mb 0"
  "wide|--config $DPTRAIN_ROOT/configs/small.toml --layers 4 --width 1024 --heads 16 --seq 16 --batch 4"
)

echo "# $(dptrain_cpu_line); wait policy ${DPTRAIN_MPI_WAIT:-sleep (default)}," \
  "mpi_yield_when_idle ${OMPI_MCA_mpi_yield_when_idle:-unset}"
echo "# $(date -u +%FT%TZ)  $(nproc) cores  load $(cut -d' ' -f1-3 /proc/loadavg)  $STEPS steps per run"
printf '%-12s %3s %8s %9s %9s %9s %7s | %9s %9s %7s %10s\n' config np overlap "step ms" "comm ms" "exposed" hidden \
  "comm mod" "exp mod" "hid mod" "step mod"
for np in $NPS; do
  dptrain_calibrate "$np" "$work/link-$np.json"
  for entry in "${CONFIGS[@]}"; do
    name=${entry%%|*}
    flags=${entry#*|}
    [[ -n $ONLY && " $ONLY " != *" $name "* ]] && continue
    for overlap in on off auto; do
      extra="--overlap $overlap"
      log="$work/${name//\//-}-$np-$overlap.jsonl"
      # shellcheck disable=SC2086
      mpirun -np "$np" --oversubscribe "$DPTRAIN_BUILD/dptrain" $flags $extra --steps "$STEPS" --eval-every 0 \
        --check-every 0 --quiet --link "$work/link-$np.json" --log "$log" > "$log.out"
      /usr/bin/python3 - "$log" "$name" "$np" "$overlap" <<'PY'
import json, statistics, sys
path, name, np, overlap = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
# auto: the steps after its trial (steps 2-7), labelled with the choice it made
first = 7 if overlap == "auto" else 2
steps = [r for r in rows if "event" not in r][first:]
if overlap == "auto":
    choice = next(r for r in rows if r.get("event") == "summary")["overlap_choice"]
    overlap = "auto:" + ("on" if choice["overlap"] else "off") if choice.get("decided") else "auto:?"
med = lambda k: statistics.median(r[k] for r in steps)
comm, exposed = med("comm_ms"), med("exposed_comm_ms")
comm_m, exposed_m = med("comm_model_ms"), med("exposed_comm_model_ms")
# The median of the steps' own hidden shares, each in [0, 100] % (a ratio of two medians can leave that range).
hidden = lambda e, c: statistics.median(100 * min(1, max(0, 1 - r[e] / r[c])) if r[c] > 0 else 0 for r in steps)
print(f"{name:<12} {np:>3} {overlap:>8} {med('step_ms'):9.1f} {comm:9.1f} {exposed:9.1f} "
      f"{hidden('exposed_comm_ms', 'comm_ms'):6.0f}% | {comm_m:9.1f} {exposed_m:9.1f} "
      f"{hidden('exposed_comm_model_ms', 'comm_model_ms'):6.0f}% {med('step_overlap_model_ms'):10.1f}")
PY
    done
  done
done
