#!/usr/bin/env bash
# The several-rank GPU check: a second call on the bare GPU machine (after scripts/gpu-check.sh, or alone), within
# a deadline of 420 s (GPU_CHECK_SECONDS; every step's timeout is cut to what it leaves, and the summary is written
# on every exit). Two ranks share the one GPU (DPTRAIN_RANKS_PER_GPU=2), started by the Open MPI the
# bundle carries (scripts/gpu-mpirun.sh). NCCL up to 2.29 refuses two ranks on one device unless each looks like a
# host of its own (a distinct NCCL_HOSTID), which sends their traffic through host memory (NET/Socket); from 2.30,
# NCCL_MULTI_RANK_GPU_ENABLE=1 lets them share the device. Either way the figures are of that path, never NVLink's.
#   1. dpbench --device cuda: all-reduce, ring/tree/native, 1 MiB–1 GiB, -c 1, native as NCCL_ALGO=Ring
#      NCCL_PROTO=Simple, with NCCL's transport lines (NCCL_DEBUG=INFO) kept in $OUT/dpbench-nccl.txt; then the ring
#      alone unpipelined (--ring-piece chunk: one NCCL group per round); then ring and native, 16–256 MiB, with
#      NCCL_NCHANNELS_PER_NET_PEER=4 (NCCL 2.28 gives send/recv over a network 2 channels per peer, its collectives
#      more); then 8 B-1 MiB on a non-blocking and on a blocking communicator (--nccl-blocking), the host's cost per
#      operation either way;
#   2. training on 2 ranks, small config, 20 steps, --comm-timeout 30, losses compared: W = 2 against W = 1 on the
#      same global batch, tree and native against ring and ZeRO 1–3 against 0 (fp32 wire: 1e-5 relative on the cpu
#      backend, the CPU suite's bound, 1e-2 on cuda, whose BF16 activations may round differently; BF16 wire: 1e-2),
#      no overlap against overlap and a blocking communicator against non-blocking (1e-12: the same additions in the
#      same order);
#   3. gpt2-124m at Q = 1024 on 2 ranks, global batch 16, --zero 0..3 with --overlap on (no trial steps in the
#      medians), 8 steps each: step time, exposed communication, memory per rank; then global batch 192 (96 windows
#      a rank; 128 on a GPU of less than 120 GB), where the backward of the two ranks sharing the GPU takes about as long as the gradients' 249 MB
#      over these sockets: the exposed communication against the step where the model says the collectives fit
#      inside backward (the goal's case);
# and writes the summary to $OUT/check-multi-<date>.json (commit it under docs/gpu/).
# Usage (on the GPU machine, from the repository root): OUT=/some/dir scripts/gpu-check-multi.sh
# GPU_CHECK_DEVICE=cpu tries the script's own workings where there is no GPU: the training comparisons run on the
# cpu backend, dpbench --device cuda is expected to refuse, and the gpt2-124m runs are left out.
source "$(dirname "$0")/gpu-env.sh"
deadline=$(( started + ${GPU_CHECK_SECONDS:-420} ))
device="${GPU_CHECK_DEVICE:-cuda}"

# ---- the summary, written on every exit (a step that runs out of time still leaves what ran) ----------------------
# Exits as the check went: 0 when every comparison held and dpbench found no wrong element (on a GPU), else 1.
write_summary() {
  local code=$?
  python3 - "$OUT" "$share" "$device" "$(nccl_loaded_version)" <<'PY'
import glob, json, os, re, statistics, sys
sys.path.insert(0, "scripts")
from gpu_summary import machine
out, share, device, nccl = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

def records(path):  # the lines that parse (a run cut by its timeout may leave half a line)
    try:
        lines = open(path).readlines()
    except OSError:
        return []
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pass
    return parsed

def document(path, empty):
    try:
        return json.load(open(path))
    except (OSError, ValueError):  # missing, or left empty by a run that failed
        return empty

def losses(name):
    return [r["loss"] for r in records(os.path.join(out, f"small-{name}.jsonl")) if "loss" in r and "event" not in r]

def max_relative(a, b):
    if not a or len(a) != len(b):
        return None
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))

nccl_log = open(os.path.join(out, "dpbench-nccl.txt")).read() if os.path.exists(os.path.join(out, "dpbench-nccl.txt")) else ""
transport = sorted(set(re.findall(r"via (NET/\S+|P2P/\S+|SHM/\S+|P2P|SHM)", nccl_log)))
rows = document(os.path.join(out, "dpbench-cuda.json"), [])
busbw = {(r["size"], r["algo"]): r["busbw"] for r in rows}
ratio = {str(size): busbw[(size, "ring")] / busbw[(size, "native")]
         for (size, algo) in busbw if algo == "ring" and (size, "native") in busbw and busbw[(size, "native")] > 0}
chunk_busbw = {r["size"]: r["busbw"] for r in document(os.path.join(out, "dpbench-cuda-chunk.json"), [])}
ratio_chunk = {str(size): chunk_busbw[size] / busbw[(size, "native")]
               for size in chunk_busbw if (size, "native") in busbw and busbw[(size, "native")] > 0}
# Ring against native, both measured in the call with 4 send/recv channels per network peer.
p2p4 = {(r["size"], r["algo"]): r["busbw"] for r in document(os.path.join(out, "dpbench-cuda-p2p4.json"), [])}
ratio_p2p4 = {str(size): p2p4[(size, "ring")] / p2p4[(size, "native")]
              for (size, algo) in p2p4 if algo == "ring" and p2p4.get((size, "native"), 0) > 0}
# Time per operation of the small sizes, blocking communicator over non-blocking, per algorithm and size.
small = {mode: {(r["algo"], r["size"]): r["time_us"] for r in document(os.path.join(out, f"dpbench-small-{mode}.json"), [])}
         for mode in ("non-blocking", "blocking")}
blocking_ratio = {}
for (algo, size), t in small["blocking"].items():
    base = small["non-blocking"].get((algo, size))
    if base:
        blocking_ratio.setdefault(algo, {})[str(size)] = t / base
comparisons = []
# The cpu backend's activations are fp32, and there the CPU suite's bounds hold (1e-5 between runs whose gradients
# differ in fp32 rounding only). The cuda backend stores activations in BF16 and cuBLASLt picks its kernels by shape
# and alignment (half the rows at W = 2, ZeRO-3's gathered weights in other buffers): a last-bit difference can flip
# a BF16 rounding (2^-8 relative), so runs that are not the same computation get 1e-2 there. Overlap on and off is
# the same computation on either device: 1e-12.
close = 1e-5 if device == "cpu" else 1e-2
for name, reference, bound in [("w2-fp32", "w1-fp32", close), ("w2-bf16", "w1-bf16", 1e-2),
                               ("w2-fp32-tree", "w2-fp32", close), ("w2-fp32-native", "w2-fp32", close),
                               ("w2-fp32-zero1", "w2-fp32", close), ("w2-fp32-zero2", "w2-fp32", close),
                               ("w2-fp32-zero3", "w2-fp32", close), ("w2-fp32-no-overlap", "w2-fp32", 1e-12),
                               ("w2-fp32-blocking", "w2-fp32", 1e-12)]:
    d = max_relative(losses(name), losses(reference))
    comparisons.append({"run": name, "against": reference, "max_relative_loss_difference": d, "bound": bound,
                        "passed": d is not None and d <= bound})
runs = []
def gpt2_run(name, **fields):  # medians of a gpt2-124m run's steps after the first two, and its memory
    rs = records(os.path.join(out, f"{name}.jsonl"))
    steps = [r for r in rs if "step" in r and "event" not in r][2:]
    end = [r for r in rs if r.get("event") == "summary"]
    run = {**fields, "steps": len(steps)}
    if steps:
        for key in ("step_ms", "exposed_comm_ms", "exposed_comm_model_ms", "comm_ms", "transfer_ms", "comm_model_ms",
                    "tokens_per_s", "mfu"):
            run[key] = statistics.median(r[key] for r in steps if key in r) if any(key in r for r in steps) else None
    if end:
        run["memory"] = end[-1].get("memory")
    return run
for z in range(4):
    runs.append(gpt2_run(f"gpt2-zero{z}", zero=z))
# The goal's case: exposed communication at most 10 % of the step where the model says the collectives fit inside
# backward (its exposed time under 10 % of the step as well).
batch_file = os.path.join(out, "gpt2-overlap-batch.txt")  # 192, or 128 on a GPU under 120 GB
overlap = gpt2_run("gpt2-overlap", zero=0,
                   batch=int(open(batch_file).read()) if os.path.exists(batch_file) else None)
if overlap.get("step_ms") and overlap.get("exposed_comm_ms") is not None and overlap.get("exposed_comm_model_ms") is not None:
    overlap["exposed_share"] = overlap["exposed_comm_ms"] / overlap["step_ms"]
    overlap["model_says_fits"] = overlap["exposed_comm_model_ms"] <= 0.1 * overlap["step_ms"]
    overlap["goal_met"] = overlap["exposed_share"] <= 0.1 if overlap["model_says_fits"] else None
summary = {
    **machine(out, nccl),
    "ranks": 2, "ranks_share_one_gpu_by": share,
    "transport": transport, "ring_vs_native_busbw": ratio, "ring_unpipelined_vs_native_busbw": ratio_chunk,
    "ring_vs_native_busbw_p2p_channels_4": ratio_p2p4,
    "small_allreduce_blocking_vs_nonblocking_time": blocking_ratio,
    "dpbench_wrong": sum(r["wrong"] or 0 for r in rows) if rows else None,
    "training_comparisons": comparisons, "gpt2_124m_two_ranks": runs, "gpt2_124m_overlap": overlap,
}
name = os.path.join(out, f"check-multi-{summary['date']}.json")
json.dump(summary, open(name, "w"), indent=2)
print(json.dumps(summary, indent=2))
held = bool(comparisons) and all(c["passed"] for c in comparisons)
sys.exit(0 if held and (device == "cpu" or summary["dpbench_wrong"] == 0) else 1)
PY
  local verdict=$?
  log "done in $(( $(date +%s) - started )) s"
  exit $(( code != 0 ? code : verdict ))
}
trap write_summary EXIT
export DPTRAIN_RANKS_PER_GPU=2 OMP_NUM_THREADS=2
nccl_version=$(python3 -c 'import ctypes; v = ctypes.c_int(); ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print(v.value)' 2>/dev/null || echo 0)
log "NCCL version code $nccl_version"
export NCCL_SOCKET_IFNAME=lo  # the machine has no network: NCCL's bootstrap (and NET/Socket) on the loopback
if [ "$nccl_version" -ge 23000 ]; then
  export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=16
  share="NCCL_MULTI_RANK_GPU_ENABLE=1"
else
  # Each rank a host of its own: their traffic goes through the network plugin, held to sockets on the loopback
  # (never InfiniBand or RoCE, should the machine have a port), so that the figures are of the path named.
  export NCCL_NET=Socket
  share="NCCL_HOSTID per rank, NET/Socket"
fi
# Two processes share the GPU time-sliced (no MPS is started): their kernels take turns on the device. A GPU in an
# exclusive compute mode lets only one of them make a context, so the two-rank steps are not started there.
compute_mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)
share="$share, time-sliced (no MPS), compute mode ${compute_mode:-unknown}"
two_ranks() {  # SECONDS PROGRAM ARGS...: two ranks on the one GPU, each a host of its own where NCCL needs it
  local seconds
  seconds=$(step_timeout "$1")
  shift
  if [ "$seconds" -lt 20 ]; then log "not started: the deadline is near"; return 124; fi
  if [ "$device" = cuda ] && [ -n "$compute_mode" ] && [ "$compute_mode" != Default ]; then
    log "not started: two ranks need the GPU's Default compute mode, it is $compute_mode"
    return 2
  fi
  timeout -k 10 "$seconds" scripts/gpu-mpirun.sh -np 2 bash -c \
    '[ "${NCCL_MULTI_RANK_GPU_ENABLE:-0}" = 1 ] || export NCCL_HOSTID=dptrain-rank-$OMPI_COMM_WORLD_RANK; exec "$@"' \
    rank "$@"
}

# ---- 1. dpbench -------------------------------------------------------------------------------------------------
log "dpbench --device cuda, 2 ranks ($share)"
NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,NET NCCL_DEBUG_FILE="$OUT/dpbench-nccl.%p.txt" \
  two_ranks 150 "$bin/dpbench" --device cuda --op allreduce --algo all -b 1M -e 1G -f 4 -n 5 -w 2 -c 1 \
  --comm-timeout 60 --json "$OUT/dpbench-cuda.json" > "$OUT/dpbench-cuda.txt" 2>&1
echo "dpbench exit $?" >> "$OUT/dpbench-cuda.txt"
cat "$OUT"/dpbench-nccl.*.txt > "$OUT/dpbench-nccl.txt" 2>/dev/null; rm -f "$OUT"/dpbench-nccl.*.txt
tail -25 "$OUT/dpbench-cuda.txt"
# The ring unpipelined (one group per round, no sub-chunks): with the sweep above it tells the host's cost per
# NCCL group (a non-blocking communicator starts a thread for each) from the pipelining's gain.
log "dpbench --device cuda, 2 ranks, ring with --ring-piece chunk"
NCCL_ALGO=Ring NCCL_PROTO=Simple two_ranks 60 "$bin/dpbench" --device cuda --op allreduce --algo ring --ring-piece chunk \
  -b 1M -e 256M -f 4 -n 5 -w 2 -c 0 --comm-timeout 30 --json "$OUT/dpbench-cuda-chunk.json" > "$OUT/dpbench-cuda-chunk.txt" 2>&1
echo "dpbench exit $?" >> "$OUT/dpbench-cuda-chunk.txt"
tail -9 "$OUT/dpbench-cuda-chunk.txt"
# The ring's send/recv get 2 channels per network peer by default (NCCL 2.28), the all-reduce more: ring and native
# again, from 16 MiB up, with 4 (the variable changes send/recv only).
log "dpbench --device cuda, 2 ranks, ring and native with NCCL_NCHANNELS_PER_NET_PEER=4"
NCCL_NCHANNELS_PER_NET_PEER=4 NCCL_ALGO=Ring NCCL_PROTO=Simple two_ranks 60 "$bin/dpbench" --device cuda \
  --op allreduce --algo all -b 16M -e 256M -f 4 -n 5 -w 2 -c 0 --comm-timeout 30 --json "$OUT/dpbench-cuda-p2p4.json" \
  > "$OUT/dpbench-cuda-p2p4.txt" 2>&1
echo "dpbench exit $?" >> "$OUT/dpbench-cuda-p2p4.txt"
tail -13 "$OUT/dpbench-cuda-p2p4.txt"

# Small messages, where an operation's time is mostly the host's: a non-blocking communicator (the default) against
# a blocking one (--nccl-blocking), which launches each group on the calling thread instead of a thread per group.
for mode in non-blocking blocking; do
  log "dpbench --device cuda, 2 ranks, 8 B-1 MiB, $mode communicator"
  flag=()
  [ "$mode" = blocking ] && flag=(--nccl-blocking)
  NCCL_ALGO=Ring NCCL_PROTO=Simple two_ranks 40 "$bin/dpbench" --device cuda --op allreduce --algo all -b 8 -e 1M -f 8 \
    -n 20 -w 5 -c 0 --comm-timeout 30 "${flag[@]}" --json "$OUT/dpbench-small-$mode.json" > "$OUT/dpbench-small-$mode.txt" 2>&1
  echo "dpbench exit $?" >> "$OUT/dpbench-small-$mode.txt"
  tail -11 "$OUT/dpbench-small-$mode.txt"
done

# ---- 2. correctness of training on two ranks ----------------------------------------------------------------------
python3 - "$OUT/corpus.txt" <<'PY'
import random, sys
random.seed(1)
words = [''.join(random.choice('etaoinshrdlucmfwyp') for _ in range(random.randint(2, 9))) for _ in range(5000)]
with open(sys.argv[1], 'w') as f:
    f.write(' '.join(random.choice(words) for _ in range(1_500_000)))
PY
train() {  # name ranks flags...: a small-config run on the GPU
  local name=$1 ranks=$2
  shift 2
  local args=(--device "$device" --config configs/small.toml --data "$OUT/corpus.txt" --batch 16 --steps 20
              --eval-every 0 --link alpha=20us,bw=5GB/s --comm-timeout 30 --log "$OUT/small-$name.jsonl" "$@")
  log "small $name: $ranks rank(s) $*"
  if [ "$ranks" = 1 ]; then
    local seconds
    seconds=$(step_timeout 60)  # `timeout 0` would mean no limit at all
    if [ "$seconds" -lt 20 ]; then log "not started: the deadline is near"; echo "exit 124" >> "$OUT/small-$name.txt"; return; fi
    ours timeout -k 10 "$seconds" "$bin/dptrain" "${args[@]}" > "$OUT/small-$name.txt" 2>&1
  else
    two_ranks 60 "$bin/dptrain" "${args[@]}" > "$OUT/small-$name.txt" 2>&1
  fi
  echo "exit $?" >> "$OUT/small-$name.txt"
}
train w1-fp32 1 --grad-dtype fp32
train w2-fp32 2 --grad-dtype fp32
train w1-bf16 1
train w2-bf16 2
train w2-fp32-tree 2 --grad-dtype fp32 --allreduce tree
train w2-fp32-native 2 --grad-dtype fp32 --allreduce native
for z in 1 2 3; do train "w2-fp32-zero$z" 2 --grad-dtype fp32 --zero "$z"; done
train w2-fp32-no-overlap 2 --grad-dtype fp32 --no-overlap
train w2-fp32-blocking 2 --grad-dtype fp32 --nccl-blocking

# ---- 3. gpt2-124m on two ranks, ZeRO 0-3 --------------------------------------------------------------------------
for z in 0 1 2 3; do
  [ "$device" = cuda ] || break
  log "gpt2-124m 2 ranks --zero $z"
  two_ranks 100 "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" --batch 16 \
    --steps 8 --warmup 2 --eval-every 0 --comm-timeout 60 --zero "$z" --overlap on --log "$OUT/gpt2-zero$z.jsonl" \
    > "$OUT/gpt2-zero$z.txt" 2>&1
  echo "exit $?" >> "$OUT/gpt2-zero$z.txt"
  tail -3 "$OUT/gpt2-zero$z.txt"
done
if [ "$device" = cuda ]; then
  # 96 windows a rank need about 2 × 44 GB of activations: on a GPU of less than 120 GB (an 80 GB H100), 64 a rank.
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  overlap_batch=$(( ${gpu_mib:-0} >= 120000 ? 192 : 128 ))
  echo "$overlap_batch" > "$OUT/gpt2-overlap-batch.txt"
  log "gpt2-124m 2 ranks, global batch $overlap_batch: the collectives inside backward"
  two_ranks 100 "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" --batch "$overlap_batch" \
    --steps 6 --warmup 2 --eval-every 0 --comm-timeout 60 --overlap on --log "$OUT/gpt2-overlap.jsonl" \
    > "$OUT/gpt2-overlap.txt" 2>&1
  echo "exit $?" >> "$OUT/gpt2-overlap.txt"
  tail -3 "$OUT/gpt2-overlap.txt"
fi

