#!/usr/bin/env bash
# Installs the Debian packages dptrain needs (as root), or prints the one apt-get line to run.
set -euo pipefail
packages=(cmake g++ make pkg-config openmpi-bin libopenmpi-dev libopenblas-openmp-dev libcli11-dev
          nlohmann-json3-dev libfmt-dev libgtest-dev libxxhash-dev libdnnl-dev fortunes jq
          python3-venv python3-numpy python3-xxhash  # the virtual environment of scripts/python-env.sh
          python3-matplotlib)  # scripts/plot.py, tested by tests/train/plot_test.sh
# Optional peer for the benchmarks (not needed to build or test): DPTRAIN_SETUP_EXTRAS=1.
if [[ "${DPTRAIN_SETUP_EXTRAS:-0}" == 1 ]]; then packages+=(python3-torch); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "dptrain needs: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
