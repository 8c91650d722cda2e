#!/usr/bin/env bash
# On 2 test hosts whose links are shaped to 200 Mbit/s (25 MB/s), dpbench --fit finds a bandwidth between 0.85
# and 0.98 of the configured rate. Why those bounds (docs/test-hosts.md): tbf counts every byte of the Ethernet
# frame, so TCP's payload can use at most 1448 of every 1514 bytes (0.956), and the token bucket lets 128 KiB of a
# call through at the veth's own speed (up to 1.5 % more at 8 MiB): 0.98 is the most the shaping allows. Measured:
# 0.955–0.959 in 4 runs (default ring pieces, Open MPI's eager limit above them, as scripts/hosts.sh sets it);
# 0.85 leaves room for a busier machine. Before the eager limit was raised, every 256 KiB piece waited for a
# clear-to-send behind the other direction's data and the fit found 0.44–0.59.
# Usage: hosts_shaped_fit_test.sh SOURCE_DIR BUILD_DIR
SOURCE_DIR=$1 BUILD_DIR=$2
source "$(dirname "$0")/hosts_lib.sh"
rate_bits=200000000
hosts_up 2 --rate 200mbit
timeout 90 "$hosts" mpirun -- "$BUILD_DIR/dpbench" --op allreduce --algo ring -b 512K -e 8M -f 2 -n 3 -w 1 \
  --fit "$work/link.json" > "$work/fit.txt" 2>&1 || { cat "$work/fit.txt"; fail "dpbench --fit"; }
cat "$work/fit.txt"
ratio=$(jq ".bandwidth_Bps * 8 / $rate_bits" "$work/link.json")
echo "fitted bandwidth / configured rate = $ratio"
(( $(echo "$ratio >= 0.85 && $ratio <= 0.98" | bc) )) || fail "fitted bandwidth is $ratio of the rate, expected 0.85–0.98"
