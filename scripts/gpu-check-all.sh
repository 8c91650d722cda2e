#!/usr/bin/env bash
# Both GPU checks in one call on the bare GPU machine, within one deadline: scripts/gpu-check.sh (one GPU: tests,
# benchmark against PyTorch, sanitizers) with GPU_CHECK_SINGLE_SECONDS (default 300), then scripts/gpu-check-multi.sh
# (two ranks on it) with what is left of GPU_CHECK_SECONDS (default 540, under the device's 600 s a call) less 10 s
# for the packing. One call spares the second start-up and transfer, and the machine cannot be handed back between
# them. Each writes into its own folder, $OUT/single and $OUT/multi (logs, summaries check-<date>.json and
# check-multi-<date>.json: commit those under docs/gpu/); the logs also go into $OUT/logs.tar.xz, the corpus left out
# (xz -1: the sanitizers' logs can be tens of MB, and the packing has 10 s).
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
mkdir -p "$OUT/single" "$OUT/multi" 2>/dev/null && [ -w "$OUT" ] ||
  dptrain_refuse "OUT='$OUT' is not a directory this user can write (expected a directory, or a path to create)"
started=$(date +%s)

OUT="$OUT/single" GPU_CHECK_SECONDS="$single" "$root/scripts/gpu-check.sh"
single_status=$?
left=$((total - 10 - ($(date +%s) - started)))
if ((left >= 30)); then
  OUT="$OUT/multi" GPU_CHECK_SECONDS="$left" "$root/scripts/gpu-check-multi.sh"
  multi_status=$?
else
  echo "gpu-check-all: the two-rank check not started: ${left} s left of ${total} s" | tee "$OUT/multi/not-started.txt"
  multi_status=1
fi
XZ_OPT=-1 tar -cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=corpus.txt single multi
echo "gpu-check-all: one GPU exit $single_status, two ranks exit $multi_status, $(($(date +%s) - started)) s"
exit $((single_status != 0 ? single_status : multi_status))
