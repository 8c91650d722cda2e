# Sourced by the scripts: Open MPI settings for running as root, oversubscribed, in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
DPTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DPTRAIN_BUILD="${DPTRAIN_BUILD:-$DPTRAIN_ROOT/build}"
export DPTRAIN_ROOT DPTRAIN_BUILD

# Configures and builds (Release) into $DPTRAIN_BUILD; where nvcc is found, with the cuDNN frontend's headers
# (scripts/cudnn-frontend.sh) for the fused attention, or without it when they cannot be had.
dptrain_build() {
  local frontend=()
  if command -v nvcc >/dev/null; then
    local include
    include=$("$DPTRAIN_ROOT/scripts/cudnn-frontend.sh") && frontend=(-DCUDNN_FRONTEND_INCLUDE_DIR="$include")
  fi
  cmake -S "$DPTRAIN_ROOT" -B "$DPTRAIN_BUILD" -DCMAKE_BUILD_TYPE=Release "${frontend[@]}" >/dev/null
  cmake --build "$DPTRAIN_BUILD" -j "$(nproc)" "$@"
}

# Fits α and B to a ring all-reduce sweep on $1 ranks and writes them to $2 (a link.json for dptrain --link).
dptrain_calibrate() {
  mpirun -np "$1" --oversubscribe "$DPTRAIN_BUILD/dpbench" --op allreduce --algo ring -b 64K -e 64M -f 4 \
    --fit "$2" > "$2.txt"
}

# One line naming the CPU and its vector extensions: every speed figure depends on them.
dptrain_cpu_line() {
  local cpu extensions
  cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')
  extensions=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(avx|avx2|fma|avx512[a-z_0-9]*|amx[a-z_0-9]*)$' | tr '\n' ' ')
  echo "cpu: $cpu, $(nproc) cores, vector extensions: ${extensions:-none}" \
    "${OPENBLAS_CORETYPE:+(OpenBLAS pinned to its $OPENBLAS_CORETYPE kernels by OPENBLAS_CORETYPE)}"
}

# Sets layers, width, heads, seq, vocab and batch from the TOML config $1 (for the PyTorch peers), read as TOML
# (comments, quoted keys, 1_000); a key the file leaves out takes dptrain's default, as dptrain itself does. A file
# that is not TOML, or a shape value that is not a whole number, is refused in one line.
dptrain_config_shape() {
  local shape
  shape=$(/usr/bin/python3 - "$1" 2>&1 <<'PY'
import sys, tomllib
try:
    with open(sys.argv[1], "rb") as f:
        config = tomllib.load(f)
except (OSError, tomllib.TOMLDecodeError) as e:
    sys.exit(f"config '{sys.argv[1]}': {e}")
defaults = {"layers": 4, "width": 256, "heads": 4, "seq": 128, "vocab": 256, "batch": 16}  # dptrain --help's
values = [config.get(key, default) for key, default in defaults.items()]
for key, value in zip(defaults, values):
    if type(value) is not int or value < 1:
        sys.exit(f"config '{sys.argv[1]}': {key} = {value!r}, expected a whole number of at least 1")
print(*values)
PY
  ) || dptrain_refuse "$shape"
  read -r layers width heads seq vocab batch <<< "$shape"
}

# The bits per second of a rate tc takes: a number and one of tc's units (any case, as tc reads them), at least
# 8 bit/s (tc reads less than a byte a second as no rate at all); fails, printing nothing, for anything else.
tc_rate_bits() {
  [[ "${1,,}" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([kmgt]?)(bit|bps)$ ]] || return 1
  awk -v n="${BASH_REMATCH[1]}" -v prefix="${BASH_REMATCH[2]}" -v unit="${BASH_REMATCH[3]}" 'BEGIN {
    power = prefix == "" ? 0 : index("kmgt", prefix)
    bits = n * 10 ^ (3 * power) * (unit == "bps" ? 8 : 1)
    if (bits < 8) exit 1
    printf "%.17g\n", bits }'
}

# The scripts' checks of what they were given, made before they set up, build or run anything: one line naming
# the value and what is accepted, and exit 2. $1 names the argument or variable, $2 is its value.
dptrain_refuse() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}
dptrain_require_count() {  # a whole number of at least $3, written as dptrain reads it (no leading zero, 9 digits at most)
  [[ $2 =~ ^(0|[1-9][0-9]{0,8})$ ]] && (( $2 >= $3 )) ||
    dptrain_refuse "$1 must be a whole number of at least $3, got '$2'"
}
dptrain_require_counts() {  # a list of them (NPS="2 4"), not empty
  local count
  [ -n "${2// /}" ] || dptrain_refuse "$1 must list whole numbers of at least $3, got '$2'"
  for count in $2; do dptrain_require_count "$1" "$count" "$3"; done
}
dptrain_require_file() {
  [ -f "$2" ] || dptrain_refuse "$1: no file '$2'"
}

# Median tokens/s of the JSONL log $1's steps after the warm-up: the first two, and under --overlap auto (the
# default) its trial steps too (on and off alternately: the setting the run kept is what is measured). Fails in
# one line when no step is left.
dptrain_median_tokens_per_s() {
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
records = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in records if "step" in r and "event" not in r]
summary = next((r for r in records if r.get("event") == "summary"), {})
choice = summary.get("overlap_choice") or {}
trial = len(choice.get("trial_on_ms", [])) + len(choice.get("trial_off_ms", [])) if choice.get("mode") == "auto" else 0
skip = max(2, 1 + trial)
if len(rows) <= skip:
    sys.exit(f"{sys.argv[1]}: {len(rows)} steps, none after the {skip} of warm-up and --overlap auto's trial: "
             f"give more steps")
print(statistics.median(r["tokens_per_s"] for r in rows[skip:]))
PY
}

# Runs a peer's command ($2 ...) and prints the value on its output line that starts with $1; a peer that fails or
# prints no such line ends the script with its last lines of stderr (needs $work, from dptrain_bench_setup).
dptrain_peer_value() {
  local key=$1
  shift
  if ! "$@" > "$work/peer.out" 2> "$work/peer.err" || ! grep -q "^$key " "$work/peer.out"; then
    { echo "$(basename "$0"): the peer failed: $*"; tail -5 "$work/peer.err"; } >&2
    exit 1
  fi
  awk -v key="$key" '$1 == key { print $2 }' "$work/peer.out"
}

# For the peer benchmarks: the PyTorch packages, the dptrain build, and a work folder $work removed at exit.
dptrain_bench_setup() {
  "$DPTRAIN_ROOT/scripts/setup.sh"
  dptrain_build --target dptrain
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
}

# Two rounds of the caller's dptrain_tokens_per_s and pytorch_tokens_per_s, alternating; $1 names the peer's column.
dptrain_peer_rounds() {
  # ROUNDS (default 2) alternations of dptrain and the peer; the median of the rounds' ratios last.
  printf '%-8s %14s %14s %8s\n' round dptrain_tok/s "$1" ratio
  local round d p ratios=""
  for round in $(seq 1 "${ROUNDS:-2}"); do
    # A side that fails ends the benchmark (a figure read from an earlier round's log would be reprinted).
    d=$(dptrain_tokens_per_s) || { echo "dptrain failed in round $round (its lines above)" >&2; exit 1; }
    p=$(pytorch_tokens_per_s) || { echo "the peer failed in round $round (its lines above)" >&2; exit 1; }
    awk -v r="$round" -v d="$d" -v p="$p" 'BEGIN { printf "%-8s %14.0f %14.0f %8.2f\n", r, d, p, d / p }'
    ratios="$ratios $(awk -v d="$d" -v p="$p" 'BEGIN { print d / p }')"
  done
  printf 'median ratio %.2f over %d rounds\n' "$(echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | dptrain_median)" \
    "${ROUNDS:-2}"
}

# The median of the numbers on stdin, one per line.
dptrain_median() {
  sort -g | awk '{ r[NR] = $1 } END { print NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2 }'
}
