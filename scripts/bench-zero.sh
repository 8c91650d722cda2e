#!/usr/bin/env bash
# ZeRO stages 0–3 side by side: per-rank memory by category (measured against docs/systems-model.md's formula), bytes
# sent per step (measured against the formula) and step time, for the small config and for the GPT-2 124M shape
# (a few steps with short windows, so it fits a laptop).
#
#   scripts/bench-zero.sh              # np 4
#   NP=2 STEPS=4 scripts/bench-zero.sh
#
# MB = 10^6 bytes; memory is rank 0's, except "comm" and "peak RSS" (the largest rank's). "work" = the CPU backend's
# fp32 working copies. "step ms" = the median of the steps after the first (warm-up), with --overlap on (no trial).
set -euo pipefail
source "$(dirname "$0")/env.sh"
NP=${NP:-4}
STEPS=${STEPS:-4}
dptrain_require_count NP "$NP" 2  # each run calibrates a link first
dptrain_require_count STEPS "$STEPS" 2  # the first is warm-up
dptrain_build --target dptrain dpbench
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

CONFIGS=(
  "small|--config $DPTRAIN_ROOT/configs/small.toml"
  "gpt2-124m|--config $DPTRAIN_ROOT/configs/gpt2-124m.toml --seq 128 --batch $NP"
)
dptrain_calibrate "$NP" "$work/link.json"

echo "# $(date -u +%FT%TZ)  $(nproc) cores  load $(cut -d' ' -f1-3 /proc/loadavg)  np $NP  $STEPS steps per run"
printf '%-10s %5s %9s | %17s %17s %17s | %8s %8s %8s %9s | %21s\n' config stage "step ms" \
  "weights MB meas/mod" "grads MB meas/mod" "optim MB meas/mod" "comm MB" "activ MB" "work MB" "peak RSS" \
  "sent/step MB meas/mod"
for entry in "${CONFIGS[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  for stage in 0 1 2 3; do
    log="$work/$name-$stage.jsonl"
    # shellcheck disable=SC2086
    mpirun -np "$NP" --oversubscribe "$DPTRAIN_BUILD/dptrain" $flags --zero "$stage" --steps "$STEPS" --overlap on \
      --eval-every 0 --eval-windows "$NP" --check-every 0 --quiet --link "$work/link.json" --log "$log" > "$log.out"
    /usr/bin/python3 - "$log" "$name" "$stage" <<'PY'
import json, statistics, sys
path, name, stage = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
steps = [r for r in rows if "event" not in r]
summary = rows[-1]
mem, sent = summary["memory"], summary["bytes_sent_per_step"]
step_ms = statistics.median(r["step_ms"] for r in steps[1:])
mb = lambda x: x / 1e6
pair = lambda k: f"{mb(mem[k]['measured']):8.2f}/{mb(mem[k]['modelled']):<8.2f}"
print(f"{name:<10} {stage:>5} {step_ms:9.1f} | {pair('weights')} {pair('gradients')} {pair('optimizer')} |"
      f" {mb(mem['communication_buffers']['measured_max_rank']):8.2f} {mb(mem['activations']['measured']):8.2f}"
      f" {mb(mem['working_copies']['measured']):8.2f} {mb(mem['peak_resident']['measured_max_rank']):9.1f} |"
      f" {mb(sent['measured']):10.3f}/{mb(sent['modelled']):<10.3f}")
PY
  done
done
