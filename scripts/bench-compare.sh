#!/usr/bin/env bash
# Two builds of dptrain side by side in one run, alternating so that a machine whose speed drifts moves both:
# training tokens/s of one process (the small config), ring all-reduce busbw at np 2 (dpbench), and the per-rank
# memory summary of ZeRO-3 at np 4 on the GPT-2 124M shape with 128-token windows. For a change that must not
# lose speed: build the old commit into its own folder, then
#
#   git worktree add --detach /tmp/before <old commit>
#   cmake -S /tmp/before -B /tmp/before/build -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_TESTS=OFF
#   cmake --build /tmp/before/build --target dptrain dpbench -j
#   scripts/bench-compare.sh /tmp/before/build build
#
# Environment: ROUNDS (alternations, default 3), THREADS (training threads, default all cores), STEPS (default 12).
set -euo pipefail
source "$(dirname "$0")/env.sh"
[[ $# -eq 2 ]] || { echo "usage: scripts/bench-compare.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR" >&2; exit 2; }
builds=("$1" "$2")
names=(before after)
for b in "${builds[@]}"; do
  [[ -x $b/dptrain && -x $b/dpbench ]] || { echo "bench-compare: $b has no dptrain and dpbench" >&2; exit 2; }
done
cores=$(nproc)  # before OMP_NUM_THREADS, which nproc obeys
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$cores}
STEPS=${STEPS:-12}
dptrain_require_count ROUNDS "$ROUNDS" 1
dptrain_require_count THREADS "$THREADS" 1
dptrain_require_count STEPS "$STEPS" 8  # the median leaves out the warm-up and --overlap auto's trial: 7 steps
export OMP_NUM_THREADS=$THREADS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "# $(date -u +%FT%TZ)  $cores cores  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# AVX-512: $(grep -o -m1 -w 'avx512f' /proc/cpuinfo || echo no)  AVX512_BF16: $(grep -o -m1 -w 'avx512_bf16' /proc/cpuinfo || echo no)"
echo
echo "## training, 1 process × $THREADS thread(s), configs/small.toml, $STEPS steps: median tokens/s"
printf '%-6s %12s %12s %8s\n' round before after ratio
for ((r = 1; r <= ROUNDS; ++r)); do
  t=()
  for i in 0 1; do
    "${builds[$i]}/dptrain" --config "$DPTRAIN_ROOT/configs/small.toml" --steps "$STEPS" --threads "$THREADS" \
      --eval-every 0 --check-every 0 --peak-tflops 1 --link nvlink-h100 --quiet --log "$work/train-$i.jsonl" >/dev/null
    t+=("$(dptrain_median_tokens_per_s "$work/train-$i.jsonl")")
  done
  awk -v r="$r" -v a="${t[0]}" -v b="${t[1]}" 'BEGIN { printf "%-6s %12.0f %12.0f %8.3f\n", r, a, b, b / a }'
done

echo
echo "## ring all-reduce, bf16, np 2: busbw GB/s (dpbench)"
printf '%-6s %12s %12s %12s %8s\n' round "size(B)" before after ratio
for ((r = 1; r <= ROUNDS; ++r)); do
  for i in 0 1; do
    OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe "${builds[$i]}/dpbench" --op allreduce --algo ring -b 1M -e 64M \
      -f 4 -d bf16 --json "$work/ring-$i.json" >/dev/null
  done
  jq -r -s --arg r "$r" '.[0] as $a | .[1] as $b | range($a | length) as $k
    | [$r, $a[$k].size, $a[$k].busbw, $b[$k].busbw, ($b[$k].busbw / $a[$k].busbw)] | @tsv' \
    "$work/ring-0.json" "$work/ring-1.json" | tee -a "$work/ring.tsv" |
    awk -F'\t' '{ printf "%-6s %12d %12.3f %12.3f %8.3f\n", $1, $2, $3, $4, $5 }'
done
for size in $(cut -f2 "$work/ring.tsv" | sort -nu); do
  printf '%-6s %12d %12s %12s %8.3f\n' median "$size" "" "" \
    "$(awk -F'\t' -v s="$size" '$2 == s { print $5 }' "$work/ring.tsv" | dptrain_median)"
done

echo
echo "## ZeRO-3, np 4, gpt2-124m with --seq 128 --batch 4, 2 steps: MB per rank (largest rank); step 2's time alone"
printf '%-7s %9s %9s %9s %9s %9s %9s %9s %10s\n' build weights grads optim comm activ work "peak RSS" "step-2 ms"
for i in 0 1; do
  OMP_NUM_THREADS=1 mpirun -np 4 --oversubscribe "${builds[$i]}/dptrain" --config "$DPTRAIN_ROOT/configs/gpt2-124m.toml" \
    --seq 128 --batch 4 --zero 3 --steps 2 --eval-every 0 --eval-windows 4 --check-every 0 --threads 1 --overlap on \
    --peak-tflops 1 --link nvlink-h100 --quiet --log "$work/zero-$i.jsonl" >/dev/null
  /usr/bin/python3 - "$work/zero-$i.jsonl" "${names[$i]}" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
m = rows[-1]["memory"]
steps = [r["step_ms"] for r in rows if "event" not in r]
mb = lambda k: m[k]["measured_max_rank"] / 1e6
print(f"{sys.argv[2]:<7} {mb('weights'):9.2f} {mb('gradients'):9.2f} {mb('optimizer'):9.2f} "
      f"{mb('communication_buffers'):9.2f} {mb('activations'):9.2f} {mb('working_copies'):9.2f} "
      f"{mb('peak_resident'):9.1f} {steps[-1]:10.1f}")
PY
done
