#!/usr/bin/env bash
# dpbench end to end: every operation and dtype at 3 ranks (unequal chunks) with -c 1 must report 0 wrong
# elements in every JSON row; bad input must print one `dpbench: ...` line and exit 2 without hanging.
# Usage: dpbench_test.sh DPBENCH MPIEXEC CORRUPT_ALLREDUCE_SHIM
set -euo pipefail
dpbench=$1
mpiexec=$2
shim=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for op in allreduce reduce_scatter all_gather sendrecv; do
  for dtype in bf16 fp32; do
    "$mpiexec" -n 3 --oversubscribe "$dpbench" --op "$op" -d "$dtype" -b 4 -e 300K -f 7 -n 2 -w 1 -c 1 \
      --json "$out/$op-$dtype.json" > "$out/$op-$dtype.txt"
    rows=$(jq 'length' "$out/$op-$dtype.json")
    expected=$([[ $op == sendrecv ]] && echo 6 || echo 18)  # 6 sizes (4 B .. 66 KiB) × 3 algorithms
    [[ $rows == "$expected" ]] || { echo "FAIL $op $dtype: $rows rows, expected $expected"; exit 1; }
    jq -e 'all(.[]; .wrong == 0 and .ranks == 3 and .time_us > 0)' "$out/$op-$dtype.json" > /dev/null ||
      { echo "FAIL $op $dtype:"; cat "$out/$op-$dtype.txt"; exit 1; }
  done
done

# The check is on by default (as nccl-tests' -c 1), each table ends with nccl-tests' two lines, and wrong results
# are found: with MPI's fp32 sums corrupted (element 1 of every result off by 1 on each of the 3 ranks: 3 wrong
# elements per native row of 2 or more elements, none in the 1-element row of 4 bytes), the native rows count them,
# the ring's (point-to-point) count none, and every rank exits 1 with one line.
"$mpiexec" -n 3 --oversubscribe "$dpbench" --op allreduce -d fp32 -b 4 -e 64 -f 4 -n 1 -w 0 --json "$out/ok.json" \
  > "$out/ok.txt"
jq -e 'all(.[]; .wrong == 0)' "$out/ok.json" > /dev/null || { echo "FAIL default check:"; cat "$out/ok.txt"; exit 1; }
grep -qx '# Out of bounds values : 0 OK' "$out/ok.txt" || { echo "FAIL footer:"; cat "$out/ok.txt"; exit 1; }
grep -qE '^# Avg bus bandwidth    : ring [0-9.]+, tree [0-9.]+, native [0-9.]+ GB/s$' "$out/ok.txt" ||
  { echo "FAIL footer:"; cat "$out/ok.txt"; exit 1; }
status=0
timeout 60 "$mpiexec" -n 3 --oversubscribe -x LD_PRELOAD="$shim" "$dpbench" --op allreduce -d fp32 -b 4 -e 64 -f 4 \
  -n 1 -w 0 --json "$out/wrong.json" > "$out/wrong.txt" 2> "$out/wrong.err" || status=$?
[[ $status == 1 ]] || { echo "FAIL corrupted sums: exit $status, expected 1"; cat "$out/wrong.txt" "$out/wrong.err"; exit 1; }
[[ $(jq -c '[.[] | select(.algo == "native") | .wrong]' "$out/wrong.json") == "[0,3,3]" ]] &&
  [[ $(jq -c '[.[] | select(.algo != "native") | .wrong] | add' "$out/wrong.json") == 0 ]] ||
  { echo "FAIL corrupted sums:"; cat "$out/wrong.txt"; exit 1; }
grep -qx '# Out of bounds values : 6 FAILED' "$out/wrong.txt" || { echo "FAIL footer:"; cat "$out/wrong.txt"; exit 1; }
grep -qxF 'dpbench: 6 wrong element(s) in 2 of 9 rows (-c 1): the collectives'"'"' results are wrong' "$out/wrong.err" ||
  { echo "FAIL corrupted sums:"; cat "$out/wrong.err"; exit 1; }

# -i: sizes in steps of a fixed increment, -e included where the steps reach it.
"$mpiexec" -n 2 --oversubscribe "$dpbench" --op allreduce -a ring -b 1K -e 4K -i 1K -n 1 -w 0 --json "$out/i.json" \
  > /dev/null
[[ $(jq -c '[.[].size]' "$out/i.json") == "[1024,2048,3072,4096]" ]] || { echo "FAIL -i:"; cat "$out/i.json"; exit 1; }

# Reduce-scatter rounds sizes up to whole chunks: 2, 4 and 8 bytes at 3 ranks are 3, 3 and 6 elements, two rows.
"$mpiexec" -n 3 --oversubscribe "$dpbench" --op reduce_scatter -b 2 -e 8 -n 1 -w 0 --algo ring --json "$out/rs.json" \
  > /dev/null
[[ $(jq -c '[.[].size]' "$out/rs.json") == "[6,12]" ]] || { echo "FAIL rounded rows:"; cat "$out/rs.json"; exit 1; }

# Each rank's exit status is recorded by a wrapper, and mpirun told not to end the others when one exits non-zero:
# every rank must exit 2 by itself, not rank 0 alone.
check_bad_input() {
  local expected_message=$1
  shift
  local status=0
  rm -f "$out"/rank-status.*
  timeout 60 "$mpiexec" -n 2 --oversubscribe --mca orte_abort_on_non_zero_status 0 bash -c \
    '"$@"; s=$?; echo $s > "'"$out"'/rank-status.$OMPI_COMM_WORLD_RANK"; exit $s' rank "$dpbench" "$@" \
    > "$out/bad.txt" 2> "$out/bad.err" || status=$?
  [[ $status != 124 ]] || { echo "FAIL '$*': still running after 60 s"; exit 1; }
  [[ "$(cat "$out"/rank-status.* | tr '\n' ' ')" == "2 2 " ]] ||
    { echo "FAIL '$*': rank exit statuses $(cat "$out"/rank-status.* | tr '\n' ' '), expected 2 on both"; exit 1; }
  local lines
  lines=$(grep -c '^dpbench: ' "$out/bad.err" || true)
  [[ $lines == 1 ]] || { echo "FAIL '$*': $lines 'dpbench:' lines, expected 1"; cat "$out/bad.err"; exit 1; }
  grep -qF "dpbench: $expected_message" "$out/bad.err" ||
    { echo "FAIL '$*': expected 'dpbench: $expected_message'"; cat "$out/bad.err"; exit 1; }
}
check_bad_input "--op: unknown operation 'reduce' (expected allreduce, reduce_scatter, all_gather, sendrecv or all)" \
  --op reduce
check_bad_input "-b 1M is larger than -e 1K" -b 1M -e 1K
check_bad_input "--stepfactor: expected a whole number from 2 to 2147483647, got 1" -f 1
check_bad_input "--iters: 99999999999 is out of range (expected a whole number from 1 to 2147483647)" -n 99999999999
check_bad_input "-i and -f: give one (a size increment or a size factor)" -i 1K -f 4
check_bad_input "-i: size must be at least 1 byte, got '0'" -i 0
# Ranks started with different arguments (MPMD): refused on every rank before anything is parsed or run, rather
# than one rank failing its parse while the other waits in a collective.
status=0
timeout 60 "$mpiexec" -n 1 --oversubscribe "$dpbench" --op allreduce -n 1 : -n 1 --oversubscribe "$dpbench" \
  --op bogus -n 1 > "$out/mpmd.txt" 2>&1 || status=$?
[[ $status == 2 ]] || { echo "FAIL MPMD: exit $status, expected 2"; cat "$out/mpmd.txt"; exit 1; }
grep -qxF "dpbench: rank 1 was started with other arguments than rank 0 ('--op bogus -n 1' against '--op allreduce \
-n 1'): give every rank the same, in the same order" "$out/mpmd.txt" || { echo "FAIL MPMD:"; cat "$out/mpmd.txt"; exit 1; }
# Three ranks, the last one different: named, and every rank exits 2.
status=0
timeout 60 "$mpiexec" -n 2 --oversubscribe "$dpbench" -b 1K -e 4K -n 2 : -n 1 --oversubscribe "$dpbench" \
  -b 1K -e 8K -n 2 > "$out/mpmd3.txt" 2>&1 || status=$?
[[ $status == 2 ]] || { echo "FAIL MPMD on 3 ranks: exit $status, expected 2"; cat "$out/mpmd3.txt"; exit 1; }
grep -qxF "dpbench: rank 2 was started with other arguments than rank 0 ('-b 1K -e 8K -n 2' against '-b 1K -e 4K \
-n 2'): give every rank the same, in the same order" "$out/mpmd3.txt" ||
  { echo "FAIL MPMD on 3 ranks:"; cat "$out/mpmd3.txt"; exit 1; }
check_bad_input "--algo: unknown algorithm 'star' (expected ring, tree, native or all)" --algo star
# Values CLI11 cannot convert, and an empty size: what is accepted, not "Could not convert".
check_bad_input "--iters: expected a whole number, got '1.5'" -n 1.5
check_bad_input "--stepfactor: expected a whole number, got '1.5'" -f 1.5
check_bad_input "--nccl-blocking: expected true or false, got 'maybe'" --nccl-blocking=maybe
check_bad_input "--ring-piece: bad size '' (expected bytes with an optional K, M or G suffix, e.g. 8, 1K, 256M)" \
  --ring-piece ""
check_bad_input "-b 1: smaller than one bf16 element (2 bytes)" -b 1 -e 8
check_bad_input "--ring-piece 2: smaller than one fp32 element (4 bytes)" -d fp32 --ring-piece 2
check_bad_input "-e: size '17179869185G' does not fit in 64 bits" -e 17179869185G
check_bad_input "--json: expected a file name, got ''" --json ""
check_bad_input "--comm-timeout must be in (0, 1e6] seconds, got 0" --comm-timeout 0
check_bad_input "--schedule: ranks must be from 1 to 16, got 17" --schedule 17
check_bad_input "--schedule-count: elements must be from 1 to 64, got 0" --schedule 2 --schedule-count 0
check_bad_input "--schedule-count needs --schedule RANKS" --schedule-count 4
check_bad_input "--schedule: native is the library's own collective, with no schedule of ours to show (use -a ring, \
tree or all)" --schedule 4 -a native
check_bad_input "--schedule: sendrecv is one message, not a schedule (use -o allreduce, reduce_scatter, all_gather or \
all)" --schedule 4 -o sendrecv
check_bad_input "--schedule sends nothing, so --json has no measurement to write (leave one of them out)" \
  --schedule 4 --json "$out/schedule.json"

# --schedule prints the schedules once (rank 0), for ring and tree with -a all, and sends nothing.
"$mpiexec" -n 2 --oversubscribe "$dpbench" --schedule 4 -o reduce_scatter > "$out/schedule.txt"
[[ $(grep -c ' of 8 elements over 4 ranks' "$out/schedule.txt") == 2 ]] &&
  grep -q '^ring reduce_scatter of 8 elements over 4 ranks' "$out/schedule.txt" &&
  grep -q '^tree reduce_scatter of 8 elements over 4 ranks' "$out/schedule.txt" &&
  grep -q '^3 rounds; elements each rank sends: r0 6, r1 6, r2 6, r3 6$' "$out/schedule.txt" ||
  { echo "FAIL --schedule:"; cat "$out/schedule.txt"; exit 1; }
# --fit: what makes a fit impossible is refused before the sweep, on every rank, and nothing is written.
check_bad_input "--fit: the sweep has one message size (1024 bytes); a fit needs two or more" -b 1K -e 1K \
  --fit "$out/link.json"
# check_bad_input runs 2 ranks: 2 and 4 bytes of bf16 are 1 and 2 elements, both one chunk of 2 once rounded.
check_bad_input "--fit: the sweep's sizes are one row once reduce_scatter rounds them up to whole chunks of 2 \
elements; a fit needs two or more (raise -e)" -o reduce_scatter -b 2 -e 4 --fit "$out/link.json"
check_bad_input "--fit: cannot write '$out/missing/link.json': No such file or directory" -b 1K -e 4K \
  --fit "$out/missing/link.json"
check_bad_input "--fit: the α–β model has a formula for the tree's all-reduce only, not for its all_gather; fit the \
tree with --op allreduce (or all), or fit ring or native" -o all_gather -a tree -b 1K -e 4K --fit "$out/link.json"
check_bad_input "--json '$out/link.json' and --fit '$out/./link.json' are the same path" -b 1K -e 4K \
  --json "$out/link.json" --fit "$out/./link.json"
[[ ! -e "$out/link.json" ]] || { echo "FAIL: a refused --fit wrote $out/link.json"; exit 1; }
# The tree's reduce-scatter and all-gather have no formula in the model: their rows are left out of its fit, which
# says so, and the link written is the first algorithm's (ring).
"$mpiexec" -n 2 --oversubscribe "$dpbench" -o all_gather -a all -b 1M -e 16M -f 4 -n 2 -w 1 --fit "$out/link.json" \
  > "$out/fit.txt"
grep -qxF "# fit tree    none: the model has no formula for the tree's all_gather" "$out/fit.txt" &&
  jq -e '.fits[0].algo == "ring" and (.fits | length) == 2' "$out/link.json" > /dev/null ||
  { echo "FAIL --fit with tree all_gather rows:"; cat "$out/fit.txt" "$out/link.json"; exit 1; }
check_bad_input "-d: unknown dtype 'fp16' (expected bf16 or fp32)" -d fp16
check_bad_input "-b: bad size '3X'" -b 3X
check_bad_input "--device: unknown device 'gpu' (expected cpu or cuda)" --device gpu
check_bad_input "--nccl-blocking sets the NCCL communicator of --device cuda; --device cpu moves data over MPI" \
  --nccl-blocking
DPTRAIN_RANKS_PER_GPU=0 check_bad_input "DPTRAIN_RANKS_PER_GPU: expected a whole number of at least 1, got '0'" \
  --device cuda
# GPUs: without one (CI), one line naming what is missing (no CUDA in the build, no driver, no GPU); with one, the
# ring, tree and native over NCCL must agree with the exact sums.
if nvidia-smi -L > /dev/null 2>&1; then
  "$mpiexec" -n 2 --oversubscribe "$dpbench" --device cuda -b 1K -e 4M -f 16 -c 1 --json "$out/cuda.json" > /dev/null
  jq -e 'all(.[]; .wrong == 0)' "$out/cuda.json" > /dev/null || { echo "FAIL --device cuda"; exit 1; }
  "$mpiexec" -n 2 --oversubscribe "$dpbench" --device cuda --nccl-blocking -b 1K -e 4M -f 16 -c 1 \
    --json "$out/cuda-blocking.json" > /dev/null
  jq -e 'all(.[]; .wrong == 0)' "$out/cuda-blocking.json" > /dev/null || { echo "FAIL --nccl-blocking"; exit 1; }
else
  check_bad_input "--device cuda: " --device cuda
  check_bad_input "--device cuda: " --device cuda --nccl-blocking
fi
# The MPI transport's variables, which each rank reads from its own environment: bad on every rank, one line from
# rank 0; bad on one rank, that rank's line; exit 2 everywhere.
DPTRAIN_MPI_WAIT=foo check_bad_input "DPTRAIN_MPI_WAIT is 'foo': expected spin, yield or sleep" -b 8 -e 64 -n 1
status=0
timeout 60 "$mpiexec" -n 1 --oversubscribe "$dpbench" -b 8 -e 64 -n 1 : -n 1 --oversubscribe \
  -x DPTRAIN_MPI_SPIN_US=1ms "$dpbench" -b 8 -e 64 -n 1 > "$out/env.txt" 2>&1 || status=$?
[[ $status == 2 ]] || { echo "FAIL DPTRAIN_MPI_SPIN_US on rank 1: exit $status, expected 2"; cat "$out/env.txt"; exit 1; }
grep -qxF "dpbench: rank 1: DPTRAIN_MPI_SPIN_US is '1ms': expected whole microseconds from 0 to 10000000" \
  "$out/env.txt" || { echo "FAIL DPTRAIN_MPI_SPIN_US on rank 1:"; cat "$out/env.txt"; exit 1; }
# Messages larger than the memory the host has: refused with the estimate before anything is allocated.
check_bad_input "-e: messages of up to 1.00 TiB need about" -b 1024G -e 1024G
grep -qF "is available: lower -e (and -b)" "$out/bad.err" || { echo "FAIL -e 1024G:"; cat "$out/bad.err"; exit 1; }
echo "dpbench: all checks passed"
