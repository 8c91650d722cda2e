#!/usr/bin/env bash
# The Python packages of the interoperability tests (tests/train/hf_test.cpp), from PyPI, in a virtual environment.
#
#   scripts/python-env.sh [DIR]     DIR defaults to $DPTRAIN_BUILD/python; ctest runs this as the fixture
#                                   `python_env` before the tests that use DIR/bin/python
#
# The environment is made from Debian's /usr/bin/python3 (override: DPTRAIN_PYTHON) with its system site packages,
# so Debian's python3-numpy and python3-torch are used as they are; Debian's own python is "externally managed"
# (PEP 668), so pip installs into DIR and never into the system. Needs python3-venv (scripts/setup.sh).
#   required: safetensors, numpy<2 (torch 1.13 is built against numpy 1) and xxhash (scripts/export_hf.py checks
#             the checkpoint's XXH64 checksums; Debian's python3-xxhash satisfies it). When they cannot be installed
#             this exits 1 with the reason.
#   optional: transformers (needs torch). When it cannot be installed, DIR/transformers-unavailable.txt says why
#             and the export test skips with that reason; this still exits 0.
# Idempotent: when DIR already holds the pinned versions it returns at once (no network).
set -euo pipefail
source "$(dirname "$0")/env.sh"
dir="${1:-$DPTRAIN_BUILD/python}"
[[ $# -le 1 && $dir != -* ]] || { echo "python-env: usage: scripts/python-env.sh [DIR] (got: $*)" >&2; exit 2; }
parent=$(dirname "$dir")
mkdir -p "$parent" 2>/dev/null && [[ -w $parent ]] ||
  { echo "python-env: cannot create '$dir': '$parent' is not a folder this user can write" >&2; exit 2; }
base_python="${DPTRAIN_PYTHON:-/usr/bin/python3}"
# transformers 4.46.3: recent releases need torch >= 2; 4.46.3 loads GPT2LMHeadModel on Debian's torch 1.13
# (verified by tests/train/hf_test.cpp). safetensors 0.6.2 satisfies it (>= 0.4.1).
required=("safetensors==0.6.2" "numpy<2" "xxhash")
optional=("transformers==4.46.3")
python="$dir/bin/python"
unavailable="$dir/transformers-unavailable.txt"

# Prints the requirements of "$@" that $python does not satisfy (exit 0 either way).
unsatisfied() {
  "$python" - "$@" <<'EOF'
import sys
from importlib import metadata
from packaging.requirements import Requirement
for spec in sys.argv[1:]:
    requirement = Requirement(spec)
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        version = None
    if version is None or not requirement.specifier.contains(version, prereleases=True):
        print(spec)
EOF
}

pip_install() {
  "$python" -m pip install --disable-pip-version-check --no-input --quiet --timeout 30 --retries 2 "$@"
}

if [[ ! -x "$python" ]]; then
  [[ -x "$base_python" ]] || { echo "python-env: $base_python is missing: apt-get install python3 python3-venv" >&2; exit 1; }
  echo "python-env: creating $dir from $base_python"
  if ! "$base_python" -m venv --system-site-packages "$dir" >"$dir.log" 2>&1; then
    cat "$dir.log" >&2
    rm -rf "$dir"
    echo "python-env: '$base_python -m venv' failed: apt-get install python3-venv (scripts/setup.sh installs it)" >&2
    exit 1
  fi
  rm -f "$dir.log"
fi

# unsatisfied() compares versions with `packaging` (Debian's python3-packaging where present, else from PyPI).
if ! "$python" -c 'import packaging.requirements' 2>/dev/null; then pip_install packaging; fi

missing=$(unsatisfied "${required[@]}")
if [[ -n "$missing" ]]; then
  echo "python-env: installing from PyPI: $(echo $missing)"
  if ! pip_install $missing; then
    echo "python-env: pip could not install $(echo $missing) from PyPI into $dir (no network to PyPI?);" \
         "the safetensors interoperability test cannot run" >&2
    exit 1
  fi
fi

if ! "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'; then
  echo "transformers needs torch, which $base_python cannot import: apt-get install python3-torch" \
       "(scripts/setup.sh installs it)" >"$unavailable"
else
  missing=$(unsatisfied "${optional[@]}")
  if [[ -n "$missing" ]]; then
    echo "python-env: installing from PyPI: $(echo $missing)"
    if pip_install $missing; then
      rm -f "$unavailable"
    else
      echo "pip could not install $(echo $missing) from PyPI into $dir (no network to PyPI?)" >"$unavailable"
    fi
  else
    rm -f "$unavailable"
  fi
fi
if [[ -f "$unavailable" ]]; then echo "python-env: transformers unavailable: $(cat "$unavailable")"; fi
echo "python-env: $dir has ${required[*]}$([[ -f "$unavailable" ]] || echo " ${optional[*]}")"
