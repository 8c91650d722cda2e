#!/usr/bin/env bash
# Fuzzes the checkpoint readers (safetensors and meta.json) with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer, each for a bounded time. Not part of the default build: it needs clang and
# libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev).
#   scripts/fuzz-checkpoint.sh [seconds per target, default 60]
# Builds into $DPTRAIN_FUZZ_BUILD (default build-fuzz/); a crash leaves its input there (crash-*) and exits non-zero:
# turn it into a regression test beside tests/train/checkpoint_integrity_test.cpp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
# A whole number of seconds, at least 1 (libFuzzer reads 0 or a word as no limit at all).
[[ $seconds =~ ^[1-9][0-9]{0,6}$ ]] ||
  { echo "fuzz-checkpoint: seconds must be a whole number from 1 to 9999999, got '$seconds'" >&2; exit 2; }
out="${DPTRAIN_FUZZ_BUILD:-$root/build-fuzz}"
cxx="${CXX_FUZZ:-clang++}"
command -v "$cxx" >/dev/null || { echo "fuzz-checkpoint: $cxx not found: apt-get install clang libclang-rt-14-dev" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/crash-* "$out"/leak-* "$out"/oom-* "$out"/timeout-*  # an earlier run's findings: this run's status is its own
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/include")
common=("$root/src/train/safetensors.cpp" "$root/src/core/atomic_file.cpp" "$root/src/core/checksum.cpp")
libs=(-lfmt -lxxhash)

# A seed corpus per target: a valid file of each kind, so the fuzzer starts from inputs that pass the first checks.
seeds="$out/seeds"
mkdir -p "$seeds/safetensors" "$seeds/meta"
python3 - "$seeds" <<'PY'
import json, struct, sys
d = sys.argv[1]
header = json.dumps({"__metadata__": {"ranges": "[[0,2]]"},
                     "master": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "w": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]}}).encode()
header += b" " * ((8 - len(header) % 8) % 8)
open(f"{d}/safetensors/valid", "wb").write(struct.pack("<Q", len(header)) + header + bytes(12))
meta = {"format": "dptrain-checkpoint-1", "step": 5, "optimizer_step": 4,
        "model": {"vocab": 256, "seq": 16, "layers": 2, "width": 32, "heads": 2},
        "optimizer_shards": ["optimizer-00000-of-00002.safetensors", "optimizer-00001-of-00002.safetensors"],
        "checksums": {"model.safetensors": "xxh64:0123456789abcdef",
                      "optimizer-00000-of-00002.safetensors": "xxh64:0000000000000001",
                      "optimizer-00001-of-00002.safetensors": "xxh64:0000000000000002"}}
open(f"{d}/meta/valid", "w").write(json.dumps(meta, indent=2))
PY

status=0
for target in safetensors checkpoint_meta; do
  "$cxx" "${flags[@]}" "$root/tests/fuzz/${target}_fuzz.cpp" "${common[@]}" "$root/src/train/checkpoint_meta.cpp" \
    "${libs[@]}" -o "$out/${target}_fuzz"
  corpus="$out/corpus-$target"
  mkdir -p "$corpus"
  seed_dir="$seeds/safetensors"; [[ $target == checkpoint_meta ]] && seed_dir="$seeds/meta"
  echo "fuzz-checkpoint: $target for ${seconds}s"
  # -rss_limit_mb: a header may declare a huge tensor; the reader must refuse it, not allocate it.
  if ! (cd "$out" && "./${target}_fuzz" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
          -print_final_stats=1 "$corpus" "$seed_dir" 2>&1 | tail -n 25); then
    status=1
  fi
done
ls "$out"/crash-* "$out"/leak-* "$out"/oom-* "$out"/timeout-* 2>/dev/null && status=1
exit $status
