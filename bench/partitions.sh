#!/usr/bin/env bash
# bench/partitions.sh - the partition buffer's I/O (issue 22) on the
# out-of-core datasets of bench/outofcore.sh (features 2x and 4x a memory
# cap): for each dataset, `gnnprep partition` under the cap, fio's
# sequential direct read rate on the layout's features.bin, then
# `partbuf-bench` under the cap for each (p, c) of SETTINGS and each
# ordering x coverage: partitions read per epoch against the plan and the
# lower bounds, bytes, average request, epoch time and read rate beside
# fio's. It measures the I/O of the mode alone; training in the mode is
# not wired into gnnlaunch yet (docs/partitions.md).
#
#   bench/partitions.sh                  # cap 1G, SCALES "2 4", SETTINGS "32:4 64:8"
#   CAP=512M SCALES=2 SETTINGS=16:4 EPOCHS=2 bench/partitions.sh   # quick
#
# Environment (defaults): BUILD (build), WORK (bench/work), CAP (1G),
# SCALES ("2 4"), SETTINGS ("32:4 64:8", p:c), EPOCHS (3), DIM (128),
# DTYPE (f32), DEGREE (10), NTRAIN (32000), READ_BYTES (4M), DEPTH (4),
# TRAIN_MS (0: no compute between states), FIO_SECS (10), CAP_METHOD (auto).
# Prints key=value lines and a markdown table on stdout. Reports; asserts
# nothing. Wrap it in `flock /tmp/sluice-bench.lock` beside other benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/partitions.sh
source bench/lib.sh

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
CAP=${CAP:-1G}
SCALES=${SCALES:-"2 4"}
SETTINGS=${SETTINGS:-"32:4 64:8"}
EPOCHS=${EPOCHS:-3}
DIM=${DIM:-128}
DTYPE=${DTYPE:-f32}
DEGREE=${DEGREE:-10}
NTRAIN=${NTRAIN:-32000}
READ_BYTES=${READ_BYTES:-4M}
DEPTH=${DEPTH:-4}
TRAIN_MS=${TRAIN_MS:-0}
FIO_SECS=${FIO_SECS:-10}

lib_need_tools fio jq python3
lib_need_bins "$BUILD" gnnprep partbuf-bench
PREP=$BUILD/bin/gnnprep
PB=$BUILD/bin/partbuf-bench
cap=$(lib_bytes "$CAP")
stride=$(lib_row_stride "$DIM" "$DTYPE")
lib_cg_detect
trap lib_cg_remove EXIT
mkdir -p "$WORK"

echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo '+dirty')"
echo "# host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM"
echo "# cap: $CAP ($(lib_cg_describe))"
rows=()
for scale in $SCALES; do
    nodes=$((scale * cap / stride))
    ds=$(lib_dataset "$WORK" "$PREP" "$nodes" "$DIM" "$DTYPE" "$DEGREE" "$NTRAIN" 1000 1)
    for setting in $SETTINGS; do
        p=${setting%%:*}
        c=${setting##*:}
        if [[ ! -f $ds/parts.$p/partition.toml ]]; then
            rm -rf "$ds/parts.$p"
            lib_cg_create "$cap"
            t0=$(date +%s.%N)
            lib_cg_exec "$PREP" partition "$ds" --parts "$p" --mem-limit "$((cap / 2))" --quiet
            echo "partition dataset=$(basename "$ds") parts=$p seconds=$(echo "$(date +%s.%N) - $t0" | bc) $(lib_cg_summary | jq -c .)"
            lib_cg_remove
        fi
        feat=$ds/parts.$p/features.bin
        lib_drop_caches "$feat"
        fio_bw=$(fio --name=seq --filename="$feat" --readonly --ioengine=io_uring --direct=1 --rw=read --bs="$READ_BYTES" \
            --iodepth="$DEPTH" --time_based --runtime="$FIO_SECS" --output-format=json 2>/dev/null | jq '.jobs[0].read.bw_bytes')
        fio_mbps=$(awk -v b="$fio_bw" 'BEGIN { printf "%.1f", b / 1e6 }')
        echo "fio dataset=$(basename "$ds") parts=$p bs=$READ_BYTES iodepth=$DEPTH MBps=$fio_mbps"
        for order in comet beta; do
            for cover in nodes pairs; do
                lib_drop_caches "$feat"
                lib_cg_create "$cap"
                rc=0
                out=$(lib_cg_exec "$PB" "$ds" --parts "$p" --slots "$c" --order "$order" --cover "$cover" \
                    --epochs "$EPOCHS" --read-bytes "$READ_BYTES" --depth "$DEPTH" --train-ms "$TRAIN_MS") || rc=$?
                mem=$(lib_cg_summary | jq -c .)
                lib_cg_remove
                if ((rc != 0)); then
                    echo "run dataset=$(basename "$ds") p=$p c=$c order=$order cover=$cover: failed with status $rc $mem"
                    rows+=("| ${scale}x | $p | $c | $order | $cover | failed (status $rc; $mem) |")
                    continue
                fi
                echo "$out" | sed "s/^/run dataset=$(basename "$ds") p=$p c=$c order=$order cover=$cover: /"
                echo "mem dataset=$(basename "$ds") p=$p c=$c order=$order cover=$cover $mem"
                # the measured epochs: all but the first (its first fill is a cold start)
                row=$(python3 - "$out" "$fio_mbps" "$scale" "$p" "$c" "$order" "$cover" <<'PY'
import sys, re
out, fio, scale, p, c, order, cover = sys.argv[1:8]
kv = lambda line: dict(re.findall(r'(\w+)=([^ ]+)', line))
lines = out.splitlines()
plan = kv(lines[1]); head = kv(lines[0])
ep = [kv(l) for l in lines if l.startswith('epoch=')]
meas = ep[1:] or ep
n = len(meas)
secs = sum(float(e['seconds']) for e in meas) / n
parts = sum(int(e['partitions_read']) for e in meas) / n
swaps = sum(int(e['swaps']) for e in meas) / n
byts = sum(int(e['bytes_read']) for e in meas) / n
reads = sum(int(e['reads']) for e in meas) / n
rate = byts / secs / 1e6 if secs > 0 else 0
lb = plan['lower_bound_pairs'] if cover == 'pairs' else plan['lower_bound_nodes']
print(f"| {scale}x | {p} | {c} | {order} | {cover} | {plan['states']} | {swaps:.0f} | {plan['swaps_expected']} | {lb} | "
      f"{parts:.0f} | {byts/2**30:.2f} | {byts/reads/2**20 if reads else 0:.2f} | {secs:.2f} | {rate:.0f} | {fio} | "
      f"{rate/float(fio)*100 if float(fio) else 0:.0f}% |")
PY
                )
                rows+=("$row")
            done
        done
    done
done
echo
echo "| features | p | c | order | cover | states | swaps/epoch | expected | lower bound | partitions read/epoch | GiB read/epoch | avg request MiB | epoch s | read MB/s | fio seq MB/s | of fio |"
echo "|--|--:|--:|--|--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
printf '%s\n' "${rows[@]}"
