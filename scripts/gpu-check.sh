#!/usr/bin/env bash
# The GPU check: one command on a bare GPU machine (no network, no Open MPI; CUDA 13, Python with PyTorch), within a
# deadline of 480 s (GPU_CHECK_SECONDS) so that a session of 10 minutes on the machine always returns the summary. Runs the
# build that scripts/gpu-bundle.sh packed (build-gpu.tar.xz, carried beside the sources), then
#   1. the device and library versions (nvidia-smi, nvcc, torch, the NCCL dptrain loads), and what ptxas and
#      cuobjdump say of the kernels (tests/kernels/kernel_resources_test.py: registers, spills, 16-byte accesses),
#   2. the GPU tests: every compute op on cuda against its reference, the whole model and 50 training steps of the
#      small shape against the cpu backend, bitwise repeatability and resume (gtest JSON and exit status per binary),
#   3. the benchmark: gpt2-124m at Q = 1024, the largest micro-batch of 64, 32, 16 that fits (a smaller one only
#      after a refusal or failure for memory), 30 steps — tokens/s, MFU, memory — beside PyTorch on the same shape
#      in the same run (eager with SDPA and BF16 autocast), the same 30 steps with --attention gemm where the first
#      run fused attention (cuDNN), 6 steps with --op-times (time and GEMM rate per op: where the time goes), then
#      the 30 steps again with --matmul-epilogues composed (what the GELU and residual epilogues gain); a run that
#      fails for anything but memory runs once more with the epilogues composed (benchmark_fallback),
#   4. compute-sanitizer memcheck, racecheck, synccheck and initcheck on the cuda op tests and the tiny model's
#      forward and backward (where the machine's runtime supports it),
#   5. torch.compile if time is left,
# and writes everything to $OUT, with the summary in $OUT/check-<date>.json (commit it under docs/gpu/), written on
# every exit: a step that runs out of time or crashes still leaves the summary of what ran. A test binary that
# crashed, timed out or left no readable result counts as failed, and so does every cuda test that was skipped (on
# the GPU machine a skip means the GPU path did not run), but for the skips the backend declares (finite
# differences need fp32 activations; a bitwise property it does not promise), named apart in the summary. Every
# step's timeout is cut to what the deadline leaves; a step with less than 20 s left is not started. The
# several-rank check is scripts/gpu-check-multi.sh.
# Usage (on the GPU machine, from the repository root): OUT=/some/dir scripts/gpu-check.sh
source "$(dirname "$0")/gpu-env.sh"
deadline=$(( started + ${GPU_CHECK_SECONDS:-480} ))
batch=0
bench_flags=()  # the benchmark's flags beyond its shape: none, or the fallback below
pytorch_eager=""
pytorch_compiled=""

# ---- the summary, written on every exit ----------------------------------------------------------------------------
# Exits as the check went: 0 when every GPU test passed and the benchmark measured, 1 otherwise (a set-up problem
# that ended the script earlier keeps its own status).
write_summary() {
  local code=$?
  python3 - "$OUT" "$batch" "$pytorch_eager" "$pytorch_compiled" "$(nccl_loaded_version)" "${bench_flags[*]}" \
    "${pt_batch:-}" <<'PY'
import glob, json, os, re, statistics, sys
out, batch, eager, compiled, nccl, fallback, pytorch_batch = sys.argv[1], int(sys.argv[2]), *sys.argv[3:8]
passed = failed = skipped = 0
failures, skipped_cuda, by_design = [], [], []
# A skip for what the backend declares it does not do (finite differences need fp32 activations, a bitwise
# property it does not promise: backend_fixture.hpp) is the same on every GPU, and its check is made another way
# (against the cpu backend); any other skip means the GPU path did not run.
BY_DESIGN = re.compile(r"finite differences need fp32 activations|does not promise")
reasons = {}
for log_path in glob.glob(os.path.join(out, "tests-*.txt")):
    current, text = None, []
    for line in open(log_path, errors="replace"):
        if line.startswith("[ RUN      ] "):
            current, text = line.split("] ", 1)[1].strip(), []
        elif line.startswith("[  SKIPPED ] ") and current:
            reasons[current] = " ".join(text)
        else:
            text.append(line.strip())
for status_path in sorted(glob.glob(os.path.join(out, "tests-*.status"))):
    name = os.path.basename(status_path)[len("tests-"):-len(".status")]
    status = open(status_path).read().strip()
    try:
        suites = json.load(open(os.path.join(out, f"tests-{name}.json"))).get("testsuites", [])
    except (OSError, ValueError):  # killed by its timeout, or crashed before gtest wrote the file
        failed += 1
        failures.append(f"{name}: no readable result (exit {status})")
        continue
    if status not in ("0", "1"):  # gtest exits 1 when a test failed; anything else is a crash or a timeout
        failed += 1
        failures.append(f"{name}: exit {status}")
    for suite in suites:
        for t in suite.get("testsuite", []):
            full = suite["name"] + "." + t["name"]
            if "DISABLED_" in full:  # a study run by hand (gtest's --gtest_also_run_disabled_tests), not a check
                continue
            if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                if BY_DESIGN.search(reasons.get(full, "")):
                    by_design.append(full)
                    continue
                skipped += 1
                skipped_cuda.append(full)
            elif t.get("failures"):
                failed += 1
                failures.append(full)
            else:
                passed += 1
sys.path.insert(0, "scripts")
from gpu_summary import machine
summary = {
    **machine(out, nccl),
    # A cuda test skipped on the GPU machine did not run there: counted as failed, and named; one skipped for
    # what the backend declares it does not do is named apart and counted in neither.
    "tests_passed": passed, "tests_failed": failed + skipped, "tests_skipped": skipped,
    "failed_tests": failures, "skipped_tests": skipped_cuda, "skipped_by_design": by_design,
    "batch": batch, "mfu": None, "tokens_per_s": None,
    "pytorch_tokens_per_s": float(eager) if eager else None,
    "pytorch_batch": int(pytorch_batch) if pytorch_batch else None,
    "pytorch_compile_tokens_per_s": float(compiled) if compiled else None,
}
# The "... exit N" each step appended to its log (None if unreadable); no key where the step did not run.
for key, name in [("kernel_resources_exit", "kernel-resources.txt")] + [
        (f"sanitizer_{tool}_exit", f"sanitizer-{tool}.txt") for tool in ("memcheck", "racecheck", "synccheck", "initcheck")]:
    p = os.path.join(out, name)
    if os.path.exists(p):
        last = open(p).read().strip().split()
        summary[key] = int(last[-1]) if last and last[-1].lstrip("-").isdigit() else None
# The kernels initcheck found reading memory it saw no write to, and how often (every error is printed).
p = os.path.join(out, "sanitizer-initcheck.txt")
if os.path.exists(p):
    flagged = {}
    lines = open(p, errors="replace").read().splitlines()
    for i, line in enumerate(lines[:-1]):
        if "Uninitialized" in line and "by cudaMemcpy" in line:  # a copy to the host, not a kernel
            flagged["cudaMemcpy source"] = flagged.get("cudaMemcpy source", 0) + 1
        elif "Uninitialized" in line and " at " in lines[i + 1]:
            kernel = lines[i + 1].split(" at ", 1)[1].split("(")[0].strip()
            flagged[kernel] = flagged.get(kernel, 0) + 1
    summary["sanitizer_initcheck_kernels"] = flagged
# The kernels racecheck reported shared-memory hazards in, and how often.
p = os.path.join(out, "sanitizer-racecheck.txt")
if os.path.exists(p):
    races = {}
    for line in open(p, errors="replace"):
        found = re.search(r"Race reported between \w+ access at ([^+\s(]+)", line)
        if found:
            races[found.group(1)] = races.get(found.group(1), 0) + 1
    summary["sanitizer_racecheck_kernels"] = races
def training_run(log):
    """The medians of a training log's steps after the warm-up, and its summary record (None where absent)."""
    if not os.path.exists(log):
        return None, None, None
    rows = []
    for line in open(log):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    steps = [r for r in rows if "step" in r and "event" not in r][5:]  # after the warm-up steps
    end = [r for r in rows if r.get("event") == "summary"]
    tokens = statistics.median(r["tokens_per_s"] for r in steps) if steps else None
    mfu = statistics.median(r["mfu"] for r in steps) if steps else None
    return tokens, mfu, end[-1] if end else None
if batch:
    summary["tokens_per_s"], summary["mfu"], end = training_run(os.path.join(out, f"train-b{batch}.jsonl"))
    if end:
        summary["memory"] = end.get("memory")
        summary["attention"] = end.get("attention")
        summary["matmul_epilogues"] = end.get("matmul_epilogues")
    tokens, mfu, end = training_run(os.path.join(out, "train-gemm.jsonl"))
    if tokens:
        summary["gemm_attention"] = {"tokens_per_s": tokens, "mfu": mfu, "memory": end and end.get("memory")}
    tokens, mfu, end = training_run(os.path.join(out, "train-composed.jsonl"))
    if tokens:
        summary["composed_epilogues"] = {"tokens_per_s": tokens, "mfu": mfu, "memory": end and end.get("memory")}
# The benchmark's flags where its first run failed (not for memory) and it ran again with them, and that run's
# last line before its exit status: the error.
if fallback:
    failed_runs = sorted(glob.glob(os.path.join(out, "train-b*-fused-failed.txt")))
    lines = [l for l in open(failed_runs[0], errors="replace").read().splitlines() if l.strip()] if failed_runs else []
    summary["benchmark_fallback"] = {"flags": fallback, "first_run_error": lines[-2] if len(lines) > 1 else None}
op_log = os.path.join(out, "op-times.jsonl")
if os.path.exists(op_log):
    for line in open(op_log):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("event") == "summary" and "op_times" in row:
            summary["op_times"] = row["op_times"]
            summary["op_times_by_shape"] = row.get("op_times_by_shape")
if summary["tokens_per_s"] and summary["pytorch_tokens_per_s"]:
    summary["ratio_to_pytorch_eager"] = summary["tokens_per_s"] / summary["pytorch_tokens_per_s"]
name = os.path.join(out, f"check-{summary['date']}.json")
json.dump(summary, open(name, "w"), indent=2)
print(json.dumps(summary, indent=2))
sys.exit(0 if summary["tests_failed"] == 0 and summary["tokens_per_s"] else 1)
PY
  local verdict=$?
  log "done in $(( $(date +%s) - started )) s"
  exit $(( code != 0 ? code : verdict ))
}
trap write_summary EXIT
# Every test binary counts as failed until it has run: an early exit (a failed build, the deadline) leaves them so.
for name in compute_test dp_test train_test; do
  rm -f "$OUT/tests-$name.json"
  echo not-started > "$OUT/tests-$name.status"
done

# ---- 1b. the kernels' machine code --------------------------------------------------------------------------------
# ptxas's report (registers, stack, spills) and the 16-byte accesses of the vectorised kernels, in PTX and, with this
# machine's cuobjdump, in SASS (CI reads the PTX only): tests/kernels/kernel_resources_test.py with this nvcc.
seconds=$(step_timeout 40)
nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -n "$nvcc_path" ] && [ "$seconds" -ge 20 ]; then
  log "kernel resources for sm_90 (at most $seconds s)"
  timeout -k 10 "$seconds" python3 tests/kernels/kernel_resources_test.py "$nvcc_path" . > "$OUT/kernel-resources.txt" 2>&1
  echo "exit $?" >> "$OUT/kernel-resources.txt"
  tail -2 "$OUT/kernel-resources.txt"
fi

# ---- 2. GPU tests ------------------------------------------------------------------------------------------------
run_tests() {  # binary, gtest filter, seconds
  local name=$1 filter=$2 seconds
  seconds=$(step_timeout "$3")
  if [ "$seconds" -lt 20 ]; then log "tests: $name not started: the deadline is near (counted as failed)"; return; fi
  log "tests: $name --gtest_filter=$filter (at most $seconds s)"
  ours timeout -k 10 "$seconds" "$bin/$name" --gtest_filter="$filter" --gtest_output="json:$OUT/tests-$name.json" \
    > "$OUT/tests-$name.txt" 2>&1
  echo $? > "$OUT/tests-$name.status"
  tail -3 "$OUT/tests-$name.txt"
}
# The cuda backend's instances only: '/cuda' and the attention shapes '/cuda_B…', and the same with the GEMM
# attention where the build fuses it ('/cuda_gemm_attention…'); not '/cuda_kernels_on_cpu…', the CPU harness, which
# CI runs.
run_tests compute_test '*/cuda:*/cuda_B*:*/cuda_gemm_attention*' 150
run_tests dp_test 'Backends/*/cuda:Backends/*/cuda_gemm_attention' 150
run_tests train_test 'Backends/*/cuda:Backends/*/cuda_gemm_attention' 90

# ---- 3. the benchmark -----------------------------------------------------------------------------------------------
python3 - "$OUT/corpus.txt" <<'PY'
import random, sys
random.seed(1)
words = [''.join(random.choice('etaoinshrdlucmfwyp') for _ in range(random.randint(2, 9))) for _ in range(5000)]
with open(sys.argv[1], 'w') as f:
    f.write(' '.join(random.choice(words) for _ in range(1_500_000)))
PY
# The GELU and residual epilogues are the newest GPU code: where the run fails for anything but memory, it is run
# once more with them composed (--matmul-epilogues composed), so that a failure there still leaves the goal's
# figures, of the composed step, with the first run's log kept and the fallback named in the summary.
b_index=0
batches=(64 32 16)
while [ "$b_index" -lt ${#batches[@]} ]; do
  b=${batches[$b_index]}
  seconds=$(step_timeout 150)
  if [ "$seconds" -lt 30 ]; then log "dptrain gpt2-124m --batch $b not started: the deadline is near"; break; fi
  log "dptrain gpt2-124m --batch $b${bench_flags[*]:+ ${bench_flags[*]}} (at most $seconds s)"
  ours timeout -k 10 "$seconds" "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" \
    --batch "$b" --steps 30 --warmup 2 --eval-every 0 "${bench_flags[@]}" --log "$OUT/train-b$b.jsonl" \
    > "$OUT/train-b$b.txt" 2>&1
  status=$?
  echo "exit $status" >> "$OUT/train-b$b.txt"
  tail -4 "$OUT/train-b$b.txt"
  if [ $status -eq 0 ]; then batch=$b; break; fi
  # Stopped at its time limit (timeout's SIGTERM: dptrain saves nothing here and exits 143 after its step; 124 or
  # 137 where it did not): the steps it logged are the figures, when there are enough for the median of steps 6 on;
  # a run that slow would only time out again, smaller or composed.
  if [ $status -eq 124 ] || [ $status -eq 137 ] || [ $status -eq 143 ]; then
    logged=$(python3 - "$OUT/train-b$b.jsonl" <<'PY' 2>/dev/null || echo 0
import json, sys
count = 0
for line in open(sys.argv[1]):
    try:
        record = json.loads(line)
    except ValueError:  # the last line cut short by the kill
        continue
    count += "step" in record and "event" not in record
print(count)
PY
)
    if [ "$logged" -ge 8 ]; then batch=$b; fi
    break
  fi
  # A run too large for the GPU is retried smaller; any other failure once with the epilogues composed, then not
  # again (it would fail again, and the time is the benchmark's).
  if grep -qiE "out of memory|of memory per rank|cudaErrorMemoryAllocation" "$OUT/train-b$b.txt"; then
    b_index=$((b_index + 1))
  elif [ ${#bench_flags[@]} -eq 0 ]; then
    bench_flags=(--matmul-epilogues composed)
    mv "$OUT/train-b$b.txt" "$OUT/train-b$b-fused-failed.txt"
    rm -f "$OUT/train-b$b.jsonl"
  else
    break
  fi
done
# The median of steps 6-30, as dptrain's (summary above: the first 5 left out). At dptrain's batch, or at 64 where
# dptrain's benchmark gave none: PyTorch's figures do not depend on it.
pt_batch=$((batch > 0 ? batch : 64))
torch_bench() {  # extra flags, output name, seconds; with the machine's own libraries, not the bundle's
  timeout -k 10 "$3" python3 scripts/gpt_reference.py bench --device cuda --layers 12 --width 768 --heads 12 --seq 1024 \
    --vocab 50257 --batch "$pt_batch" --steps 30 --warmup 5 $1 > "$OUT/$2.txt" 2>&1
  awk '/^pytorch_tokens_per_s/ {print $2}' "$OUT/$2.txt"
}
# The same run with the GEMM attention (--attention gemm: the score products and softmax kernels, the probabilities
# kept), where the one above fused it: what the fused attention gains, in the same call.
if [ "$batch" -gt 0 ] && grep -q '"attention":"fused' "$OUT/train-b$batch.jsonl"; then
  seconds=$(step_timeout 60)
  if [ "$seconds" -ge 30 ]; then
    log "dptrain gpt2-124m --batch $batch --attention gemm (at most $seconds s)"
    ours timeout -k 10 "$seconds" "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" \
      --batch "$batch" --steps 30 --warmup 2 --eval-every 0 "${bench_flags[@]}" --attention gemm \
      --log "$OUT/train-gemm.jsonl" > "$OUT/train-gemm.txt" 2>&1
    echo "exit $?" >> "$OUT/train-gemm.txt"
    tail -2 "$OUT/train-gemm.txt"
  fi
fi
seconds=$(step_timeout 120)
if [ "$seconds" -ge 30 ]; then
  log "PyTorch eager, batch $pt_batch (at most $seconds s)"; pytorch_eager=$(torch_bench "" pytorch-eager "$seconds")
fi
if [ "$batch" -gt 0 ]; then
  # Where the time goes: every op timed between syncs of the compute stream (slower than the run above; the shares
  # and the GEMMs' rates are what it is for).
  seconds=$(step_timeout 60)
  if [ "$seconds" -ge 30 ]; then
    log "dptrain gpt2-124m --batch $batch --op-times, 6 steps (at most $seconds s)"
    ours timeout -k 10 "$seconds" "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" \
      --batch "$batch" --steps 6 --warmup 2 --eval-every 0 "${bench_flags[@]}" --op-times --log "$OUT/op-times.jsonl" \
      > "$OUT/op-times.txt" 2>&1
    echo "exit $?" >> "$OUT/op-times.txt"
  fi
fi
# After the goal's figures and the op times: the same run with the GELU and the residual adds composed
# (--matmul-epilogues composed: the products, then the GELU and accumulate kernels): what the epilogues gain; not
# where the benchmark itself had to compose them.
if [ "$batch" -gt 0 ] && [ ${#bench_flags[@]} -eq 0 ]; then
  seconds=$(step_timeout 60)
  if [ "$seconds" -ge 30 ]; then
    log "dptrain gpt2-124m --batch $batch --matmul-epilogues composed (at most $seconds s)"
    ours timeout -k 10 "$seconds" "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" \
      --batch "$batch" --steps 30 --warmup 2 --eval-every 0 --matmul-epilogues composed \
      --log "$OUT/train-composed.jsonl" > "$OUT/train-composed.txt" 2>&1
    echo "exit $?" >> "$OUT/train-composed.txt"
    tail -2 "$OUT/train-composed.txt"
  fi
fi

# ---- 4. sanitizers on the op tests and the whole model's forward and backward ------------------------------------
# Every kernel runs: the ops forward, the optimizer, attention, and the tiny model's backward (GptGradient, whose
# finite-difference checks skip BF16 backends but whose accumulation and repeatability tests run every backward
# kernel). memcheck (out of bounds, misaligned), racecheck (shared memory), synccheck (barriers), initcheck (reads of
# memory never written: the padding of the logits' rows included). compute-sanitizer starts the program through
# `env`, which gives it the bundle's libraries (the tool keeps the machine's own); --target-processes all follows it.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$sanitizer" ] || log "compute-sanitizer not found (on PATH or in /usr/local/cuda/bin): the sanitizers not run"
if [ -n "$sanitizer" ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    seconds=$(step_timeout 60)
    if [ "$seconds" -lt 20 ]; then log "compute-sanitizer $tool not started: the deadline is near"; continue; fi
    log "compute-sanitizer --tool $tool (at most $seconds s)"
    limit=()
    [ "$tool" = initcheck ] && limit=(--print-limit 100000)  # every error, for the summary's count per kernel
    timeout -k 10 "$seconds" "$sanitizer" --tool "$tool" "${limit[@]}" --target-processes all --error-exitcode 9 \
      env LD_LIBRARY_PATH="$bundle_lib:$LD_LIBRARY_PATH" "$bin/compute_test" \
      --gtest_filter='*OpForward.*/cuda:*MatmulGelu.*/cuda:*Optimizer.*/cuda:*AttentionForward.*/cuda_B*:*GptGradient.BackwardAccumulates/cuda:*GptGradient.RepeatsBitwise/cuda' \
      > "$OUT/sanitizer-$tool.txt" 2>&1
    echo "$tool exit $?" | tee -a "$OUT/sanitizer-$tool.txt"
  done
fi

# ---- 5. torch.compile, if time is left ------------------------------------------------------------------------------
seconds=$(step_timeout 150)
if [ "$seconds" -ge 90 ]; then
  log "PyTorch torch.compile, batch $pt_batch (at most $seconds s)"
  pytorch_compiled=$(torch_bench --compile pytorch-compile "$seconds")
fi
