#!/usr/bin/env bash
# dptrain on 2 test hosts (TCP) takes the same steps as on one host (shared memory): the same losses, digit for
# digit, for ring, tree and native; and every step's communication splits into skew + transfer = comm.
# Usage: hosts_train_test.sh SOURCE_DIR BUILD_DIR MPIEXEC
SOURCE_DIR=$1 BUILD_DIR=$2 MPIEXEC=$3
source "$(dirname "$0")/hosts_lib.sh"
hosts_up 2
data=$(corpus)
flags=(--config "$SOURCE_DIR/configs/tiny.toml" --data "$data" --threads 1 --steps 6 --eval-every 0
       --link alpha=10us,bw=1GB/s --peak-tflops 1 --grad-dtype fp32)
for algo in ring tree native; do
  timeout 60 "$MPIEXEC" -n 2 --oversubscribe "$BUILD_DIR/dptrain" "${flags[@]}" --allreduce $algo \
    --log "$work/local-$algo.jsonl" > "$work/local-$algo.txt" 2>&1 || { cat "$work/local-$algo.txt"; fail "local $algo"; }
  timeout 60 "$hosts" mpirun -- "$BUILD_DIR/dptrain" "${flags[@]}" --allreduce $algo \
    --log "$work/hosts-$algo.jsonl" > "$work/hosts-$algo.txt" 2>&1 || { cat "$work/hosts-$algo.txt"; fail "hosts $algo"; }
  local_losses=$(jq -c 'select(.step) | .loss' "$work/local-$algo.jsonl" | tr '\n' ' ')
  host_losses=$(jq -c 'select(.step) | .loss' "$work/hosts-$algo.jsonl" | tr '\n' ' ')
  [ -n "$local_losses" ] && [ "$local_losses" = "$host_losses" ] ||
    fail "$algo: losses on one host [$local_losses] and on two [$host_losses] differ"
  # Every step: skew + transfer = comm (to the rounding of the sums), both non-negative.
  jq -e -s '[.[] | select(.step)] | length == 6 and all(.[]; .skew_ms >= 0 and .transfer_ms >= 0 and
            ((.skew_ms + .transfer_ms - .comm_ms) | fabs) <= 1e-9 * (1 + .comm_ms))' "$work/hosts-$algo.jsonl" \
    > /dev/null || { cat "$work/hosts-$algo.jsonl"; fail "$algo: skew + transfer != comm"; }
  jq -e -s '.[-1] | .event == "summary" and (.collectives | length > 0) and
            all(.collectives[]; ((.skew_ms + .transfer_ms - .measured_ms) | fabs) <= 1e-9 * (1 + .measured_ms))' \
    "$work/hosts-$algo.jsonl" > /dev/null || fail "$algo: the summary's collectives do not split"
  echo "$algo: losses equal ($host_losses), skew + transfer = comm in every step"
done
