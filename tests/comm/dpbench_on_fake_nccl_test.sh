#!/usr/bin/env bash
# dpbench --device cuda end to end over the fake NCCL and CUDA runtime (tests/comm/nccl_on_cpu/fake_nccl.hpp), three
# ranks on the fake's one device: every collective and algorithm checked (-c 1) on a non-blocking and a blocking
# communicator, NCCL's estimate in its column, the header naming the transport; a stalled group ends every rank
# within --comm-timeout with the line that names it and exit 4; NCCL_COMM_BLOCKING set is refused on every rank.
# Usage: dpbench_on_fake_nccl_test.sh DPBENCH_ON_FAKE_NCCL MPIEXEC
set -uo pipefail
dpbench=$1
mpiexec=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPTRAIN_RANKS_PER_GPU=3
fail() { echo "FAIL $*"; exit 1; }

for mode in non-blocking blocking; do
  flag=()
  [ "$mode" = blocking ] && flag=(--nccl-blocking)
  timeout 100 "$mpiexec" -n 3 --oversubscribe "$dpbench" --device cuda --op all --algo all -b 1K -e 256K -f 16 \
    -n 2 -w 1 -c 1 "${flag[@]}" --json "$out/$mode.json" > "$out/$mode.txt" 2>&1
  status=$?
  [ "$status" = 0 ] || { cat "$out/$mode.txt"; fail "$mode: dpbench exited $status"; }
  grep -qF "transport NCCL " "$out/$mode.txt" && grep -qF ", $mode, NCCL_ALGO" "$out/$mode.txt" ||
    { cat "$out/$mode.txt"; fail "$mode: the header does not name the transport and its mode"; }
  # 3 ops × 3 algorithms × 2 sizes (1 KiB, 16 KiB, 256 KiB for all-reduce; counts rounded up to a multiple of 3).
  jq -e 'length == 27 and all(.[]; .wrong == 0) and ([.[].algo] | unique) == ["native", "ring", "tree"]' \
    "$out/$mode.json" > /dev/null || { cat "$out/$mode.txt"; fail "$mode: wrong elements or rows"; }
  # The fake's model, 7 µs + 1 ns per byte of the call, on every native row: estimates reach their column.
  grep -E "^ +1024 +512 +bf16 +native .* 8\.02$" "$out/$mode.txt" > /dev/null ||
    { cat "$out/$mode.txt"; fail "$mode: no NCCL estimate of 8.02 us for the 1 KiB native all-reduce"; }
done

# The 20th group stalls on every rank: each ends within --comm-timeout 1 with one line, and the job with exit 4.
status=0
FAKE_NCCL_STALL_GROUP=20 timeout 60 "$mpiexec" -n 3 --oversubscribe "$dpbench" --device cuda -b 1K -e 64K -f 8 -n 3 \
  -w 1 --comm-timeout 1 > "$out/stall.txt" 2>&1 || status=$?
[ "$status" = 4 ] || { cat "$out/stall.txt"; fail "a stalled group: exit $status, expected 4"; }
grep -Eq "^dpbench: rank [0-2]: NCCL: (schedule|all_reduce) did not complete in 1 s$" "$out/stall.txt" ||
  { cat "$out/stall.txt"; fail "no 'dpbench: rank R: NCCL: ... did not complete in 1 s' line"; }
# NCCL_COMM_BLOCKING overrides the mode of every communicator (the estimates' blocking one too): refused with one
# line and exit 2, once from rank 0 where every rank has it, by the rank itself where one has it.
status=0
NCCL_COMM_BLOCKING=0 timeout 60 "$mpiexec" -n 3 --oversubscribe "$dpbench" --device cuda -b 1K -e 1K \
  > "$out/env-all.txt" 2>&1 || status=$?
[ "$status" = 2 ] || { cat "$out/env-all.txt"; fail "NCCL_COMM_BLOCKING=0 on every rank: exit $status, expected 2"; }
[ "$(grep -c "^dpbench: NCCL_COMM_BLOCKING is set ('0'): .*; unset it$" "$out/env-all.txt")" = 1 ] ||
  { cat "$out/env-all.txt"; fail "NCCL_COMM_BLOCKING=0 on every rank: not one line from rank 0"; }
status=0
timeout 60 "$mpiexec" --oversubscribe -n 1 "$dpbench" --device cuda -b 1K -e 1K : \
  -n 1 env NCCL_COMM_BLOCKING=1 "$dpbench" --device cuda -b 1K -e 1K : \
  -n 1 "$dpbench" --device cuda -b 1K -e 1K > "$out/env-one.txt" 2>&1 || status=$?
[ "$status" = 2 ] || { cat "$out/env-one.txt"; fail "NCCL_COMM_BLOCKING=1 on rank 1: exit $status, expected 2"; }
grep -q "^dpbench: rank 1: NCCL_COMM_BLOCKING is set ('1'): " "$out/env-one.txt" ||
  { cat "$out/env-one.txt"; fail "NCCL_COMM_BLOCKING=1 on rank 1: no line from rank 1"; }
echo "dpbench on the fake NCCL: all checks passed"
