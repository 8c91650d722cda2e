#!/usr/bin/env bash
# Both GPU checks in one command on the bare GPU machine, within one deadline: scripts/gpu-check.sh (one GPU: tests,
# benchmark against PyTorch, sanitizers) with GPU_CHECK_SINGLE_SECONDS (default 300), then scripts/gpu-check-multi.sh
# (two ranks on it) with what is left of GPU_CHECK_SECONDS (default 540, under 10 minutes) less 10 s for the
# packing. One command spares a second start-up and copy of the bundle. The checks write some 80 files, and $OUT is
# kept to a few, so that it can be copied back from a remote machine whole: each check writes into its own scratch
# folder, and $OUT gets only the two summaries check-<date>.json and
# check-multi-<date>.json (commit those under docs/gpu/) and every log in logs.tar.xz (the corpus left out; xz -1:
# the sanitizers' logs can be tens of MB, and the packing has 10 s), in parts logs.tar.xz.part-N of 15 MiB where it
# is larger (at most 4; `cat logs.tar.xz.part-* | tar -xJ`), also when the script is stopped (SIGTERM, SIGINT).
# The last line printed is a digest of both summaries' main figures (the end of the output holds them even where no
# file is copied back).
# Exits with the first check's status where it is not 0, else the second's.
# Usage (on the GPU machine, from the repository root, build-gpu.tar.xz beside it): OUT=/some/dir scripts/gpu-check-all.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/env.sh"
(($# == 0)) || dptrain_refuse "takes no arguments (got: $*; the deadlines are GPU_CHECK_SECONDS and" \
  "GPU_CHECK_SINGLE_SECONDS)"
total="${GPU_CHECK_SECONDS:-540}"
single="${GPU_CHECK_SINGLE_SECONDS:-300}"
dptrain_require_count GPU_CHECK_SECONDS "$total" 60
dptrain_require_count GPU_CHECK_SINGLE_SECONDS "$single" 30
((single + 30 <= total)) ||
  dptrain_refuse "GPU_CHECK_SINGLE_SECONDS ($single) must leave the two-rank check 30 s of GPU_CHECK_SECONDS ($total)"
OUT="${OUT:-$root/gpu-check-out}"
mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ] ||
  dptrain_refuse "OUT='$OUT' is not a directory this user can write (expected a directory, or a path to create)"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || dptrain_refuse "cannot make a scratch folder under ${TMPDIR:-/tmp}"
mkdir -p "$work/single" "$work/multi"
started=$(date +%s)
single_status=1 multi_status=1

# The summaries and the logs into $OUT, once (at the end, or when stopped).
packed=0
pack() {
  ((packed == 0)) || return 0
  packed=1
  cp "$work"/single/check-*.json "$work"/multi/check-multi-*.json "$OUT"/ 2>/dev/null
  XZ_OPT=-1 tar -cJf "$work/logs.tar.xz" -C "$work" --exclude=corpus.txt single multi
  local part_bytes=$((15 << 20)) parts
  if (($(stat -c %s "$work/logs.tar.xz") <= part_bytes)); then
    cp "$work/logs.tar.xz" "$OUT/"
  else
    split -b "$part_bytes" -d -a 1 "$work/logs.tar.xz" "$OUT/logs.tar.xz.part-"
    parts=$(find "$OUT" -maxdepth 1 -name 'logs.tar.xz.part-*' | wc -l)
    if ((parts > 4)); then
      rm -f "$OUT"/logs.tar.xz.part-[4-9]
      echo "gpu-check-all: the logs took $parts parts of 15 MiB; the first 4 kept (64 MiB come back at most)"
    fi
  fi
  echo "gpu-check-all: one GPU exit $single_status, two ranks exit $multi_status, $(($(date +%s) - started)) s;" \
    "in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
  python3 - "$work" <<'PY' || true
import glob, json, sys
keys = {"single": ["commit", "device", "tests_passed", "tests_failed", "mfu", "tokens_per_s", "pytorch_tokens_per_s",
                   "pytorch_compile_tokens_per_s"],
        "multi": ["nccl_version", "transport", "ring_vs_native_busbw", "dpbench_wrong"]}
digest = {}
for part, pattern in [("single", "single/check-*.json"), ("multi", "multi/check-multi-*.json")]:
    for path in glob.glob(f"{sys.argv[1]}/{pattern}"):
        try:
            summary = json.load(open(path))
        except (OSError, ValueError) as e:
            digest[part] = f"unreadable: {e}"
            continue
        digest[part] = {k: summary.get(k) for k in keys[part] if k in summary}
        if part == "multi":
            comparisons = summary.get("training_comparisons") or []
            digest[part]["comparisons_held"] = f"{sum(bool(c.get('passed')) for c in comparisons)}/{len(comparisons)}"
            digest[part]["overlap_goal_met"] = (summary.get("gpt2_124m_overlap") or {}).get("goal_met")
print("gpu-check-all digest:", json.dumps(digest, separators=(",", ":")))
PY
}
# Stopped: the check running is stopped too (its own summary is written on its exit), then the packing.
child=""
stopped() {
  [ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child"; }
  pack
  exit "$1"
}
trap 'stopped 143' TERM
trap 'stopped 130' INT
# A check in the background, waited for: a signal's trap runs at once, not when the check ends.
run_check() {  # OUT, seconds, script
  OUT="$1" GPU_CHECK_SECONDS="$2" "$3" &
  child=$!
  wait "$child"
  local status=$?
  child=""
  return "$status"
}

run_check "$work/single" "$single" "$root/scripts/gpu-check.sh"
single_status=$?
cp "$work"/single/check-*.json "$OUT"/ 2>/dev/null  # back already if the call ends before the packing
left=$((total - 10 - ($(date +%s) - started)))
if ((left >= 30)); then
  run_check "$work/multi" "$left" "$root/scripts/gpu-check-multi.sh"
  multi_status=$?
else
  echo "gpu-check-all: the two-rank check not started: ${left} s left of ${total} s" | tee "$work/multi/not-started.txt"
fi
pack
exit $((single_status != 0 ? single_status : multi_status))
