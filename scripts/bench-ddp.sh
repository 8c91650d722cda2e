#!/usr/bin/env bash
# Data-parallel training throughput on one machine: `mpirun -np N dptrain` (N ranks × T threads) against PyTorch
# DistributedDataParallel (gloo, N local processes × T threads, scripts/gpt_reference.py bench-ddp) on the same
# model and global batch, measured in the same run (alternating, twice each). Prints global tokens/s and the ratio,
# with the CPU model and its vector extensions (the figures depend on them).
# Usage: scripts/bench-ddp.sh [config (default configs/small.toml)] [ranks (default 2)] [threads per rank (1)] [steps (12)]
# DPTRAIN_FLAGS: more dptrain flags (e.g. "--cpu-gemm auto"); ROUNDS: alternations (default 2).
set -euo pipefail
source "$(dirname "$0")/env.sh"
(($# <= 4)) || dptrain_refuse "takes at most 4 arguments (see its header), got $#: $*"
config="${1:-$DPTRAIN_ROOT/configs/small.toml}"
ranks="${2:-2}"
threads="${3:-1}"
steps="${4:-12}"
dptrain_require_file config "$config"
dptrain_require_count ranks "$ranks" 1
dptrain_require_count threads "$threads" 1
dptrain_require_count steps "$steps" 8  # the median leaves out the warm-up and --overlap auto's trial: 7 steps
dptrain_require_count ROUNDS "${ROUNDS:-2}" 1
dptrain_config_shape "$config"
(( batch % ranks == 0 )) || dptrain_refuse "the config's global batch $batch is not divisible by $ranks ranks"
dptrain_bench_setup

# Global tokens/s, from rank 0's JSONL log.
dptrain_tokens_per_s() {
  mpirun -np "$ranks" --oversubscribe "$DPTRAIN_BUILD/dptrain" --config "$config" --steps "$steps" \
    --threads "$threads" --eval-every 0 --check-every 0 --quiet --log "$work/run.jsonl" ${DPTRAIN_FLAGS:-} >/dev/null || return
  dptrain_median_tokens_per_s "$work/run.jsonl"
}
pytorch_tokens_per_s() {
  dptrain_peer_value pytorch_ddp_tokens_per_s /usr/bin/python3 "$DPTRAIN_ROOT/scripts/gpt_reference.py" bench-ddp \
    --nproc "$ranks" --layers "$layers" --width "$width" --heads "$heads" --seq "$seq" --vocab "$vocab" \
    --batch "$batch" --steps "$steps" --warmup 7 --threads "$threads"
}

dptrain_cpu_line
echo "config $(basename "$config"): L=$layers H=$width heads=$heads Q=$seq V=$vocab global batch=$batch," \
  "$ranks ranks x $threads thread(s)"
echo "dptrain flags: ${DPTRAIN_FLAGS:-(defaults)}"
dptrain_peer_rounds ddp_tok/s
