#!/usr/bin/env bash
# GEMM efficiency of the cpu backend in training: the FLOP/s its GEMM-bearing operations reach inside a real step
# (dptrain --op-times: matmul forward/backward, attention), against the peak of the sgemm library the run used
# (--cpu-gemm; by-cpu by default), measured in the same run: dptrain's own probe (the MFU peak of a cpu run), every
# thread multiplying its own 512² and 1024² matrices at once, single-threaded calls as the backend makes them.
# OpenBLAS's peak through numpy (the same libopenblas; best of 512/1024/2048 square) is printed beside it. Prints
# each operation's GFLOP/s and its share of the peak, per run; the probe takes a tenth of a second, so a VM that
# stalls or speeds up during it moves the share of that run: ROUNDS runs (default 3), and the median share last.
# Usage: scripts/bench-gemm.sh [config (default configs/small.toml)] [threads (default: all cores)] [steps (12)]
# DPTRAIN_FLAGS: more dptrain flags (e.g. "--cpu-gemm onednn-bf16").
set -euo pipefail
source "$(dirname "$0")/env.sh"
(($# <= 3)) || dptrain_refuse "takes at most 3 arguments (see its header), got $#: $*"
config="${1:-$DPTRAIN_ROOT/configs/small.toml}"
threads="${2:-$(nproc)}"
steps="${3:-12}"
dptrain_require_file config "$config"
dptrain_require_count threads "$threads" 1
dptrain_require_count steps "$steps" 3  # --op-times leaves out step 1
dptrain_require_count ROUNDS "${ROUNDS:-3}" 1
dptrain_bench_setup

library_peak_gflops() {
  OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 - <<'PY'
import time
import numpy as np
best = 0.0
for n in (512, 1024, 2048):
    a = np.random.default_rng(1).random((n, n), dtype=np.float32)
    b = np.random.default_rng(2).random((n, n), dtype=np.float32)
    a @ b  # warm-up: thread pool, caches
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - start) / 1e9)
print(f"{best:.2f}")
PY
}

dptrain_cpu_line
echo "config $(basename "$config"), $threads thread(s), $steps steps (timed: 2..$steps)"
echo "OpenBLAS sgemm through numpy, best of 512/1024/2048 square, $threads thread(s): $(library_peak_gflops) GFLOP/s"
for round in $(seq 1 "${ROUNDS:-3}"); do
  echo "run $round:"
  "$DPTRAIN_BUILD/dptrain" --config "$config" --steps "$steps" --threads "$threads" --eval-every 0 --check-every 0 \
    --quiet --op-times --log "$work/run.jsonl" ${DPTRAIN_FLAGS:-} >/dev/null
  /usr/bin/python3 - "$work/run.jsonl" "$work/shares" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
summary = next(r for r in rows if r.get("event") == "summary")
peak = summary["peak_flops_per_rank"] / 1e9
print(f"library peak: {summary['cpu_gemm']['library']} (--cpu-gemm {summary['cpu_gemm']['requested']}), "
      f"dptrain's probe (512/1024 square per thread): {peak:.1f} GFLOP/s")
gemm = [r for r in summary["op_times"] if r.get("gflops")]
print(f"{'op':<22} {'ms/step':>9} {'share':>7} {'GFLOP/s':>9} {'of peak':>8}")
for r in gemm:
    print(f"{r['op']:<22} {r['ms_per_step']:9.1f} {100 * r['share']:6.1f}% {r['gflops']:9.1f} {100 * r['gflops'] / peak:7.0f}%")
flops = sum(r["gflops"] * r["ms_per_step"] for r in gemm) / 1e3  # GFLOP per step
ms = sum(r["ms_per_step"] for r in gemm)
print(f"{'all of them':<22} {ms:9.1f} {100 * sum(r['share'] for r in gemm):6.1f}% {flops / ms * 1e3:9.1f} "
      f"{100 * flops / ms * 1e3 / peak:7.0f}%")
with open(sys.argv[2], "a") as shares:
    print(f"{100 * flops / ms * 1e3 / peak:.1f}", file=shares)
PY
done
printf 'median share of the peak (all GEMM-bearing ops) %.0f%% over %d runs\n' "$(dptrain_median <"$work/shares")" \
  "${ROUNDS:-3}"
