#!/usr/bin/env bash
# Data-parallel training throughput on one machine: `mpirun -np N dptrain` (N ranks × T threads) against PyTorch
# DistributedDataParallel (gloo, N local processes × T threads, scripts/gpt_reference.py bench-ddp) on the same
# model and global batch, measured in the same run (alternating, twice each). Prints global tokens/s and the ratio,
# with the CPU model and its vector extensions (the figures depend on them).
# Usage: scripts/bench-ddp.sh [config (default configs/small.toml)] [ranks (default 2)] [threads per rank (1)] [steps (12)]
set -euo pipefail
source "$(dirname "$0")/env.sh"
config="${1:-$DPTRAIN_ROOT/configs/small.toml}"
ranks="${2:-2}"
threads="${3:-1}"
steps="${4:-12}"
DPTRAIN_SETUP_EXTRAS=1 "$DPTRAIN_ROOT/scripts/setup.sh"
dptrain_build --target dptrain
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

value() { grep -E "^$2 *=" "$1" | head -1 | sed 's/.*= *//'; }
layers=$(value "$config" layers); width=$(value "$config" width); heads=$(value "$config" heads)
seq=$(value "$config" seq); vocab=$(value "$config" vocab); batch=$(value "$config" batch)

# Median global tokens/s of the steps after the first two (warm-up), from rank 0's JSONL log.
dptrain_tokens_per_s() {
  mpirun -np "$ranks" --oversubscribe "$DPTRAIN_BUILD/dptrain" --config "$config" --steps "$steps" \
    --threads "$threads" --eval-every 0 --check-every 0 --quiet --log "$work/run.jsonl" >/dev/null
  /usr/bin/python3 - "$work/run.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and '"event"' not in l]
print(statistics.median(r["tokens_per_s"] for r in rows[2:]))
PY
}
pytorch_tokens_per_s() {
  /usr/bin/python3 "$DPTRAIN_ROOT/scripts/gpt_reference.py" bench-ddp --nproc "$ranks" --layers "$layers" \
    --width "$width" --heads "$heads" --seq "$seq" --vocab "$vocab" --batch "$batch" --steps "$steps" \
    --threads "$threads" 2>/dev/null | awk '/^pytorch_ddp_tokens_per_s/ {print $2}'
}

cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')
extensions=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512[a-z_0-9]*|amx[a-z_0-9]*)$' |
  tr '\n' ' ')
echo "cpu: $cpu, $(nproc) cores, vector extensions: ${extensions:-none}"
echo "config $(basename "$config"): L=$layers H=$width heads=$heads Q=$seq V=$vocab global batch=$batch," \
  "$ranks ranks x $threads thread(s)"
printf '%-8s %14s %14s %8s\n' round dptrain_tok/s ddp_tok/s ratio
for round in 1 2; do
  d=$(dptrain_tokens_per_s)
  p=$(pytorch_tokens_per_s)
  awk -v r="$round" -v d="$d" -v p="$p" 'BEGIN { printf "%-8s %14.0f %14.0f %8.2f\n", r, d, p, d / p }'
done
