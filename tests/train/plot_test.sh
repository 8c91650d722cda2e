#!/usr/bin/env bash
# scripts/plot.py. Bad input — no arguments, a missing or non-JSON file, rows or a link.json that dpbench would not
# write — gives one line `plot: ...` and exit 2 before anything is drawn (no matplotlib needed for that). Then, where
# Debian's python3-matplotlib imports (else the test skips, exit 77), every kind of sweep plots: reduce-scatter,
# all-gather or sendrecv rows alone, tree or native all-reduce rows without --link (each fitted on its own
# formula), one size (no fit: a note and no model line), a link.json with γ, and a run log with a null loss.
# Usage: plot_test.sh SOURCE_DIR
set -euo pipefail
plot="$1/scripts/plot.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# $work/NAME.json: dpbench --json rows on RANKS ranks for each "op:algo" given, sizes 1 KiB … 1 MiB (or SIZES), the
# time growing linearly with the size.
bench() {
  local name=$1 ranks=$2; shift 2
  /usr/bin/python3 - "$work/$name.json" "$ranks" "${SIZES:-1024 4096 65536 1048576}" "$@" <<'EOF'
import json, sys
path, ranks, sizes, lines = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split()], sys.argv[4:]
rows = [{"op": line.split(":")[0], "algo": line.split(":")[1], "type": "bf16", "size": n, "count": n // 2,
         "time_us": 5 + n / 1000, "algbw": 0, "busbw": 0, "wrong": 0, "nccl_estimate_us": None, "ranks": ranks}
        for line in lines for n in sizes]
json.dump(rows, open(path, "w"))
EOF
}

# Runs plot.py with "$@" and expects exit 2, one line `plot: ...` holding $1, and no --out folder made (the
# default here is $work/never; a later --out in "$@" wins).
refused() {
  local expected=$1 status=0
  shift
  "$plot" --out "$work/never" "$@" > "$work/out.txt" 2>&1 || status=$?
  [ "$status" = 2 ] && [ "$(wc -l < "$work/out.txt")" = 1 ] && grep -q '^plot: ' "$work/out.txt" &&
    grep -qF -- "$expected" "$work/out.txt" ||
    { cat "$work/out.txt"; fail "plot.py $* exited $status, expected 2 and one line holding: $expected"; }
  [ ! -e "$work/never" ] || fail "plot.py $*: made --out although it refused"
  echo "refused: plot.py $*: $(cat "$work/out.txt")"
}

bench all 2 allreduce:ring allreduce:tree allreduce:native reduce_scatter:ring all_gather:ring
bench mixed 2 allreduce:ring
bench four 4 allreduce:ring
/usr/bin/python3 -c "import json, sys; json.dump(json.load(open('$work/mixed.json')) + json.load(open('$work/four.json')), open('$work/mixed.json', 'w'))"
echo '{"alpha_s": 5e-6, "bandwidth_Bps": 1e9, "gamma_s_per_byte": 1e-10}' > "$work/link.json"
echo '{"alpha_s": 5e-6, "bandwidth_Bps": 1e9, "gamma_s_per_byte": -1e-10}' > "$work/negative-gamma.json"
printf '%s\n' '{"step": 1, "loss": 5.5, "step_ms": 2.0, "comm_ms": 0.5, "comm_model_ms": 0.1, "step_model_ms": 1.0}' \
  '{"step": 2, "loss": null, "step_ms": 2.1, "comm_ms": 0.4, "comm_model_ms": 0.1, "step_model_ms": 1.0}' \
  '{"step": 3, "loss": 5.1, "val_loss": 5.2, "step_ms": 1.9}' '{"event": "summary"}' > "$work/run.jsonl"
printf '%s\n' '{"step": 1, "loss": 5.5, "step_ms": 2.0}' '{"step": 2, "loss": 5.' > "$work/cut.jsonl"
printf '%s\n' '{"step": 1, "loss": "5.5", "step_ms": 2.0}' > "$work/string.jsonl"
echo '{"event": "summary"}' > "$work/summary.jsonl"
echo '{"step": 1, "step_ms": 2.0}' > "$work/no-loss.jsonl"
echo '{"step": 1, "loss": 5.5, "step_ms": -2.0}' > "$work/negative.jsonl"
/usr/bin/python3 -c "print('[' * 100000)" > "$work/deep.json"
echo '{"op": "allreduce"' > "$work/cut.json"
echo '{"rows": []}' > "$work/object.json"
echo '[{"op": "allreduce", "algo": "ring", "size": 1024, "ranks": 2}]' > "$work/no-time.json"
echo '[]' > "$work/empty.json"
touch "$work/a-file"

refused "nothing to plot: give --run, --bench or both (usage: plot.py"
refused "--link is drawn against --bench, which is missing" --link "$work/link.json"
refused "--run: cannot read '$work/missing.jsonl': No such file or directory" --run "$work/missing.jsonl"
refused "--bench: cannot read '$work/missing.json': No such file or directory" --bench "$work/missing.json"
refused "--link: cannot read '$work/missing.json': No such file or directory" --bench "$work/all.json" \
  --link "$work/missing.json"
refused "--run: '$work/cut.jsonl' line 2 is not JSON" --run "$work/cut.jsonl"
refused "--run: '$work/string.jsonl' line 1: 'loss' is \"5.5\", expected a number" --run "$work/string.jsonl"
refused "--run: '$work/summary.jsonl' holds no step records" --run "$work/summary.jsonl"
refused "--run: '$work/no-loss.jsonl' holds no loss in its 1 step record(s)" --run "$work/no-loss.jsonl"
refused "--run: '$work/negative.jsonl' line 1: 'step_ms' is -2.0, expected a time in ms (> 0)" \
  --run "$work/negative.jsonl"
refused "--bench: '$work/deep.json' is not JSON (maximum recursion depth" --bench "$work/deep.json"
refused "--bench: '$work/cut.json' is not JSON" --bench "$work/cut.json"
refused "--bench: '$work/object.json' holds an object, expected the JSON array of rows" --bench "$work/object.json"
refused "--bench: '$work/no-time.json' row 0 is" --bench "$work/no-time.json"
refused "--bench: '$work/empty.json' holds no rows with a size > 0" --bench "$work/empty.json"
refused "--bench: '$work/mixed.json' mixes rank counts [2, 4]" --bench "$work/mixed.json"
refused "--link: '$work/cut.json' is not JSON" --bench "$work/all.json" --link "$work/cut.json"
refused "need finite α ≥ 0, B > 0 and γ ≥ 0" --bench "$work/all.json" --link "$work/negative-gamma.json"
refused "unrecognized arguments: --bogus" --bogus

if ! /usr/bin/python3 -c 'import matplotlib, numpy' 2>/dev/null; then
  echo "SKIP: the plots need Debian's python3-matplotlib (the input checks above passed)"
  exit 77
fi

refused "--out: cannot make the folder '$work/a-file/never'" --bench "$work/all.json" --out "$work/a-file/never"

# Runs plot.py with "$@" into a fresh --out; expects exit 0, the PNG files named in $1 and the note $2 (or none).
plots() {
  local files=$1 note=$2 out="$work/out-$RANDOM" status=0
  shift 2
  "$plot" "$@" --out "$out" > "$work/out.txt" 2>&1 || status=$?
  [ "$status" = 0 ] || { cat "$work/out.txt"; fail "plot.py $* exited $status"; }
  for file in $files; do [ -s "$out/$file" ] || fail "plot.py $*: no $file"; done
  if [ -n "$note" ]; then
    grep -qF -- "$note" "$work/out.txt" || { cat "$work/out.txt"; fail "plot.py $*: no note '$note'"; }
  else
    [ ! -s "$work/out.txt" ] || { cat "$work/out.txt"; fail "plot.py $* printed something"; }
  fi
  echo "plotted: plot.py $* ${note:+($note)}"
}

bench reduce_scatter 2 reduce_scatter:ring reduce_scatter:tree reduce_scatter:native
bench all_gather 3 all_gather:ring
bench sendrecv 2 sendrecv:p2p
bench tree 4 allreduce:tree
bench native 2 allreduce:native
SIZES=65536 bench one 2 allreduce:ring
plots link_time.png "" --bench "$work/reduce_scatter.json"
plots link_time.png "" --bench "$work/all_gather.json"
plots link_time.png "plot: note: sendrecv p2p: no model line" --bench "$work/sendrecv.json"
plots link_time.png "" --bench "$work/tree.json"
plots link_time.png "" --bench "$work/native.json"
plots link_time.png "plot: note: allreduce ring: no model line (an α–β fit needs two sizes or more" \
  --bench "$work/one.json"
plots link_time.png "" --bench "$work/all.json" --link "$work/link.json"
# dpbench --fit's link.json of several algorithms: each model line with its own algorithm's fit.
echo '{"alpha_s": 5e-6, "bandwidth_Bps": 1e9, "fits": [{"algo": "ring", "alpha_s": 5e-6, "bandwidth_Bps": 1e9},
  {"algo": "tree", "alpha_s": 2e-6, "bandwidth_Bps": 2e9}, {"algo": "native", "alpha_s": "bad"}]}' \
  > "$work/link-fits.json"
plots link_time.png "" --bench "$work/all.json" --link "$work/link-fits.json"
plots "loss.png step_time.png link_time.png" "" --run "$work/run.jsonl" --bench "$work/all.json"

# A write that fails (here: beyond a file-size limit) leaves the earlier plot as it was, and no temporary beside it.
mkdir -p "$work/kept" && echo "an earlier plot" > "$work/kept/loss.png"
status=0
(ulimit -f 8 && "$plot" --run "$work/run.jsonl" --out "$work/kept") > "$work/out.txt" 2>&1 || status=$?
[ "$status" = 2 ] && grep -qF "plot: --out: cannot write '$work/kept/loss.png': File too large" "$work/out.txt" ||
  { cat "$work/out.txt"; fail "plot.py beyond the file-size limit exited $status"; }
[ "$(cat "$work/kept/loss.png")" = "an earlier plot" ] || fail "a failed write replaced the earlier loss.png"
[ "$(ls -A "$work/kept")" = "loss.png" ] || fail "a failed write left $(ls -A "$work/kept")"
echo "kept: the earlier loss.png, after a write beyond the file-size limit"
echo "PASS"
