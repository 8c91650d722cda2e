# Sourced by the test-host tests: a set of test hosts of the test's own (so tests may run side by side), removed
# on every exit, failed or not; `hosts_up` skips the test (exit 77) where namespaces cannot be made, except under
# CI=true, where that is a failure.
# Needs: $SOURCE_DIR (the repository) and $BUILD_DIR set by the caller.
set -euo pipefail
export DPTRAIN_HOSTS="dptest-$(basename "$0" .sh | tr -cd 'a-z0-9' | cut -c1-12)"
hosts="$SOURCE_DIR/scripts/hosts.sh"
work=$(mktemp -d)
trap '"$hosts" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

hosts_up() {
  local status=0
  "$hosts" up "$@" > "$work/up.txt" 2>&1 || status=$?
  if [ "$status" = 77 ]; then
    cat "$work/up.txt"
    if [ "${CI:-}" = true ]; then echo "FAIL: CI=true and test hosts cannot be made here"; exit 1; fi
    echo "SKIP: test hosts need network namespaces"
    exit 77
  fi
  [ "$status" = 0 ] || { cat "$work/up.txt"; echo "FAIL: hosts.sh up $*"; exit 1; }
}

fail() { echo "FAIL: $*"; exit 1; }

# A byte-level corpus for the tiny config: the project's own documentation.
corpus() { cat "$SOURCE_DIR"/README.md "$SOURCE_DIR"/docs/*.md > "$work/corpus.txt"; echo "$work/corpus.txt"; }
