#!/usr/bin/env bash
# How well the calibrated α–β model predicts the machine: for each rank count and all-reduce algorithm, fit α and B
# on one dpbench sweep (--fit), then time all-reduces of 1 MiB .. 64 MiB in a second, independent dpbench run and
# print per size the measured time, the modelled time from the fitted link and the ratio measured / modelled,
# then the distribution of the ratios (min, median, max, fraction within ±25 %). The target (docs/systems-model.md):
# every all-reduce of 1 MiB and more within ±25 % of the model.
#
#   scripts/bench-model-fit.sh                       # bf16, np 2 and 4, ring and native, 3 repeats
#   ALGOS="ring native tree" NPS="2" REPEATS=5 scripts/bench-model-fit.sh -n 40
#
# Model (include/dptrain/cost/collectives.hpp; dpbench --fit uses the same kinds): ring and native all-reduce
# 2(p−1)·α + 2(p−1)/p·M/B, tree all-reduce 2⌈log2 p⌉·(α + M/B), with α and B of that algorithm's own fit.
#
# Environment: BUILD_DIR (default build; configured and built if needed), NPS, ALGOS (any of ring native tree),
# DTYPE, REPEATS (each repeat calibrates and then measures again; the tables show medians over repeats),
# CALIBRATE (the fit's sweep, default -b 64K -e 64M -f 2), MEASURE (the evaluated sweep, default -b 1M -e 64M
# -f 2), OUT_DIR (JSON and text of every run), QUIET_WAIT (default 60: before each calibrate-and-measure pair, wait
# up to this many seconds for other processes to use under QUIET_LIMIT = 0.1 cores; 0: neither wait nor retry),
# RETRIES (default 2: a pair during which other processes used more is run again, at most this often; the output
# shows, per pair, how many cores other processes used). Extra arguments go to both dpbench runs (a repeated flag
# overrides the sweep's). More ranks than cores run oversubscribed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

BUILD_DIR=${BUILD_DIR:-build}
NPS=${NPS:-"2 4"}
ALGOS=${ALGOS:-"ring native"}
DTYPE=${DTYPE:-bf16}
REPEATS=${REPEATS:-3}
CALIBRATE=${CALIBRATE:-"-b 64K -e 64M -f 2"}
MEASURE=${MEASURE:-"-b 1M -e 64M -f 2"}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench-model-fit}
CORES=$(getconf _NPROCESSORS_ONLN)
MIN_BYTES=$((1 << 20))  # the target covers all-reduces of 1 MiB and more
TOLERANCE=0.25
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_LIMIT=${QUIET_LIMIT:-0.1}
RETRIES=${RETRIES:-2}
dptrain_require_counts NPS "$NPS" 2  # a fit needs a link: two ranks or more
dptrain_require_count REPEATS "$REPEATS" 1
dptrain_require_count QUIET_WAIT "$QUIET_WAIT" 0
dptrain_require_count RETRIES "$RETRIES" 0
[[ $QUIET_LIMIT =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] ||
  dptrain_refuse "QUIET_LIMIT must be a number of cores, e.g. 0.1, got '$QUIET_LIMIT'"

# Open MPI as root, in containers where ptrace-based single copy (CMA) is not allowed.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1

command -v jq > /dev/null || { echo "bench-model-fit: jq is required (apt-get install jq)" >&2; exit 2; }
for algo in $ALGOS; do
  case $algo in ring | native | tree) ;; *) echo "bench-model-fit: ALGOS: unknown '$algo' (ring, native, tree)" >&2; exit 2 ;; esac
done
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
cmake --build "$BUILD_DIR" --target dpbench -j "$CORES" > /dev/null
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/ratios.jsonl

read -r -a calibrate <<< "$CALIBRATE"
read -r -a measure <<< "$MEASURE"
echo "# $(date -u +%FT%TZ)  $CORES cores  load $(cut -d' ' -f1-3 /proc/loadavg)  mpirun: $(mpirun --version | head -1)"
echo "# $(lscpu | awk -F': +' '/^Model name/ { m = $2 } /^L2 cache/ { l2 = $2 } /^L3 cache/ { l3 = $2 } END { print m ", L2 " l2 ", L3 " l3 }')"
echo "# calibrate: dpbench --op allreduce --algo A ${calibrate[*]} -d $DTYPE $* --fit link.json"
echo "# measure:   dpbench --op allreduce --algo A ${measure[*]} -d $DTYPE -c 1 $* --json rows.json"
echo "# NPS \"$NPS\", ALGOS \"$ALGOS\", $REPEATS repeats (each: calibrate, then measure); ratio = measured / modelled"
echo "#"
echo "# alpha, B: the calibration run's fit; resid: its largest relative residual over the calibration sweep;"
echo "# others: cores' worth of CPU used by other processes during the calibration / measurement run (0 = quiet);"
echo "# p2p: busbw (GB/s) of a 4 MiB neighbour exchange (dpbench --op sendrecv) just before and just after the pair:"
echo "# the speed of the machine's core-to-core path, which this VM switches between two levels while it runs"
printf '# %3s %-6s %3s %11s %12s %10s %6s %6s %7s %6s\n' np algo rep alpha B resid others others p2p p2p

# The ratio rows of one measurement run against the link fitted just before it.
ratios() {  # np algo repeat link.json rows.json others
  jq -c --argjson np "$1" --arg algo "$2" --argjson rep "$3" --slurpfile link "$4" --argjson others "$6" '
    def ceil_log2: . as $p | [range(0; 31) | select(pow(2; .) >= $p)] | first;
    ($link[0].fits[] | select(.algo == $algo)) as $fit
    | .[]
    | (if $algo == "tree" then {c1: (2 * ($np | ceil_log2)), c2: (2 * ($np | ceil_log2) * .size)}
       else {c1: (2 * ($np - 1)), c2: (2 * ($np - 1) / $np * .size)} end) as $c
    | ($c.c1 * $fit.alpha_s + $c.c2 / $fit.bandwidth_Bps) as $model
    | {np: $np, algo: $algo, rep: $rep, size: .size, wrong: .wrong, measured_s: (.time_us * 1e-6),
       modelled_s: $model, ratio: (.time_us * 1e-6 / $model), alpha_s: $fit.alpha_s, bandwidth_Bps: $fit.bandwidth_Bps,
       others: $others}
  ' "$5"
}

# CPU seconds (user + system) of everything on the machine, and of this script's finished children.
cpu_all() { awk '/^cpu / { print ($2 + $3 + $4 + $7 + $8) / '"$(getconf CLK_TCK)"' }' /proc/stat; }
# (`times` must run in this shell, not in a $(...) subshell, which has no finished children of its own.)
cpu_children() { awk 'NR == 2 { for (i = 1; i <= 2; ++i) { split($i, t, /[ms]/); s += 60 * t[1] + t[2] } print s }' "$OUT_DIR/.times"; }
# Runs mpirun with the given arguments, output to $1; sets OTHERS to the cores' worth of CPU that other processes
# used meanwhile (the machine's busy time minus this run's, over the wall time): 0 on a quiet machine.
OTHERS=0
timed_mpirun() {
  local out=$1 all0 mine0 t0
  shift
  times > "$OUT_DIR/.times"
  all0=$(cpu_all) mine0=$(cpu_children) t0=$(date +%s.%N)
  mpirun "$@" > "$out"
  times > "$OUT_DIR/.times"
  OTHERS=$(awk -v a0="$all0" -v a1="$(cpu_all)" -v m0="$mine0" -v m1="$(cpu_children)" -v t0="$t0" -v t1="$(date +%s.%N)" \
    'BEGIN { x = ((a1 - a0) - (m1 - m0)) / (t1 - t0); printf "%.2f", x < 0 ? 0 : x }')
}

# Busbw of a 4 MiB neighbour exchange at this rank count (the transport alone, no collective).
p2p_probe() {
  mpirun -np "$1" --oversubscribe "$BUILD_DIR/dpbench" --op sendrecv -b 4M -e 4M -n 20 -w 2 |
    awk '/^ *[0-9]+ +[0-9]/ { print $7 }'
}

# Waits until other processes use under QUIET_LIMIT cores (sampled over 1 s), at most QUIET_WAIT seconds.
wait_quiet() {
  local waited=0 all0 busy
  while ((waited < QUIET_WAIT)); do
    all0=$(cpu_all)
    sleep 1
    busy=$(awk -v a0="$all0" -v a1="$(cpu_all)" -v limit="$QUIET_LIMIT" 'BEGIN { print (a1 - a0 > limit) }')
    ((busy)) || return 0
    ((++waited))
  done
}

for ((rep = 1; rep <= REPEATS; ++rep)); do
  for np in $NPS; do
    for algo in $ALGOS; do
      base=$OUT_DIR/np$np-$algo-$rep
      for ((try = 0; ; ++try)); do
        wait_quiet
        p2p_before=$(p2p_probe "$np")
        timed_mpirun "$base-calibrate.txt" -np "$np" --oversubscribe "$BUILD_DIR/dpbench" --op allreduce \
          --algo "$algo" "${calibrate[@]}" -d "$DTYPE" "$@" --json "$base-calibrate.json" --fit "$base-link.json"
        others_calibrate=$OTHERS
        timed_mpirun "$base-measure.txt" -np "$np" --oversubscribe "$BUILD_DIR/dpbench" --op allreduce \
          --algo "$algo" "${measure[@]}" -d "$DTYPE" -c 1 "$@" --json "$base-measure.json"
        p2p_after=$(p2p_probe "$np")
        others=$(awk -v a="$others_calibrate" -v b="$OTHERS" 'BEGIN { print (a > b ? a : b) }')
        # A pair that shared the cores with other processes is run again (the model is of the machine, not of
        # whatever else it was doing), up to RETRIES times; what is kept is marked by its others columns.
        if ((QUIET_WAIT == 0 || try >= RETRIES)) || awk -v x="$others" -v limit="$QUIET_LIMIT" 'BEGIN { exit !(x <= limit) }'; then
          break
        fi
        printf '# %3d %-6s %3d  other processes used %s cores: run again\n' "$np" "$algo" "$rep" "$others"
      done
      # A wrong element is a bug, not noise: stop.
      if ! jq -e 'all(.[]; .wrong == 0 or .wrong == null)' "$base-measure.json" > /dev/null; then
        echo "bench-model-fit: wrong results at np $np, $algo (see $base-measure.txt)" >&2
        exit 1
      fi
      jq -r --arg algo "$algo" '.fits[] | select(.algo == $algo)
        | [.alpha_s * 1e6, .bandwidth_Bps / 1e9, .max_relative_residual * 100, .samples] | @tsv' "$base-link.json" |
        awk -F'\t' -v np="$np" -v algo="$algo" -v rep="$rep" -v oc="$others_calibrate" -v om="$OTHERS" \
          -v pb="$p2p_before" -v pa="$p2p_after" \
          '{ printf "# %3d %-6s %3d %8.2f us %7.3f GB/s %9.1f%% %6.2f %6.2f %7.2f %6.2f\n", np, algo, rep, $1, $2, $3, oc, om, pb, pa }'
      ratios "$np" "$algo" "$rep" "$base-link.json" "$base-measure.json" "$others" >> "$OUT_DIR/ratios.jsonl"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Per np, algorithm and size: medians over the repeats of the measured time, the modelled time and the ratio
# (each repeat's ratio is taken against the link fitted in that repeat), and the repeats' smallest and largest
# ratio. Then the distribution of the per-size median ratios from 1 MiB up, per np and algorithm and over all.
jq -s -r --argjson min "$MIN_BYTES" --argjson tol "$TOLERANCE" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def fmt($d): (. * pow(10; $d) | round / pow(10; $d) | tostring) as $s  # $d decimals, trailing zeros kept
    | ($s | if $d > 0 and (index(".") | not) then . + "." else . end) as $s
    | $s + "0" * ($d - (($s | split(".")[1] // "") | length));
  def inside: . >= 1 - $tol and . <= 1 + $tol;
  def dist:  # min | median | max | how many within the tolerance
    length as $n | (map(select(inside)) | length) as $k
    | "\(min | fmt(2)) | \(median | fmt(2)) | \(max | fmt(2)) | \($k)/\($n) (\(100 * $k / $n | round)%) |";
  [group_by([.np, .algo, .size])[]
   | {np: .[0].np, algo: .[0].algo, size: .[0].size, measured_ms: (map(.measured_s) | median * 1e3),
      modelled_ms: (map(.modelled_s) | median * 1e3), ratio: (map(.ratio) | median),
      lo: (map(.ratio) | min), hi: (map(.ratio) | max), n: length}] as $rows
  | ($rows | map(select(.size >= $min))) as $evaluated
  | "",
    "measured, modelled: medians over the repeats; measured/modelled: the median of the repeats\u0027 ratios, each against",
    "the link fitted in its own repeat (**out**: outside ±\($tol * 100 | round) %); min..max: the repeats\u0027 smallest and largest ratio.",
    "",
    "| np | algo | size(B) | measured ms | modelled ms | measured/modelled | repeats min..max |",
    "|---|---|---|---|---|---|---|",
    ($rows | sort_by(.np, .algo, .size)[]
     | "| \(.np) | \(.algo) | \(.size) | \(.measured_ms | fmt(3)) | \(.modelled_ms | fmt(3)) | "
       + "\(.ratio | fmt(2))\(if .size >= $min and (.ratio | inside | not) then " **out**" else "" end) | "
       + "\(.lo | fmt(2))..\(.hi | fmt(2)) |"),
    "",
    "Distribution of the median ratios from \($min / 1048576) MiB up (within ±\($tol * 100 | round) %: \(1 - $tol) ≤ ratio ≤ \(1 + $tol)):",
    "",
    "| np | algo | min | median | max | within ±\($tol * 100 | round) % |",
    "|---|---|---|---|---|---|",
    ($evaluated | group_by([.np, .algo])[] | "| \(.[0].np) | \(.[0].algo) | " + (map(.ratio) | dist)),
    ($evaluated | group_by(.algo)[] | "| all | \(.[0].algo) | " + (map(.ratio) | dist)),
    ("| all | all | " + ($evaluated | map(.ratio) | dist))
' "$OUT_DIR/ratios.jsonl"
# Every single repeat's ratio (not the medians), for the spread the medians hide: all pairs, and only the pairs
# whose calibration and measurement both ran on a quiet machine.
jq -s -r --argjson min "$MIN_BYTES" --argjson tol "$TOLERANCE" --argjson limit "$QUIET_LIMIT" '
  def count: length as $n | (map(select(.ratio >= 1 - $tol and .ratio <= 1 + $tol)) | length) as $k
    | if $n == 0 then "none | | " else "\($k)/\($n) | \(map(.ratio) | min * 100 | round / 100) | "
      + "\(map(.ratio) | max * 100 | round / 100)" end;
  map(select(.size >= $min))
  | "",
    "Every repeat separately (quiet: other processes used ≤ \($limit) cores during both runs of the pair):",
    "",
    "| np | algo | within ±\($tol * 100 | round) % | min | max | quiet: within | min | max |",
    "|---|---|---|---|---|---|---|---|",
    (group_by([.np, .algo])[] | "| \(.[0].np) | \(.[0].algo) | \(count) | \(map(select(.others <= $limit)) | count) |"),
    "| all | all | \(count) | \(map(select(.others <= $limit)) | count) |"
' "$OUT_DIR/ratios.jsonl"
