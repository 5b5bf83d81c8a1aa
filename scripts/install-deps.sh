#!/usr/bin/env bash
# Install the Debian 12 packages mixprec needs to build and test (as root,
# or through sudo). Skips apt entirely when everything is already present.
set -euo pipefail
pkgs=(gcc make cmake pkg-config libyaml-dev libjansson-dev libsqlite3-dev libmicrohttpd-dev
      zlib1g-dev libzip-dev python3 python3-numpy libopenmpi-dev openmpi-bin)
# HDF5 user data (D4RL/Minari layouts, src/data/dataset_h5.c) and its tests' writer (h5py)
pkgs+=(libhdf5-dev python3-h5py)
# workload data: Fashion-MNIST IDX files (classifier), the Jargon File (gpt)
pkgs+=(dataset-fashion-mnist jargon-text)
# optional MuJoCo environments (data.env=ant|humanoid): library and sample models
pkgs+=(libmujoco-dev libmujoco-samples)
# observability tests and `mixprec report`: promtool + Prometheus server,
# the sqlite3 CLI, headless Chromium, gnuplot (pngcairo) and its font, curl
pkgs+=(prometheus sqlite3 chromium gnuplot-nox fonts-dejavu-core curl)
# the Python package (python/, docs/python.md): its offline pip-install test
# and the PyTorch oracle of its tests (state_dict into nn.Sequential, predict)
pkgs+=(python3-pip python3-venv python3-torch)
# checkpoint-loader fuzzing (tests/fuzz/run_fuzz.sh): clang + the libFuzzer runtime
pkgs+=(clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
