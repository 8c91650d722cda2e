#!/usr/bin/env bash
# dptrain --device cuda over the fake CUDA runtime and NCCL (tests/comm/nccl_on_cpu/): the GPU path's host code
# (placement, CudaDevice, the BF16 backend with the kernels of kernels/ on the CPU harness queued on the compute
# stream, the NCCL transport on the engine's comm stream, ZeRO, overlap) trains a small model on 1-3 ranks, and the
# runs agree as scripts/gpu-check-multi.sh asks of a GPU: W = 2 and W = 3 against W = 1 and tree and native against
# ring within 1e-2 relative (BF16 activations: a different order of fp32 additions may flip a rounding), ZeRO 1-3
# against 0 within 1e-5 (the same sums in other buffers), no overlap and a blocking communicator against the default
# to 1e-12 (the same computation), the GELU and residual adds composed (--matmul-epilogues composed) against the
# GEMM epilogues within 1e-2 (BF16 roundings of other values), each run's summary saying which it ran; a checkpoint resumes bit for bit, and at another world size and stage within 1e-2;
# the steps after the first allocate no memory; --overlap auto, --check-every and --trace work there.
# A group stalled on every rank ends the job within --comm-timeout with the
# watchdog's line naming the unit and exit 4. Two ranks on one GPU measure the memory left before either allocates
# its model. NCCL_COMM_BLOCKING set on one rank is refused on both.
# Usage: dptrain_on_fake_cuda_test.sh DPTRAIN_ON_FAKE_CUDA MPIEXEC
set -uo pipefail
dptrain=$1
mpiexec=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPTRAIN_RANKS_PER_GPU=3  # the fake runtime has one device
fail() { echo "FAIL $*"; exit 1; }

for i in $(seq 400); do echo "the quick brown fox $i jumps over the lazy dog number $((i * 7 % 13))"; done > "$out/corpus.txt"
run() {  # NAME RANKS FLAGS...: a short run on the fake GPU, its losses in $out/NAME.jsonl
  local name=$1 ranks=$2
  shift 2
  timeout 100 "$mpiexec" -n "$ranks" --oversubscribe "$dptrain" --device cuda --data "$out/corpus.txt" --vocab 256 \
    --seq 8 --layers 1 --width 32 --heads 2 --batch 6 --steps 3 --warmup 1 --eval-every 0 --peak-tflops 1 \
    --link alpha=20us,bw=5GB/s --grad-dtype fp32 --bucket-mb 0 --comm-timeout 30 --log "$out/$name.jsonl" "$@" \
    > "$out/$name.txt" 2>&1
  local status=$?
  [ "$status" = 0 ] || { cat "$out/$name.txt"; fail "$name: exit $status"; }
}
run w1 1
run w1-composed 1 --matmul-epilogues composed
run w2 2
run w3-zero3 3 --zero 3
run w2-tree 2 --allreduce tree
run w2-native 2 --allreduce native
for z in 1 2 3; do run "w2-zero$z" 2 --zero "$z"; done
run w2-no-overlap 2 --overlap off
run w2-blocking 2 --nccl-blocking
# Checkpoints through the device: saved at steps 2 and 4 under ZeRO-2; pointed back at step 2, --resume takes steps
# 3 and 4 again bit for bit, and at W = 3 under ZeRO-3 (resharded) within 1e-2.
run w2-saved 2 --zero 2 --steps 4 --save-every 2 --save "$out/ck"
printf 'step-000002\n' > "$out/ck/latest"
run w2-resumed 2 --zero 2 --steps 4 --resume "$out/ck"
run w3-resumed 3 --zero 3 --steps 4 --resume "$out/ck"
# No allocation in the step: runs of 2 and 6 steps (ZeRO-3 with overlap: staging buffers for gathered weights and
# gradients, units in flight) make as many cudaMalloc and cudaMallocHost calls on every rank.
for steps in 2 6; do
  FAKE_CUDA_ALLOCATIONS="$out/allocations-$steps" run "allocations-$steps" 2 --zero 3 --overlap on --steps "$steps"
done
for r in 0 1; do
  [ "$(cat "$out/allocations-2.$r")" = "$(cat "$out/allocations-6.$r")" ] ||
    fail "rank $r: $(cat "$out/allocations-2.$r") allocations in 2 steps, $(cat "$out/allocations-6.$r") in 6"
done
# --overlap auto (both settings timed on steps 2-7), a weight-hash comparison every step and a trace of both ranks.
run w2-auto-trace 2 --overlap auto --steps 8 --check-every 1 --trace "$out/trace.json"
python3 - "$out/trace.json" <<'PY' || fail "the trace lacks a rank's compute or communication events"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
tracks = {(e["pid"], e.get("cat")) for e in events if e.get("ph") == "X"}
sys.exit(0 if tracks >= {(r, c) for r in (0, 1) for c in ("compute", "communication")} else 1)
PY
grep -qF '"matmul_epilogues":"GELU and the residual in the GEMM epilogues"' "$out/w1.jsonl" &&
  grep -qF '"matmul_epilogues":"composed"' "$out/w1-composed.jsonl" ||
  fail "the summaries do not say the epilogues were fused in w1 and composed in w1-composed"
grep -qF "over NCCL " "$out/w2.txt" && grep -qF "non-blocking" "$out/w2.txt" ||
  { cat "$out/w2.txt"; fail "w2: the start-up line does not name the NCCL transport"; }

python3 - "$out" <<'PY' || fail "losses disagree"
import json, sys
out = sys.argv[1]
def losses(name):
    return [r["loss"] for r in map(json.loads, open(f"{out}/{name}.jsonl")) if "loss" in r and "event" not in r]
failed = False
for run, reference, bound in [("w1-composed", "w1", 1e-2), ("w2", "w1", 1e-2), ("w3-zero3", "w1", 1e-2), ("w2-tree", "w2", 1e-2),
                              ("w2-native", "w2", 1e-2), ("w2-zero1", "w2", 1e-5), ("w2-zero2", "w2", 1e-5),
                              ("w2-zero3", "w2", 1e-5), ("w2-no-overlap", "w2", 1e-12), ("w2-blocking", "w2", 1e-12)]:
    a, b = losses(run), losses(reference)
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and len(a) == len(b) == 3 else None
    ok = worst is not None and worst <= bound
    failed |= not ok
    print(f"{run:14} against {reference:3}: {worst} (bound {bound}) {'ok' if ok else 'FAIL'}")
saved = losses("w2-saved")[2:]
for run, bound in [("w2-resumed", 0.0), ("w3-resumed", 1e-2)]:
    resumed = losses(run)
    worst = max(abs(x - y) / abs(y) for x, y in zip(resumed, saved)) if len(resumed) == len(saved) == 2 else None
    ok = worst is not None and worst <= bound
    failed |= not ok
    print(f"{run:14} against w2-saved steps 3-4: {worst} (bound {bound}) {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
PY

# GPUs are shared out among the ranks that see the same ones: two ranks each given a device of its own (a
# CUDA_VISIBLE_DEVICES per rank, as a scheduler's --gpus-per-task sets it) take the one each sees, without
# DPTRAIN_RANKS_PER_GPU; the same two seeing the same one device are refused, naming the count.
visible() {  # VALUE-OR-RANK NAME: two ranks with CUDA_VISIBLE_DEVICES set to VALUE, or to their rank with "rank"
  timeout 100 env -u DPTRAIN_RANKS_PER_GPU "$mpiexec" -n 2 --oversubscribe bash -c \
    'CUDA_VISIBLE_DEVICES=$([ "$0" = rank ] && echo "$OMPI_COMM_WORLD_RANK" || echo "$0") exec "$@"' "$1" \
    "$dptrain" --device cuda --data "$out/corpus.txt" --vocab 256 --seq 8 --layers 1 --width 32 --heads 2 --batch 6 \
    --steps 2 --eval-every 0 --peak-tflops 1 --link alpha=20us,bw=5GB/s --quiet > "$out/$2.txt" 2>&1
}
visible rank own || { cat "$out/own.txt"; fail "two ranks with a device each were refused"; }
status=0
visible 0 shared || status=$?
[ "$status" = 2 ] && grep -q "dptrain: --device cuda: 2 ranks on this node but 1 GPU(s) visible" "$out/shared.txt" ||
  { cat "$out/shared.txt"; fail "two ranks seeing one device: exit $status, expected 2 and the count"; }

# A stalled group (the third this process issues, in the first step) on every rank.
status=0
FAKE_NCCL_STALL_GROUP=3 timeout 60 "$mpiexec" -n 2 --oversubscribe "$dptrain" --device cuda --data "$out/corpus.txt" \
  --vocab 256 --seq 8 --layers 1 --width 32 --heads 2 --batch 6 --steps 3 --eval-every 0 --peak-tflops 1 \
  --link alpha=20us,bw=5GB/s --bucket-mb 0 --comm-timeout 2 > "$out/stall.txt" 2>&1 || status=$?
[ "$status" = 4 ] || { cat "$out/stall.txt"; fail "a stalled group: exit $status, expected 4"; }
grep -Eq "^dptrain: rank [01]: [a-z_]+ on unit .+ did not complete in 2 s$" "$out/stall.txt" ||
  { cat "$out/stall.txt"; fail "no 'dptrain: rank R: <collective> on unit <name> did not complete in 2 s' line"; }
# Two ranks on the one fake GPU, each seeing the other's allocations (FAKE_CUDA_SHARED_DEVICE), rank 1 measuring
# the memory left 2 s after rank 0: it counts of rank 0 only what rank 0 held when rank 0 measured, not rank 0's
# model (no rank allocates its model before every rank has measured; rank 1 counted 0.5 MB of it before that).
rm -f "$out"/device.*
status=0
FAKE_CUDA_SHARED_DEVICE="$out/device" timeout 60 "$mpiexec" --oversubscribe -n 1 "$dptrain" --device cuda \
  --data "$out/corpus.txt" --vocab 256 --seq 8 --layers 1 --width 32 --heads 2 --batch 6 --steps 1 --quiet : \
  -n 1 env FAKE_CUDA_MEMINFO_DELAY_S=2 "$dptrain" --device cuda --data "$out/corpus.txt" --vocab 256 --seq 8 \
  --layers 1 --width 32 --heads 2 --batch 6 --steps 1 --quiet > "$out/shared-device.txt" 2>&1 || status=$?
[ "$status" = 0 ] || { cat "$out/shared-device.txt"; fail "two ranks sharing the fake device: exit $status"; }
read -r rank0_own _ < "$out/device.0.seen" && read -r _ rank1_saw < "$out/device.1.seen" &&
  [ "$rank1_saw" = "$rank0_own" ] ||
  fail "rank 1 counted $rank1_saw bytes of rank 0's where rank 0 held ${rank0_own:-?} when it measured"

# NCCL_COMM_BLOCKING, which would override the communicator's mode, on one rank of two: refused on both.
status=0
timeout 60 "$mpiexec" --oversubscribe -n 1 "$dptrain" --device cuda --data "$out/corpus.txt" --vocab 256 --seq 8 \
  --layers 1 --width 32 --heads 2 --steps 1 : -n 1 env NCCL_COMM_BLOCKING=0 "$dptrain" --device cuda \
  --data "$out/corpus.txt" --vocab 256 --seq 8 --layers 1 --width 32 --heads 2 --steps 1 > "$out/env.txt" 2>&1 ||
  status=$?
[ "$status" = 2 ] && grep -q "rank 1: NCCL_COMM_BLOCKING is set ('0'): .*; unset it" "$out/env.txt" ||
  { cat "$out/env.txt"; fail "NCCL_COMM_BLOCKING=0 on rank 1: exit $status, expected 2 and the line"; }
echo "dptrain on the fake CUDA runtime and NCCL: all checks passed"
