#!/usr/bin/env bash
# dpbench end to end: every operation and dtype at 3 ranks (unequal chunks) with -c 1 must report 0 wrong
# elements in every JSON row; bad input must print one `dpbench: ...` line and exit 2 without hanging.
# Usage: dpbench_test.sh DPBENCH MPIEXEC
set -euo pipefail
dpbench=$1
mpiexec=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for op in allreduce reduce_scatter all_gather sendrecv; do
  for dtype in bf16 fp32; do
    "$mpiexec" -n 3 --oversubscribe "$dpbench" --op "$op" -d "$dtype" -b 2 -e 300K -f 7 -n 2 -w 1 -c 1 \
      --json "$out/$op-$dtype.json" > "$out/$op-$dtype.txt"
    rows=$(jq 'length' "$out/$op-$dtype.json")
    expected=$([[ $op == sendrecv ]] && echo 7 || echo 21)  # 7 sizes (2 B .. 235 KiB) × 3 algorithms
    [[ $rows == "$expected" ]] || { echo "FAIL $op $dtype: $rows rows, expected $expected"; exit 1; }
    jq -e 'all(.[]; .wrong == 0 and .ranks == 3 and .time_us > 0)' "$out/$op-$dtype.json" > /dev/null ||
      { echo "FAIL $op $dtype:"; cat "$out/$op-$dtype.txt"; exit 1; }
  done
done

check_bad_input() {
  local expected_message=$1
  shift
  local status=0
  timeout 60 "$mpiexec" -n 2 --oversubscribe "$dpbench" "$@" > "$out/bad.txt" 2> "$out/bad.err" || status=$?
  [[ $status == 2 ]] || { echo "FAIL '$*': exit $status, expected 2"; cat "$out/bad.err"; exit 1; }
  local lines
  lines=$(grep -c '^dpbench: ' "$out/bad.err" || true)
  [[ $lines == 1 ]] || { echo "FAIL '$*': $lines 'dpbench:' lines, expected 1"; cat "$out/bad.err"; exit 1; }
  grep -qF "dpbench: $expected_message" "$out/bad.err" ||
    { echo "FAIL '$*': expected 'dpbench: $expected_message'"; cat "$out/bad.err"; exit 1; }
}
check_bad_input "--op: unknown operation 'reduce' (expected allreduce, reduce_scatter, all_gather, sendrecv or all)" \
  --op reduce
check_bad_input "-b 1M is larger than -e 1K" -b 1M -e 1K
check_bad_input "-f: step factor must be an integer of at least 2, got 1" -f 1
check_bad_input "--algo: unknown algorithm 'star' (expected ring, tree or native)" --algo star
check_bad_input "-d: unknown dtype 'fp16' (expected bf16 or fp32)" -d fp16
check_bad_input "-b: bad size '3X'" -b 3X
check_bad_input "--device: unknown device 'gpu' (expected cpu or cuda)" --device gpu
DPTRAIN_RANKS_PER_GPU=0 check_bad_input "DPTRAIN_RANKS_PER_GPU: expected a whole number of at least 1, got '0'" \
  --device cuda
# GPUs: without one (CI), one line naming what is missing (no CUDA in the build, no driver, no GPU); with one, the
# ring, tree and native over NCCL must agree with the exact sums.
if nvidia-smi -L > /dev/null 2>&1; then
  "$mpiexec" -n 2 --oversubscribe "$dpbench" --device cuda -b 1K -e 4M -f 16 -c 1 --json "$out/cuda.json" > /dev/null
  jq -e 'all(.[]; .wrong == 0)' "$out/cuda.json" > /dev/null || { echo "FAIL --device cuda"; exit 1; }
else
  check_bad_input "--device cuda: " --device cuda
fi
# Messages larger than the memory the host has: refused with the estimate before anything is allocated.
check_bad_input "-e: messages of up to 1.00 TiB need about" -b 1024G -e 1024G
grep -qF "is available: lower -e (and -b)" "$out/bad.err" || { echo "FAIL -e 1024G:"; cat "$out/bad.err"; exit 1; }
echo "dpbench: all checks passed"
