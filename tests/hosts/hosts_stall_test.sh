#!/usr/bin/env bash
# A stalled rank or a dead link ends the job on every rank within --comm-timeout, with one line naming the
# collective and a non-zero exit, and the checkpoint written before it resumes. The test allows the timeout + 15 s
# for mpirun to tear the job down.
#   rank: host 1's rank is stopped (SIGSTOP);
#   link: host 1's data link is taken down (`ip link set eth0 down`); mpirun's control network stays up, as on a
#         cluster (scripts/hosts.sh), so the abort reaches every daemon.
# Usage: hosts_stall_test.sh SOURCE_DIR BUILD_DIR rank|link
SOURCE_DIR=$1 BUILD_DIR=$2 CASE=$3
source "$(dirname "$0")/hosts_lib.sh"
[ "$CASE" = rank ] || [ "$CASE" = link ] || fail "case must be rank or link, got '$CASE'"
hosts_up 2
data=$(corpus)
timeout=5
common=(--config "$SOURCE_DIR/configs/tiny.toml" --data "$data" --threads 1 --eval-every 0 --check-every 0
        --link alpha=10us,bw=1GB/s --peak-tflops 1)
timeout 100 "$hosts" mpirun -- "$BUILD_DIR/dptrain" "${common[@]}" --steps 100000 --comm-timeout $timeout \
  --save "$work/ckpt" --save-every 2 > "$work/out.txt" 2> "$work/err.txt" &
job=$!
# Wait for training to run past a checkpoint (step lines), then stall host 1.
for _ in $(seq 1 300); do grep -q '^step 5/' "$work/out.txt" && break; sleep 0.1; done
grep -q '^step 5/' "$work/out.txt" || { cat "$work/out.txt" "$work/err.txt"; fail "training did not start"; }
stopped=$(date +%s.%N)
if [ "$CASE" = rank ]; then
  rank1=""
  for pid in $(ip netns pids "$DPTRAIN_HOSTS-h1"); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = dptrain ] && rank1=$pid
  done
  [ -n "$rank1" ] || fail "no dptrain process in host 1"
  kill -STOP "$rank1"
else
  ip -n "$DPTRAIN_HOSTS-h1" link set eth0 down
fi
status=0
wait $job || status=$?
elapsed=$(echo "$(date +%s.%N) - $stopped" | bc)
echo "$CASE: job ended $elapsed s after host 1 stalled, exit $status"
grep "did not complete" "$work/err.txt" || true
[ "$status" != 0 ] || fail "the job exited 0"
[ "$status" = 4 ] || fail "exit $status, expected 4 (a collective past --comm-timeout)"
[ "$status" != 124 ] || fail "the job hung until the test's own timeout"
# (A save's exchanges also allow for rank 0's writing: "... did not complete in 5.05 s (--comm-timeout 5 s + ...)".)
grep -Eq "^dptrain: rank [01]: [a-z_]+ on unit .+ did not complete in $timeout s$|^dptrain: rank [01]: .+ did not complete in $timeout s$|^dptrain: rank [01]: the checkpoint's .+ did not complete in [0-9.]+ s \(--comm-timeout $timeout s \+ [0-9.e-]+ s for rank 0's writing at 10 MB/s\)$" \
  "$work/err.txt" || { cat "$work/err.txt"; fail "no 'dptrain: rank R: ... did not complete in $timeout s' line"; }
(( $(echo "$elapsed <= $timeout + 15" | bc) )) || fail "took $elapsed s, more than --comm-timeout + 15 s"
# The checkpoint written before the stall is intact: one rank resumes from it (verifying every file's checksum)
# and takes one more step.
saved=$(cat "$work/ckpt/latest")
step=$(( 10#${saved#step-} ))
"$BUILD_DIR/dptrain" "${common[@]}" --resume "$work/ckpt" --steps $((step + 1)) > "$work/resume.txt" 2>&1 ||
  { cat "$work/resume.txt"; fail "resuming from $saved failed"; }
grep -qF "dptrain | resumed from '$work/ckpt' at step $step" "$work/resume.txt" ||
  { cat "$work/resume.txt"; fail "no 'resumed from ... at step $step' line"; }
echo "$CASE: the checkpoint of step $step resumed"
