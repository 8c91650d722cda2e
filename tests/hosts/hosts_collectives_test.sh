#!/usr/bin/env bash
# Collectives between test hosts over TCP give what they give on one host: ring, tree and native, every
# operation, on 2 and 3 hosts (3: unequal chunks, a tree of two levels), checked element by element (#wrong = 0).
# Usage: hosts_collectives_test.sh SOURCE_DIR BUILD_DIR
SOURCE_DIR=$1 BUILD_DIR=$2
source "$(dirname "$0")/hosts_lib.sh"
hosts_up 3
for np in 2 3; do
  status=0
  timeout 40 "$hosts" mpirun -np $np -- "$BUILD_DIR/dpbench" --op all --algo all -b 3 -e 600K -f 13 -n 2 -w 1 \
    -c 1 --json "$work/np$np.json" > "$work/np$np.txt" 2>&1 || status=$?
  [ $status = 0 ] || { cat "$work/np$np.txt"; fail "dpbench on $np hosts (exit $status)"; }
  rows=$(jq 'length' "$work/np$np.json")
  [ "$rows" = 45 ] || fail "$np hosts: $rows rows, expected 45 (5 sizes: 3 B … 84 KiB; × 3 algorithms × 3 operations)"
  jq -e "all(.[]; .wrong == 0 and .ranks == $np)" "$work/np$np.json" > /dev/null ||
    { cat "$work/np$np.txt"; fail "$np hosts: wrong elements"; }
  echo "$np hosts: 45 rows, 0 wrong"
done
