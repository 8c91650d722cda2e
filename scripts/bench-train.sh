#!/usr/bin/env bash
# Training throughput of one process: dptrain against PyTorch's CPU eager mode on the same architecture, shapes,
# optimizer and thread count, measured in the same run (alternating, twice each). Prints tokens/s and the ratio.
# Usage: scripts/bench-train.sh [config (default configs/small.toml)] [threads (default: all cores)] [steps]
# DPTRAIN_FLAGS: more dptrain flags (e.g. "--cpu-gemm auto"); PYTORCH_FLAGS: more flags of gpt_reference.py bench
# ("--bf16": BF16 autocast, the peer of "--cpu-gemm onednn-bf16"); ROUNDS: alternations (default 2).
set -euo pipefail
source "$(dirname "$0")/env.sh"
(($# <= 3)) || dptrain_refuse "takes at most 3 arguments (see its header), got $#: $*"
config="${1:-$DPTRAIN_ROOT/configs/small.toml}"
threads="${2:-$(nproc)}"
steps="${3:-12}"
dptrain_require_file config "$config"
dptrain_require_count threads "$threads" 1
dptrain_require_count steps "$steps" 8  # the median leaves out the warm-up and --overlap auto's trial: 7 steps
dptrain_require_count ROUNDS "${ROUNDS:-2}" 1
dptrain_config_shape "$config"
dptrain_bench_setup

dptrain_tokens_per_s() {
  "$DPTRAIN_BUILD/dptrain" --config "$config" --steps "$steps" --threads "$threads" --eval-every 0 \
    --quiet --log "$work/run.jsonl" ${DPTRAIN_FLAGS:-} >/dev/null || return
  dptrain_median_tokens_per_s "$work/run.jsonl"
}
pytorch_tokens_per_s() {
  dptrain_peer_value pytorch_tokens_per_s /usr/bin/python3 "$DPTRAIN_ROOT/scripts/gpt_reference.py" bench \
    --layers "$layers" --width "$width" --heads "$heads" --seq "$seq" --vocab "$vocab" --batch "$batch" \
    --steps "$steps" --warmup 7 --threads "$threads" ${PYTORCH_FLAGS:-}
}

dptrain_cpu_line
echo "config $(basename "$config"): L=$layers H=$width heads=$heads Q=$seq V=$vocab batch=$batch, $threads thread(s)"
echo "dptrain flags: ${DPTRAIN_FLAGS:-(defaults)}; PyTorch: ${PYTORCH_FLAGS:-(fp32 eager)}"
dptrain_peer_rounds pytorch_tok/s
