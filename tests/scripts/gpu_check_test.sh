#!/usr/bin/env bash
# scripts/gpu-check.sh's plumbing, where no GPU is: a GPU run is one call of a few minutes that cannot be repeated at
# will, so a mistake in the script (a misspelt call, an unset variable) must show here first. In a copy of the
# scripts beside a stand-in bundle (build-gpu/ with this build's dptrain and dpbench, and for the three GPU test
# binaries stand-ins that pass one test and write gtest's JSON), the check must run each test binary with its
# filter, its JSON output and a whole number of seconds, and its summary must count the three as passed. (The
# benchmark's dptrain runs refuse --device cuda here, so the check itself exits 1: no figures; the kernels' resource
# report is left out, tests/kernels not being copied: it would compile them, for tens of seconds.)
# Usage: gpu_check_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$work/out/progress.txt" 2>/dev/null; exit 1; }

mkdir -p "$work/root/build-gpu/bin" "$work/root/build-gpu/lib" "$work/root/build-gpu/openmpi"
cp -r "$source_dir/scripts" "$source_dir/configs" "$work/root/"
cp "$build_dir/dptrain" "$build_dir/dpbench" "$work/root/build-gpu/bin/"
git -C "$source_dir" rev-parse HEAD > "$work/root/build-gpu/COMMIT" 2>/dev/null || echo unknown > "$work/root/build-gpu/COMMIT"
for name in compute_test dp_test train_test; do
  cat > "$work/root/build-gpu/bin/$name" <<STANDIN
#!/usr/bin/env bash
echo "\$*" > "$work/$name.args"
for a in "\$@"; do case \$a in --gtest_output=json:*) out=\${a#--gtest_output=json:};; esac; done
echo '{"testsuites":[{"name":"Suite","testsuite":[{"name":"Test/cuda","result":"COMPLETED","status":"RUN"}]}]}' > "\$out"
STANDIN
  chmod +x "$work/root/build-gpu/bin/$name"
done

status=0
(cd "$work/root" && OUT="$work/out" GPU_CHECK_SECONDS=90 timeout 120 scripts/gpu-check.sh > "$work/log.txt" 2>&1) ||
  status=$?
[[ $status != 124 ]] || fail "gpu-check.sh still running after 120 s"
! grep -E "unbound variable|integer expression expected|invalid time interval|syntax error" "$work/log.txt" ||
  fail "the script's own errors above"
for name in compute_test dp_test train_test; do
  [[ -f $work/$name.args ]] || fail "$name was not run"
  grep -q -- "--gtest_filter=" "$work/$name.args" || fail "$name without a filter: $(cat "$work/$name.args")"
  grep -q -- "--gtest_output=json:$work/out/tests-$name.json" "$work/$name.args" ||
    fail "$name without its JSON output: $(cat "$work/$name.args")"
  grep -Eq "tests: $name --gtest_filter=.* \(at most [0-9]+ s\)$" "$work/out/progress.txt" ||
    fail "no 'tests: $name ... (at most N s)' line"
done
summary=$(ls "$work"/out/check-*.json 2>/dev/null | head -1)
[[ -n $summary ]] || { cat "$work/log.txt"; fail "no summary check-<date>.json"; }
counts=$(jq -c '[.tests_passed, .tests_failed]' "$summary")
[[ $counts == "[3,0]" ]] || fail "tests passed and failed $counts, expected [3,0]"
echo "gpu-check.sh: the three test binaries ran with filter, JSON output and time limit; summary [passed, failed] $counts"
