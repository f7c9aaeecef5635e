#!/usr/bin/env bash
# Installs every Debian package Sluice needs to build, test and benchmark.
# Safe to run again: it installs only what is missing. Needs root or sudo.
#
#   scripts/install-deps.sh          # build + test dependencies
#   scripts/install-deps.sh --bench  # also the benchmark tools (fio, gnuplot, GNU time)
set -euo pipefail

pkgs=(
    build-essential cmake ninja-build pkg-config
    liburing-dev      # io_uring: asynchronous direct I/O in the extractor
    libzmq3-dev       # launcher metrics and control channel
    libcmocka-dev     # unit tests
    libopenblas-dev   # CPU GEMM for the trainer
    libarchive-dev    # reading .npz (zip) archives of OGB datasets
    zlib1g-dev        # .csv.gz split files of OGB datasets
    libxxhash-dev     # XXH3 checksums of dataset files
    libjansson-dev    # JSON headers of safetensors checkpoints
    clang libclang-rt-14-dev   # libFuzzer targets (tests/fuzz) and their smoke test
)
if [[ "${1:-}" == "--bench" ]]; then
    pkgs+=(fio gnuplot-nox time)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
