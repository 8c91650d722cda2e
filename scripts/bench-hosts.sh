#!/usr/bin/env bash
# The α–β(–γ) model against a link whose speed is known: on 2 and 3 test hosts (scripts/hosts.sh) joined by links
# shaped to RATE, it
#   1. fits α, β and γ with dpbench on one sweep (--op all: all-reduce, reduce-scatter, all-gather, ring),
#   2. times an independent all-reduce sweep (1 MiB up) and compares each size with the fitted model,
#   3. trains the small config for a few steps with that link (--link link.json) and compares each collective's
#      transfer (its time less the skew: the wait for the last rank to enter) with the model,
# and prints the median measured/modelled from 1 MiB up (goal: within ±15 %), and the fitted bandwidth next to
# the configured rate with the efficiency TCP over Ethernet allows.
#
#   scripts/bench-hosts.sh                      # RATE=200mbit NPS="2 3" STEPS=8
#   RATE=400mbit NPS=2 scripts/bench-hosts.sh
# Needs root (network namespaces); removes its hosts on every exit. A few minutes.
set -euo pipefail
source "$(dirname "$0")/env.sh"
RATE="${RATE:-200mbit}"
NPS="${NPS:-2 3}"
STEPS="${STEPS:-8}"
dptrain_require_counts NPS "$NPS" 2
dptrain_require_count STEPS "$STEPS" 1
export DPTRAIN_HOSTS=dptrain-bench
hosts="$DPTRAIN_ROOT/scripts/hosts.sh"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
trap '"$hosts" down >/dev/null 2>&1 || true' EXIT
for program in dpbench dptrain; do
  [ -x "$DPTRAIN_BUILD/$program" ] || { echo "bench-hosts: build $program first ($DPTRAIN_BUILD)"; exit 2; }
done
rate_bits=$(tc_rate_bits "$RATE") ||
  dptrain_refuse "RATE '$RATE' is not a tc rate (expected a number of at least 8 bit/s and one of tc's units bit," \
    "kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps, tbps, e.g. 200mbit)"
cat "$DPTRAIN_ROOT"/README.md "$DPTRAIN_ROOT"/docs/*.md > "$out/corpus.txt"
echo "# bench-hosts: link $RATE per host (tbf), hosts $NPS, results in $out"

for np in $NPS; do
  "$hosts" up "$np" --rate "$RATE" > /dev/null
  echo "## $np hosts"
  # 1. Calibration sweep, from 256 KiB: below twice the shaper's 128 KiB token bucket a message passes partly at the
  # veth's own speed, which is not the link being modelled.
  timeout 300 "$hosts" mpirun -- "$DPTRAIN_BUILD/dpbench" --op all --algo ring -b 256K -e 8M -f 2 -n 3 -w 1 \
    --fit "$out/link-np$np.json" > "$out/fit-np$np.txt"
  grep '^# fit' "$out/fit-np$np.txt"
  # 2. An independent sweep, 1 MiB up.
  timeout 300 "$hosts" mpirun -- "$DPTRAIN_BUILD/dpbench" --op allreduce --algo ring -b 1M -e 8M -f 2 -n 3 -w 1 \
    --json "$out/sweep-np$np.json" > "$out/sweep-np$np.txt"
  # 3. Training on the same link.
  timeout 300 "$hosts" mpirun -- "$DPTRAIN_BUILD/dptrain" --config "$DPTRAIN_ROOT/configs/small.toml" \
    --data "$out/corpus.txt" --steps "$STEPS" --eval-every 0 --batch $((np * 4)) --threads 1 \
    --link "$out/link-np$np.json" --log "$out/train-np$np.jsonl" > "$out/train-np$np.txt"
  python3 - "$out" "$np" "$rate_bits" <<'EOF'
import json, math, statistics, sys
out, np, rate_bits = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
link = json.load(open(f"{out}/link-np{np}.json"))
alpha, bw, gamma = link["alpha_s"], link["bandwidth_Bps"], link.get("gamma_s_per_byte", 0.0)
def allreduce(m):  # the cost module's ring all-reduce with γ (collectives.hpp)
    return 2 * (np - 1) * alpha + 2 * (np - 1) / np * m / bw + (np - 1) / np * m * gamma
sweep = json.load(open(f"{out}/sweep-np{np}.json"))
ratios = [r["time_us"] * 1e-6 / allreduce(r["size"]) for r in sweep if r["size"] >= 1 << 20]
print("dpbench all-reduce, measured/modelled by size: " +
      ", ".join(f"{r['size'] >> 20} MiB {x:.2f}" for r, x in zip(sweep, ratios)))
records = [json.loads(line) for line in open(f"{out}/train-np{np}.jsonl")]
summary = records[-1]
rows = [c for c in summary["collectives"] if c["size"] >= 1 << 20]
train_transfer = [c["ratio"] for c in rows]
train_measured = [c["measured_ratio"] for c in rows]
steps = [r for r in records if "step" in r]
step_ratio = statistics.median(r["transfer_ms"] / r["comm_model_ms"] for r in steps)
step_measured = statistics.median(r["comm_ms"] / r["comm_model_ms"] for r in steps)
skew = statistics.median(r["skew_ms"] / r["comm_ms"] for r in steps)
print(f"dptrain small, collectives from 1 MiB ({len(rows)} sizes): transfer/modelled median "
      f"{statistics.median(train_transfer):.2f} (measured/modelled {statistics.median(train_measured):.2f}); per step "
      f"transfer/modelled median {step_ratio:.2f}, comm/modelled {step_measured:.2f}, skew {100 * skew:.0f}% of comm")
print(f"median dpbench from 1 MiB: {statistics.median(ratios):.2f}  (goal 0.85-1.15)")
# TCP over Ethernet through tbf: tbf counts whole frames (1514 B for 1448 B of payload with timestamps), and the
# reverse direction's ACKs (66 B per two segments) share each host's shaped egress in a ring.
ceiling = rate_bits / 8 * 1448 / 1514
with_acks = ceiling * 1 / (1 + 66 / (2 * 1514))
print(f"fitted B = {bw / 1e6:.2f} MB/s = {bw * 8 / rate_bits:.3f} of the {rate_bits / 1e6:.0f} Mbit/s rate; "
      f"TCP payload ceiling {ceiling / 1e6:.2f} MB/s (0.956), with the ACKs {with_acks / 1e6:.2f} MB/s "
      f"({with_acks * 8 / rate_bits:.3f}); α = {alpha * 1e6:.0f} µs, γ = {gamma * 1e9:.3f} ns/B")
EOF
  "$hosts" down
done
