#!/usr/bin/env bash
# scripts/hosts.sh's input checks. A --rate without a value or that is no rate tc takes, a DPTRAIN_HOSTS that is no
# set name, and -np without a value give one line `hosts.sh: ...` and exit 2 before anything is made (no root
# needed); `status` of a set with no hosts says so and exits 0. Where namespaces can be made, a rate in another of
# tc's units and case (12.5MBps) shapes the link to what tc reads (100Mbit) and `status` shows the set.
# Usage: hosts_input_test.sh SOURCE_DIR BUILD_DIR
SOURCE_DIR=$1 BUILD_DIR=$2
source "$(dirname "$0")/hosts_lib.sh"

# Runs "$@" and expects exit 2 and one line `hosts.sh: ...` holding $1.
refused() {
  local expected=$1 status=0
  shift
  "$@" > "$work/out.txt" 2>&1 || status=$?
  [ "$status" = 2 ] && [ "$(wc -l < "$work/out.txt")" = 1 ] && grep -q '^hosts.sh: ' "$work/out.txt" &&
    grep -qF -- "$expected" "$work/out.txt" ||
    { cat "$work/out.txt"; fail "$* exited $status, expected 2 and one line holding: $expected"; }
  echo "refused: $(cat "$work/out.txt")"
}

# status: exit 0 and the output $1 (a pattern for grep -x, line by line).
status_is() {
  local status=0
  "$hosts" status > "$work/status.txt" 2>&1 || status=$?
  [ "$status" = 0 ] || { cat "$work/status.txt"; fail "status exited $status"; }
  diff <(echo "$1") <(sed 's/ (id: [0-9]*)//' "$work/status.txt" | sort) > /dev/null ||
    { cat "$work/status.txt"; fail "status printed the above, expected: $1"; }
}

refused "up: --rate needs a value" "$hosts" up 2 --rate
for rate in 0mbit ...mbit 7bit 0.5bit -5mbit 1e3mbit 400 400mbit/s 400mibit ""; do
  refused "up: --rate '$rate' is not a tc rate (expected a number of at least 8 bit/s" "$hosts" up 2 --rate "$rate"
done
for name in x/y .. -x "a b" "x;y" "$(printf 'a%.0s' {1..65})"; do
  refused "DPTRAIN_HOSTS '$name' is not a set name" env DPTRAIN_HOSTS="$name" "$hosts" up 2
done
refused "DPTRAIN_HOSTS '..' is not a set name" env DPTRAIN_HOSTS=.. "$hosts" down
refused "DPTRAIN_HOSTS '..' is not a set name" env DPTRAIN_HOSTS=.. "$hosts" status
status_is "hosts.sh: no hosts of set '$DPTRAIN_HOSTS'"

hosts_up 1 --rate 12.5MBps
qdisc=$(ip netns exec "$DPTRAIN_HOSTS-h0" tc qdisc show dev eth0)
[[ "$qdisc" == *"tbf"*"rate 100Mbit "* ]] || fail "--rate 12.5MBps: eth0 has '$qdisc', expected tbf at 100Mbit"
status_is "$(printf '%s\n' "$DPTRAIN_HOSTS-h0" "$DPTRAIN_HOSTS-sw" "link: 12.5MBps" | sort)"
refused "mpirun: -np needs a value" "$hosts" mpirun -np
echo "PASS"
