#!/usr/bin/env bash
# The scripts' checks of their arguments and variables: each bad value ends with one line `SCRIPT: ...` naming it and
# what is accepted, and exit 2, before anything is set up, built or run (so each case takes well under a second).
# Usage: input_test.sh SOURCE_DIR
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# refused EXPECTED COMMAND...: exit 2 and exactly one line, the expected one.
refused() {
  local expected=$1 status=0
  shift
  (cd "$root" && timeout 60 "$@") > "$work/out.txt" 2>&1 || status=$?
  [ "$status" = 2 ] && [ "$(cat "$work/out.txt")" = "$expected" ] ||
    { cat "$work/out.txt"; fail "$* exited $status, expected 2 and the one line: $expected"; }
  echo "refused: $*: $expected"
}

refused "demo.sh: DPTRAIN_RANKS must be a whole number of at least 1, got 'abc'" env DPTRAIN_RANKS=abc scripts/demo.sh
refused "demo.sh: DPTRAIN_RANKS must be a whole number of at least 1, got '99999999999999999999'" \
  env DPTRAIN_RANKS=99999999999999999999 scripts/demo.sh
refused "bench-train.sh: config: no file '$work/none.toml'" scripts/bench-train.sh "$work/none.toml"
refused "bench-train.sh: threads must be a whole number of at least 1, got 'abc'" \
  scripts/bench-train.sh configs/tiny.toml abc
refused "bench-train.sh: steps must be a whole number of at least 8, got '7'" scripts/bench-train.sh configs/tiny.toml 1 7
printf 'layers = 2\nwidth = "wide"\n' > "$work/shape.toml"
refused "bench-train.sh: config '$work/shape.toml': width = 'wide', expected a whole number of at least 1" \
  scripts/bench-train.sh "$work/shape.toml"
printf 'layers = 2 garbage\n' > "$work/broken.toml"
refused "bench-ddp.sh: config '$work/broken.toml': Expected newline or end of document after a statement (at line 1, \
column 12)" scripts/bench-ddp.sh "$work/broken.toml"
printf 'batch = 15  # odd\n' > "$work/odd.toml"
refused "bench-ddp.sh: the config's global batch 15 is not divisible by 2 ranks" scripts/bench-ddp.sh "$work/odd.toml"
refused "bench-ddp.sh: ranks must be a whole number of at least 1, got '0'" scripts/bench-ddp.sh configs/tiny.toml 0
refused "bench-gemm.sh: ROUNDS must be a whole number of at least 1, got '-1'" \
  env ROUNDS=-1 scripts/bench-gemm.sh configs/tiny.toml
mkdir -p "$work/build" && touch "$work/build/dptrain" "$work/build/dpbench" && chmod +x "$work/build"/*
refused "bench-compare.sh: STEPS must be a whole number of at least 8, got '1.5'" \
  env STEPS=1.5 scripts/bench-compare.sh "$work/build" "$work/build"
refused "bench-collectives.sh: REPEATS must be a whole number of at least 1, got 'abc'" \
  env REPEATS=abc scripts/bench-collectives.sh
refused "bench-collectives.sh: NPS must be a whole number of at least 1, got 'two'" \
  env NPS="2 two" scripts/bench-collectives.sh
refused "bench-model-fit.sh: NPS must be a whole number of at least 2, got '1'" env NPS=1 scripts/bench-model-fit.sh
refused "bench-overlap.sh: STEPS must be a whole number of at least 8, got '0'" env STEPS=0 scripts/bench-overlap.sh
refused "bench-zero.sh: NP must be a whole number of at least 2, got 'x'" env NP=x scripts/bench-zero.sh
refused "bench-zero.sh: NP must be a whole number of at least 2, got '1'" env NP=1 scripts/bench-zero.sh
refused "bench-overlap.sh: ONLY: unknown config 'nosuch' (expected tiny, small, small/block or wide)" \
  env ONLY="tiny nosuch" scripts/bench-overlap.sh
refused "bench-collectives.sh: DTYPE must be bf16 or fp32, got 'fp16'" env DTYPE=fp16 scripts/bench-collectives.sh
refused "bench-model-fit.sh: QUIET_LIMIT must be a number of cores, e.g. 0.1, got 'abc'" \
  env QUIET_LIMIT=abc scripts/bench-model-fit.sh
refused "bench-train.sh: takes at most 3 arguments (see its header), got 4: configs/tiny.toml 1 8 extra" \
  scripts/bench-train.sh configs/tiny.toml 1 8 extra
refused "bench-ddp.sh: takes at most 4 arguments (see its header), got 5: configs/tiny.toml 2 1 8 x" \
  scripts/bench-ddp.sh configs/tiny.toml 2 1 8 x
refused "bench-hosts.sh: RATE '50 mbit' is not a tc rate (expected a number of at least 8 bit/s and one of tc's units \
bit, kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps, tbps, e.g. 200mbit)" env RATE="50 mbit" scripts/bench-hosts.sh
refused "sanitize-kernels.sh: takes no arguments (got: --help; the build folder is DPTRAIN_SANITIZE_BUILD)" \
  scripts/sanitize-kernels.sh --help
refused "gpu-check-all.sh: GPU_CHECK_SECONDS must be a whole number of at least 60, got 'ten'" \
  env GPU_CHECK_SECONDS=ten scripts/gpu-check-all.sh
refused "gpu-check: GPU_CHECK_SECONDS must be whole seconds from 30 to 999999, got 'ten'" \
  env GPU_CHECK_SECONDS=ten OUT="$work/gpu" scripts/gpu-check.sh
refused "fuzz-checkpoint: seconds must be a whole number from 1 to 9999999, got 'abc'" scripts/fuzz-checkpoint.sh abc
refused "gpu-check-all.sh: GPU_CHECK_SINGLE_SECONDS (300) must leave the two-rank check 30 s of GPU_CHECK_SECONDS (300)" \
  env GPU_CHECK_SECONDS=300 scripts/gpu-check-all.sh
refused "python-env: usage: scripts/python-env.sh [DIR] (got: --help)" scripts/python-env.sh --help
touch "$work/a-file"
refused "python-env: cannot create '$work/a-file/venv': '$work/a-file' is not a folder this user can write" \
  scripts/python-env.sh "$work/a-file/venv"
refused "gpu-mpirun: -np must be a whole number of at least 1, got 'two' (usage: scripts/gpu-mpirun.sh -np N \
[mpirun options] PROGRAM ARGS...)" scripts/gpu-mpirun.sh -np two build-gpu/bin/dpbench
refused "gpu-check: OUT='$work/a-file' is not a directory this user can write (expected a directory, or a path to \
create)" env OUT="$work/a-file" scripts/gpu-check.sh
refused "gpu-check-all.sh: OUT='$work/a-file/out' is not a directory this user can write (expected a directory, or a \
path to create)" env OUT="$work/a-file/out" scripts/gpu-check-all.sh

# gpt_reference.py, where Debian's torch is installed (scripts/setup.sh installs it; CI has it).
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  reference=scripts/gpt_reference.py
  refused "gpt_reference: --threads must be at least 1, got 0" /usr/bin/python3 $reference bench --threads 0
  refused "gpt_reference: --steps must be more than --warmup 2 (the median is of the steps after it), got 2" \
    /usr/bin/python3 $reference bench --steps 2
  refused "gpt_reference: --nproc must be at least 1, got 0" /usr/bin/python3 $reference bench-ddp --nproc 0
  refused "gpt_reference: --safetensors: cannot read '$work/none': No such file or directory" \
    /usr/bin/python3 $reference check --safetensors "$work/none" --heads 2
  refused "gpt_reference: --safetensors: '$work/a-file' is not a safetensors file (unpack requires a buffer of 8 bytes)" \
    /usr/bin/python3 $reference check --safetensors "$work/a-file" --heads 2
  printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":5}         ' > "$work/entry.safetensors"
  refused "gpt_reference: --safetensors: '$work/entry.safetensors': tensor a's entry 5 does not describe its bytes \
(TypeError: 'int' object is not subscriptable)" /usr/bin/python3 $reference check --safetensors "$work/entry.safetensors" \
    --heads 2
else
  echo "SKIP: gpt_reference.py's checks: Debian's python3-torch is not installed (the scripts' checks above passed)"
  exit 77
fi
echo "PASS"
