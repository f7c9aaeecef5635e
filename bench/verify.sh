#!/usr/bin/env bash
# bench/verify.sh - what the launch verification of a dataset costs
# (docs/format.md, "Verification"; issue 17), as key=value lines.
#
#   bench/verify.sh DATASET [--reps N] [--bin DIR] [--base-bin DIR]
#
# For N repetitions, interleaved so that the machine's load falls on all
# of them alike:
#   dd_features_s   dd if=features.bin of=/dev/null bs=4M iflag=direct
#   dd_all_s        the same over every .bin of the dataset, one after another
#   check_s         gnnprep check DATASET (a full verification: every byte
#                   read, hashed and checked; it also records the result)
#   check_features_s  its features.bin part (gnnprep check's own line)
# then the launch's checks, which end before any process starts because
# SLUICE_STAGE_DIR names a directory without stage programs (gnnlaunch
# exits 2 after its last check):
#   launch_checks_s      this build, the dataset verified and recorded
#   launch_checks_base_s --base-bin's gnnlaunch (an older build), when given
# Reads use O_DIRECT, so the page cache does not serve them; nothing is
# dropped or written besides DATASET/verified.
set -euo pipefail

ds=${1:?usage: bench/verify.sh DATASET [--reps N] [--bin DIR] [--base-bin DIR]}
shift
reps=5
bin=$(dirname "$0")/../build/bin
base=""
while (($#)); do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --base-bin) base=$2; shift 2 ;;
    *) echo "bench/verify.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ -f $ds/dataset.toml ]] || { echo "bench/verify.sh: $ds has no dataset.toml" >&2; exit 2; }

now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

cfg=$(mktemp /tmp/verify-bench.XXXXXX.toml)
nostages=$(mktemp -d /tmp/verify-bench.XXXXXX)
trap 'rm -rf "$cfg" "$nostages"' EXIT
printf '[dataset]\npath = "%s"\n[model]\nfanouts = [5, 5]\n[train]\nbatch_size = 256\ncheckpoint_dir = "%s/ck"\n' "$ds" "$nostages" >"$cfg"

echo "dataset=$ds bytes=$(du -cb "$ds"/*.bin | tail -1 | cut -f1) features_bytes=$(stat -c %s "$ds/features.bin")"
echo "machine: nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= reps; i++)); do
    t=$(now); dd if="$ds/features.bin" of=/dev/null bs=4M iflag=direct status=none; echo "rep=$i dd_features_s=$(since "$t")"
    t=$(now); for f in "$ds"/*.bin; do dd if="$f" of=/dev/null bs=4M iflag=direct status=none; done
    echo "rep=$i dd_all_s=$(since "$t")"
    t=$(now); out=$("$bin/gnnprep" check "$ds"); echo "rep=$i check_s=$(since "$t")"
    echo "rep=$i check_features_s=$(awk '$1 == "features.bin" { print $5 }' <<<"$out")"
done
for ((i = 1; i <= reps; i++)); do
    for b in "$bin" ${base:+"$base"}; do
        t=$(now)
        SLUICE_STAGE_DIR=$nostages "$b/gnnlaunch" --cpu "$cfg" >/dev/null 2>&1 || true
        key=launch_checks_s
        [[ $b == "$base" ]] && key=launch_checks_base_s
        echo "rep=$i $key=$(since "$t")"
    done
done
echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)"
