#!/usr/bin/env bash
# Installs the Debian packages dptrain needs (as root), or prints the one apt-get line to run.
set -euo pipefail
packages=(cmake g++ make pkg-config openmpi-bin libopenmpi-dev libopenblas-openmp-dev libcli11-dev libtomlplusplus-dev
          nlohmann-json3-dev libfmt-dev libgtest-dev libxxhash-dev libdnnl-dev fortunes jq
          python3-venv python3-numpy python3-xxhash  # the virtual environment of scripts/python-env.sh
          python3-matplotlib  # scripts/plot.py, tested by tests/train/plot_test.sh
          python3-torch)  # the PyTorch reference and transformers tests, and the benchmarks' peer
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
