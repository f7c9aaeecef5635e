#!/usr/bin/env bash
# bench/extractor-fio.sh - the extractor's random-row IOPS against fio's on
# the same file, block size and queue depth, measured in the same run
# (issue 4: `gnn-extractor --bench`, cold buffer, O_DIRECT, must reach at
# least 85% of `fio --ioengine=io_uring --direct=1 --rw=randread`).
#
#   bench/extractor-fio.sh                        # 2M x 128 f32 (1 GB of rows), 4 shapes, 3 rounds
#   CONFIGS="1:64" ROUNDS=1 SECS=5 bench/extractor-fio.sh   # one quick comparison
#
# For each T:Q in CONFIGS and each of ROUNDS rounds it runs, back to back:
#   fio --name=randread --filename=DS/features.bin --readonly --ioengine=io_uring --direct=1
#       --rw=randread --bs=BS --iodepth=Q --numjobs=T --time_based --runtime=SECS
#       --norandommap --randrepeat=0 --group_reporting --output-format=json
#   gnn-extractor --bench DS --io direct --io-depth Q --threads T --seconds SECS
#       --batch-nodes BATCH --seed ROUND
# where BS is the bytes the extractor reads per row (read_bytes_max, which is
# the row stride for rows of 512 B and more on a 512-B-aligned device), then
# prints both IOPS and their ratio per run, and the medians per shape as a
# markdown table. The extractor's iops= counts read requests (rows found in
# its buffer cost none; its buffer is cold: N/16 rows of N).
#
# Environment (defaults): BUILD (build) - tree holding bin/gnnprep and
# bin/gnn-extractor; WORK (bench/work, git-ignored) - where the dataset is
# made once and then reused; NODES (2M) DIM (128) DTYPE (f32) - its shape;
# CONFIGS ("1:1 1:32 1:64 2:64") - threads:depth pairs; SECS (10) - seconds
# per measurement; ROUNDS (3); BATCH (16384) - nodes per extractor batch.
# The benchmark reports; it asserts nothing (STYLE.md).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
NODES=${NODES:-2M}
DIM=${DIM:-128}
DTYPE=${DTYPE:-f32}
CONFIGS=${CONFIGS:-"1:1 1:32 1:64 2:64"}
SECS=${SECS:-10}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-16384}

PREP="$BUILD/bin/gnnprep"
XBIN="$BUILD/bin/gnn-extractor"
for b in "$PREP" "$XBIN"; do
    [ -x "$b" ] || { echo "bench/extractor-fio.sh: $b not found; build first (or set BUILD=)" >&2; exit 2; }
done
for t in fio jq; do
    command -v "$t" >/dev/null || { echo "bench/extractor-fio.sh: $t is missing; apt-get install $t" >&2; exit 2; }
done

mkdir -p "$WORK"
DS="$WORK/extractor-$NODES-$DIM-$DTYPE"
if [ ! -f "$DS/dataset.toml" ]; then
    echo "# making $DS"
    "$PREP" synth "$DS" --nodes "$NODES" --avg-degree 2 --feat-dim "$DIM" --classes 16 --dtype "$DTYPE" --seed 1 >/dev/null
fi
FEAT="$DS/features.bin"

# the extractor's read size per row, from a 0.1 s run (it also warms nothing:
# O_DIRECT bypasses the page cache)
probe=$("$XBIN" --bench "$DS" --io direct --seconds 0.1 2>/dev/null)
BS=$(sed -n 's/^read_bytes_max=//p' <<<"$probe")
ALIGN=$(sed -n 's/^align=//p' <<<"$probe")
STRIDE=$(sed -n 's/^row_stride=//p' <<<"$probe")
[ -n "$BS" ] || { echo "bench/extractor-fio.sh: no read_bytes_max from $XBIN --bench" >&2; exit 1; }

echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM"
src=$(df --output=source "$FEAT" | tail -1)
fs=$(df --output=fstype "$FEAT" | tail -1)
dev=$(basename "$(readlink -f "$src")")
echo "# file: $FEAT on $src ($fs), $(stat -c %s "$FEAT") bytes"
if [ -r "/sys/block/$dev/queue/logical_block_size" ]; then
    echo "# device: $dev logical block $(cat /sys/block/$dev/queue/logical_block_size) B, physical $(cat /sys/block/$dev/queue/physical_block_size) B, rotational $(cat /sys/block/$dev/queue/rotational), scheduler $(cat /sys/block/$dev/queue/scheduler)"
fi
echo "# rows: stride $STRIDE B, direct I/O alignment $ALIGN B, $BS B read per row; fio --bs=$BS"
echo "# fio: $(fio --version)"

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

declare -A FIO XT
for cfg in $CONFIGS; do
    T=${cfg%%:*}
    Q=${cfg##*:}
    for ((r = 1; r <= ROUNDS; r++)); do
        fio_iops=$(fio --name=randread --filename="$FEAT" --readonly --ioengine=io_uring --direct=1 --rw=randread \
            --bs="$BS" --iodepth="$Q" --numjobs="$T" --time_based --runtime="$SECS" --norandommap --randrepeat=0 \
            --group_reporting --output-format=json 2>/dev/null | jq '.jobs[0].read.iops')
        out=$("$XBIN" --bench "$DS" --io direct --io-depth "$Q" --threads "$T" --seconds "$SECS" \
            --batch-nodes "$BATCH" --seed "$r" 2>/dev/null)
        x_iops=$(sed -n 's/^iops=//p' <<<"$out")
        hit=$(sed -n 's/^hit_rate=//p' <<<"$out")
        rows=$(sed -n 's/^rows_per_s=//p' <<<"$out")
        ratio=$(awk -v a="$x_iops" -v b="$fio_iops" 'BEGIN { printf "%.3f", a / b }')
        printf 'T=%s Q=%s round=%d fio_iops=%.0f extractor_iops=%s rows_per_s=%s hit_rate=%s ratio=%s\n' \
            "$T" "$Q" "$r" "$fio_iops" "$x_iops" "$rows" "$hit" "$ratio"
        FIO[$cfg]+="$fio_iops "
        XT[$cfg]+="$x_iops "
    done
done

echo
echo "| threads | depth | fio IOPS (median) | extractor IOPS (median) | ratio |"
echo "|--:|--:|--:|--:|--:|"
for cfg in $CONFIGS; do
    f=$(tr ' ' '\n' <<<"${FIO[$cfg]}" | grep . | median)
    x=$(tr ' ' '\n' <<<"${XT[$cfg]}" | grep . | median)
    printf '| %s | %s | %.0f | %.0f | %.3f |\n' "${cfg%%:*}" "${cfg##*:}" "$f" "$x" "$(awk -v a="$x" -v b="$f" 'BEGIN { print a / b }')"
done
