#!/usr/bin/env bash
# Installs every Debian package Sluice needs to build, test and benchmark.
# Safe to run again: it installs only what is missing. Needs root or sudo.
#
#   scripts/install-deps.sh            # build + test dependencies
#   scripts/install-deps.sh --bench    # also the benchmark tools (fio, gnuplot, GNU time, jq, python3, perf)
#   scripts/install-deps.sh --release  # also what scripts/release-check.sh needs (valgrind)
# The options combine: scripts/install-deps.sh --bench --release
set -euo pipefail

pkgs=(
    build-essential cmake ninja-build pkg-config
    liburing-dev      # io_uring: asynchronous direct I/O in the extractor
    libzmq3-dev       # launcher metrics and control channel
    libcmocka-dev     # unit tests
    libprotobuf-c-dev protobuf-c-compiler   # TensorBoard event records (gnnlaunch --tensorboard)
    libisal-dev       # CRC-32C of TensorBoard's record framing
    libopenblas-dev   # CPU GEMM for the trainer
    libarchive-dev    # reading .npz (zip) archives of OGB datasets
    zlib1g-dev        # .csv.gz split files of OGB datasets
    libxxhash-dev     # XXH3 checksums of dataset files
    libjansson-dev    # JSON headers of safetensors checkpoints
    clang libclang-rt-14-dev   # libFuzzer targets (tests/fuzz) and their smoke test
)
for opt in "$@"; do
    case "$opt" in
        --bench) pkgs+=(fio gnuplot-nox time jq python3 linux-perf) ;; # bench/*.sh, docs/benchmarks.md
        --release) pkgs+=(valgrind) ;; # memcheck of the demo; clang (above) builds the fuzz targets
        *) echo "install-deps: unknown option '$opt' (--bench, --release)" >&2; exit 2 ;;
    esac
done

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
