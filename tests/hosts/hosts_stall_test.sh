#!/usr/bin/env bash
# A rank that stops (SIGSTOP) ends the job on every rank within --comm-timeout, with one line naming the
# collective, and a non-zero exit; the test allows the timeout + 15 s for mpirun to tear the job down.
# Usage: hosts_stall_test.sh SOURCE_DIR BUILD_DIR
SOURCE_DIR=$1 BUILD_DIR=$2
source "$(dirname "$0")/hosts_lib.sh"
hosts_up 2
data=$(corpus)
timeout=5
timeout 100 "$hosts" mpirun -- "$BUILD_DIR/dptrain" --config "$SOURCE_DIR/configs/tiny.toml" --data "$data" \
  --threads 1 --steps 100000 --eval-every 0 --check-every 0 --link alpha=10us,bw=1GB/s --peak-tflops 1 \
  --comm-timeout $timeout > "$work/out.txt" 2> "$work/err.txt" &
job=$!
# Wait for training to run (step lines), then stop rank 1 (the one dptrain process in host 1).
for _ in $(seq 1 300); do grep -q '^step 3/' "$work/out.txt" && break; sleep 0.1; done
grep -q '^step 3/' "$work/out.txt" || { cat "$work/out.txt" "$work/err.txt"; fail "training did not start"; }
rank1=""
for pid in $(ip netns pids "$DPTRAIN_HOSTS-h1"); do
  [ "$(cat /proc/$pid/comm 2>/dev/null)" = dptrain ] && rank1=$pid
done
[ -n "$rank1" ] || fail "no dptrain process in host 1"
stopped=$(date +%s.%N)
kill -STOP "$rank1"
status=0
wait $job || status=$?
elapsed=$(echo "$(date +%s.%N) - $stopped" | bc)
echo "job ended $elapsed s after rank 1 stopped, exit $status"
grep "did not complete" "$work/err.txt" || true
[ "$status" != 0 ] || fail "the job exited 0"
[ "$status" != 124 ] || fail "the job hung until the test's own timeout"
grep -Eq "^dptrain: rank 0: [a-z_]+ on unit .+ did not complete in $timeout s$|^dptrain: rank 0: .+ did not complete in $timeout s$" \
  "$work/err.txt" || { cat "$work/err.txt"; fail "no 'dptrain: rank 0: ... did not complete in $timeout s' line"; }
(( $(echo "$elapsed <= $timeout + 15" | bc) )) || fail "took $elapsed s, more than --comm-timeout + 15 s"
