#!/usr/bin/env bash
# The GPU check: one call on a bare GPU machine (no network, no Open MPI; CUDA 13, Python with PyTorch), sized to
# finish in under 8 minutes. Runs the build that scripts/gpu-bundle.sh packed (build-gpu.tar.xz, carried beside
# the sources), then
#   1. the device and library versions (nvidia-smi, nvcc, torch, NCCL),
#   2. the GPU tests: every compute op on cuda against its reference, the whole model and 50 training steps of the
#      small shape against the cpu backend, bitwise repeatability and resume (gtest JSON per binary),
#   3. compute-sanitizer memcheck and racecheck on the cuda op tests,
#   4. the benchmark: gpt2-124m at Q = 1024, the largest micro-batch of 64, 32, 16 that fits, 30 steps — tokens/s,
#      MFU, memory — beside PyTorch on the same shape in the same run (eager with SDPA and BF16 autocast, then
#      torch.compile),
# and writes everything to $OUT, with the summary in $OUT/check-<date>.json (commit it under docs/gpu/). The
# several-rank check is scripts/gpu-check-multi.sh, a second call of its own.
# Usage (on the GPU machine, from the repository root): OUT=/some/dir scripts/gpu-check.sh
source "$(dirname "$0")/gpu-env.sh"

# ---- 2. GPU tests ------------------------------------------------------------------------------------------
run_tests() {  # binary, gtest filter, seconds
  local name=$1 filter=$2 seconds=$3
  log "tests: $name --gtest_filter=$filter"
  timeout "$seconds" "$bin/$name" --gtest_filter="$filter" --gtest_output="json:$OUT/tests-$name.json" \
    > "$OUT/tests-$name.txt" 2>&1
  tail -3 "$OUT/tests-$name.txt"
}
run_tests compute_test '*/cuda:*/cuda_*' 150
run_tests dp_test 'CudaAgainstCpu.*:Backends/*/cuda' 180
run_tests train_test 'Backends/*/cuda' 120

# ---- 3. sanitizers on the op tests ----------------------------------------------------------------------------
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool"
    timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/compute_test" \
      --gtest_filter='*OpForward.*/cuda:*Optimizer.*/cuda:*AttentionForward.*/cuda_*' > "$OUT/sanitizer-$tool.txt" 2>&1
    echo "$tool exit $?" | tee -a "$OUT/sanitizer-$tool.txt"
  done
fi

# ---- 4. the benchmark -----------------------------------------------------------------------------------------
python3 - "$OUT/corpus.txt" <<'PY'
import random, sys
random.seed(1)
words = [''.join(random.choice('etaoinshrdlucmfwyp') for _ in range(random.randint(2, 9))) for _ in range(5000)]
with open(sys.argv[1], 'w') as f:
    f.write(' '.join(random.choice(words) for _ in range(1_500_000)))
PY
batch=0
for b in 64 32 16; do
  log "dptrain gpt2-124m --batch $b"
  timeout 150 "$bin/dptrain" --device cuda --config configs/gpt2-124m.toml --data "$OUT/corpus.txt" --batch "$b" \
    --steps 30 --warmup 2 --eval-every 0 --log "$OUT/train-b$b.jsonl" > "$OUT/train-b$b.txt" 2>&1
  status=$?
  tail -4 "$OUT/train-b$b.txt"
  if [ $status -eq 0 ]; then batch=$b; break; fi
done
torch_bench() {  # extra flags, output name, seconds
  timeout "$3" python3 scripts/gpt_reference.py bench --device cuda --layers 12 --width 768 --heads 12 --seq 1024 \
    --vocab 50257 --batch "${batch:-16}" --steps 30 $1 > "$OUT/$2.txt" 2>&1
  awk '/^pytorch_tokens_per_s/ {print $2}' "$OUT/$2.txt"
}
pytorch_eager=""; pytorch_compiled=""
if [ "$batch" -gt 0 ]; then
  log "PyTorch eager, batch $batch"; pytorch_eager=$(torch_bench "" pytorch-eager 120)
  elapsed=$(( $(date +%s) - started ))
  if [ $elapsed -lt 330 ]; then
    log "PyTorch torch.compile, batch $batch"; pytorch_compiled=$(torch_bench --compile pytorch-compile 150)
  fi
fi

# ---- summary ----------------------------------------------------------------------------------------------------
python3 - "$OUT" "$batch" "${pytorch_eager:-}" "${pytorch_compiled:-}" <<'PY'
import datetime, glob, json, os, re, statistics, subprocess, sys
out, batch, eager, compiled = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
passed = failed = skipped = 0
failures = []
for path in glob.glob(os.path.join(out, "tests-*.json")):
    for suite in json.load(open(path)).get("testsuites", []):
        for t in suite.get("testsuite", []):
            if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                skipped += 1
                continue
            if t.get("failures"):
                failed += 1; failures.append(suite["name"] + "." + t["name"])
            else:
                passed += 1
device = open(os.path.join(out, "device.txt")).read()
nccl = re.search(r"nccl ([0-9.]+)", device)
summary = {
    "commit": open("build-gpu/COMMIT").read().strip(),  # what the bundle was built from
    "date": datetime.date.today().isoformat(),
    "device": open(os.path.join(out, "device-name.txt")).read().strip() or "unknown",
    "nccl_version": nccl.group(1) if nccl else "unknown",
    "tests_passed": passed, "tests_failed": failed, "tests_skipped": skipped, "failed_tests": failures,
    "batch": batch, "mfu": None, "tokens_per_s": None,
    "pytorch_tokens_per_s": float(eager) if eager else None,
    "pytorch_compile_tokens_per_s": float(compiled) if compiled else None,
}
for tool in ("memcheck", "racecheck"):
    p = os.path.join(out, f"sanitizer-{tool}.txt")
    if os.path.exists(p):
        summary[f"sanitizer_{tool}_exit"] = int(open(p).read().strip().split()[-1])
log = os.path.join(out, f"train-b{batch}.jsonl")
if batch and os.path.exists(log):
    rows = [json.loads(l) for l in open(log)]
    steps = [r for r in rows if "step" in r and "event" not in r][5:]  # after the warm-up steps
    end = [r for r in rows if r.get("event") == "summary"]
    if steps:
        summary["tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in steps)
        summary["mfu"] = statistics.median(r["mfu"] for r in steps)
    if end:
        summary["memory"] = end[-1].get("memory")
if summary["tokens_per_s"] and summary["pytorch_tokens_per_s"]:
    summary["ratio_to_pytorch_eager"] = summary["tokens_per_s"] / summary["pytorch_tokens_per_s"]
name = os.path.join(out, f"check-{summary['date']}.json")
json.dump(summary, open(name, "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
log "done in $(( $(date +%s) - started )) s"
