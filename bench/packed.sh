#!/usr/bin/env bash
# bench/packed.sh - packed batches (pipeline.mode = "packed", docs/packed.md)
# against online direct I/O on out-of-core datasets under a memory cap, with
# fio's sequential bandwidth at the packed run's request size beside it.
# Writes RESULTS/NAME.md (raw files under WORK).
#
#   bench/packed.sh                      # cap 1G, datasets of 2x and 4x the cap (dim 128 f32)
#   SETS="128:f16:2 768:f32:4" bench/packed.sh
#
# Per dataset of SETS (DIM:DTYPE:SCALE, features = SCALE x CAP; gnnprep synth,
# made once under WORK):
#   1. gnnprep pack of EPOCHS epochs in the cap (timed; its disk space);
#   2. the online run: pipeline.io = direct, the default cache policy
#      (auto: lookahead when the features do not fit), page cache dropped,
#      in a cgroup of CAP;
#   3. the packed run of the same config in the same way;
#   4. fio --rw=read --direct=1 on features.bin with the packed run's mean
#      request (a chunk's rows), EXTRACTORS jobs, iodepth 1 (what the
#      extractor threads do: one read each at a time).
# Each dataset's timed steps run under one `flock /tmp/sluice-bench.lock`. Epoch 1 is the
# cold start; epochs 2..EPOCHS are the measured ones.
#
# Environment (defaults): BUILD (build), WORK (bench/work), RESULTS
# (bench/results), NAME (packed-DATE), CAP (1G), FB_FRAC (0.3: feature
# buffer = FB_FRAC x CAP), SETS ("128:f32:2 128:f32:4"), EPOCHS (3),
# TRAIN_BATCHES (32), BATCH (1000), FANOUTS ([10,10]), DEGREE (10),
# EXTRACTORS (2), SAMPLERS (2), PACK_MEM (512M: gnnprep pack --mem-limit),
# FIO_SECS (10), KEEP_PACKS (0: packs are deleted after their runs).
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/packed.sh
source bench/lib.sh

CMDLINE="$0${*:+ $*}"
ENV_SET=""
for v in BUILD WORK RESULTS NAME CAP FB_FRAC SETS EPOCHS TRAIN_BATCHES BATCH FANOUTS DEGREE EXTRACTORS SAMPLERS PACK_MEM \
    FIO_SECS; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
[[ $# -eq 0 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
RESULTS=${RESULTS:-bench/results}
NAME=${NAME:-packed-$(date -u +%Y-%m-%d)}
CAP=${CAP:-1G}
FB_FRAC=${FB_FRAC:-0.3}
SETS=${SETS:-128:f32:2 128:f32:4}
EPOCHS=${EPOCHS:-3}
TRAIN_BATCHES=${TRAIN_BATCHES:-32}
BATCH=${BATCH:-1000}
FANOUTS=${FANOUTS:-[10,10]}
DEGREE=${DEGREE:-10}
EXTRACTORS=${EXTRACTORS:-2}
SAMPLERS=${SAMPLERS:-2}
PACK_MEM=${PACK_MEM:-512M}
FIO_SECS=${FIO_SECS:-10}
KEEP_PACKS=${KEEP_PACKS:-0}
CAP_BYTES=$(lib_bytes "$CAP")
FB_MB=$(python3 -c "print(int($FB_FRAC * ($CAP_BYTES >> 20)))")

lib_need_tools fio jq python3 flock
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-extractor gnn-sampler gnn-trainer gnn-releaser
GL=$BUILD/bin/gnnlaunch
PREP=$BUILD/bin/gnnprep
lib_cg_detect
mkdir -p "$WORK" "$RESULTS"
RUN=$WORK/packed-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RUN"
RUN_IDS=()
cleanup() {
    lib_cg_remove
    lib_shm_sweep "${RUN_IDS[@]}" >/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
LOCK=/tmp/sluice-bench.lock

# From a log's epoch lines: epoch 1's seconds, the mean of epochs 2..E, and MB read and reads per epoch.
epoch_stats() { # LOG
    python3 - "$1" <<'PY'
import re, sys
rows = []
for l in open(sys.argv[1]):
    m = re.match(r"epoch (\d+)/(\d+) .* seconds=([0-9.]+) .*\| read ([0-9.]+) MB in (\d+) reads", l)
    if m:
        rows.append((int(m[1]), float(m[3]), float(m[4]), int(m[5])))
first = [r for r in rows if r[0] == 1]
rest = [r for r in rows if r[0] > 1]
n = max(len(rest), 1)
# bytes and reads: the run's total over its epochs (a short epoch's counters may be attributed to its
# neighbour by the launcher's 1-second samples; the sum is exact)
e = max(len(rows), 1)
print("%.2f %.2f %.1f %.0f" % (first[0][1] if first else float("nan"), sum(r[1] for r in rest) / n,
                                 sum(r[2] for r in rows) / e, sum(r[3] for r in rows) / e))
PY
}

run_capped() { # LOG cmd...
    local log=$1
    shift
    lib_drop_caches
    lib_cg_create "$CAP_BYTES"
    local rc=0 t0=$EPOCHREALTIME
    if [[ -n $CG ]]; then # the command moves itself into the run's cgroup
        sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@" >"$log" 2>&1 </dev/null || rc=$?
    else
        "$@" >"$log" 2>&1 </dev/null || rc=$?
    fi
    python3 -c "print('%.2f' % ($EPOCHREALTIME - $t0))" >"$log.wall"
    lib_cg_summary >"$log.cg.json"
    lib_cg_remove
    local rid
    rid=$(lib_run_id "$log")
    [[ -z $rid ]] || RUN_IDS+=("$rid")
    return "$rc"
}

MD=$RESULTS/$NAME.md
{
    echo "# Packed batches against online direct I/O ($(date -u +%Y-%m-%d))"
    echo
    echo "Command: \`${ENV_SET}$CMDLINE\` at commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')."
    echo "Machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/ {print $2}') GiB RAM,"
    echo "disk $(lib_disk_of "$WORK"); memory cap $CAP per run ($(lib_cg_describe | cut -d: -f1)), page cache dropped before each run."
    echo "Job: GraphSAGE, fanouts $FANOUTS, batch $BATCH, $TRAIN_BATCHES training batches an epoch, $EPOCHS epochs,"
    echo "pipeline.extractors = $EXTRACTORS, samplers = $SAMPLERS, pipeline.ordered = true. Packed: feature buffer $FB_MB MiB"
    echo "(the hot tier is sized by it), no topology in memory. Online: pipeline.io = direct, cache policy auto, the"
    echo "feature buffer and the topology sized to the cap by gnnlaunch (its plan is in the raw log)."
    echo "Epoch 1 is the cold start (the packed run pins its hot tier"
    echo "then); \"epoch s\" is the mean of epochs 2..$EPOCHS. Packing: \`gnnprep pack --epochs $EPOCHS --mem-limit $PACK_MEM\` in the same cap."
    echo
    echo "MB and reads per epoch: the run's total over its $EPOCHS epochs (the extractor's; the packed sampler's batch"
    echo "image reads come on top, one per batch). \"read MiB/s\": the packed extractor's chunk reads, bytes over the"
    echo "time spent in them summed over its threads (the rate of one read stream); fio: one job of sequential direct reads"
    echo "of the mean chunk's size, one at a time, on features.bin (one extractor thread's pattern)."
    echo
    echo "| dataset | features | mode | epoch 1 s | epoch s | MB read / epoch | reads / epoch | read MiB/s | fio seq MiB/s (request) | speedup | pack s | pack disk | test_acc |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$MD.tmp"

for set in $SETS; do
    IFS=: read -r dim dtype scale <<<"$set"
    stride=$(lib_row_stride "$dim" "$dtype")
    nodes=$(python3 -c "print(int($scale * $CAP_BYTES / $stride))")
    ntrain=$((TRAIN_BATCHES * BATCH))
    ds=$(lib_dataset "$WORK" "$PREP" "$nodes" "$dim" "$dtype" "$DEGREE" "$ntrain" "$BATCH" 1)
    label=d$dim-$dtype-x$scale
    cfg=$RUN/$label.toml
    cat >"$cfg" <<EOF
[dataset]
path = "$ds"
[model]
kind = "sage"
fanouts = $FANOUTS
hidden = 128
[train]
epochs = $EPOCHS
batch_size = $BATCH
seed = 1
[pipeline]
extractors = $EXTRACTORS
samplers = $SAMPLERS
feature_buffer_mb = $FB_MB
ordered = true
EOF
    # the online run: gnnlaunch sizes the feature buffer and the topology to the cap itself (an online run
    # needs the graph in memory, or a neighbour cache, beside the buffer; a packed run does not)
    grep -v '^feature_buffer_mb' "$cfg" >"$RUN/$label.online.toml"
    pack=$RUN/$label.pack
    # one dataset's timed steps (pack, both runs, fio) under the lock at once
    lib_log "$label: waiting for $LOCK"
    exec 9>"$LOCK"
    flock 9
    lib_log "$label: packing $EPOCHS epochs into $pack"
    run_capped "$RUN/$label.pack.log" "$PREP" pack "$ds" "$cfg" "$pack" --epochs "$EPOCHS" --mem-limit "$PACK_MEM" ||
        { tail -3 "$RUN/$label.pack.log" >&2; lib_die "gnnprep pack failed"; }
    pack_s=$(lib_kv seconds "$(cat "$RUN/$label.pack.log")")
    pack_disk=$(du -sb "$pack" | cut -f1)
    "$PREP" info "$pack" >"$RUN/$label.pack.info"
    lib_log "$label: online direct"
    run_capped "$RUN/$label.online.log" "$GL" --cpu "$RUN/$label.online.toml" --run-name "packed-$$-${label//./_}-online" \
        --set "train.checkpoint_dir=\"$RUN/ck-$label-online\"" || { tail -3 "$RUN/$label.online.log" >&2; lib_die "online run failed"; }
    lib_log "$label: packed"
    run_capped "$RUN/$label.packed.log" "$GL" --cpu "$cfg" --run-name "packed-$$-${label//./_}-packed" \
        --set pipeline.mode=packed --set "pipeline.pack=\"$pack\"" \
        --set "train.checkpoint_dir=\"$RUN/ck-$label-packed\"" || { tail -3 "$RUN/$label.packed.log" >&2; lib_die "packed run failed"; }
    same=$(python3 - "$RUN/ck-$label-online/latest.safetensors" "$RUN/ck-$label-packed/latest.safetensors" <<'PY'
import struct, sys
def tensors(p):  # the bytes after the safetensors header
    b = open(p, "rb").read()
    return b[8 + struct.unpack("<Q", b[:8])[0]:]
print("yes" if tensors(sys.argv[1]) == tensors(sys.argv[2]) else "no")
PY
)
    rm -rf "$RUN/ck-$label-online" "$RUN/ck-$label-packed"
    read -r o1 os omb ord < <(epoch_stats "$RUN/$label.online.log")
    read -r p1 ps pmb prd < <(epoch_stats "$RUN/$label.packed.log")
    # the extractor's chunk reads: count, MiB, and the rate of one read stream
    note=$(sed -n 's/.*packed: \([0-9]*\) reads, \([0-9.]*\) MiB, .*: \([0-9.]*\) MiB\/s per read stream.*/\1 \2 \3/p' \
        "$RUN/$label.packed.log")
    read -r creads cmib crate <<<"$note"
    req=$(python3 -c "print(max(4096, int($cmib * 1048576 / max($creads, 1)) // 4096 * 4096))")
    # one stream of sequential direct reads of that size, one at a time: what one extractor thread does
    fio_cmd=(fio --name=seq --filename="$ds/features.bin" --rw=read --direct=1 --ioengine=psync --bs="$req"
        --numjobs=1 --time_based --runtime="$FIO_SECS" --output-format=json)
    lib_drop_caches
    "${fio_cmd[@]}" >"$RUN/$label.fio.json"
    flock -u 9
    exec 9>&-
    fio_mbs=$(jq '.jobs[0].read.bw_bytes / 1048576' "$RUN/$label.fio.json")
    acc_o=$(sed -n 's/^test_acc=\([0-9.]*\).*/\1/p' "$RUN/$label.online.log")
    acc_p=$(sed -n 's/^test_acc=\([0-9.]*\).*/\1/p' "$RUN/$label.packed.log")
    feat=$(numfmt --to=iec "$(stat -c %s "$ds/features.bin")")
    python3 - "$label" "$feat" "$o1" "$os" "$omb" "$ord" "$p1" "$ps" "$pmb" "$prd" "$fio_mbs" "$pack_s" "$pack_disk" \
        "$acc_o" "$acc_p" "$req" "$crate" >>"$MD.tmp" <<'PY'
import sys
(label, feat, o1, os_, omb, ord_, p1, ps, pmb, prd, fio, pack_s, disk, acc_o, acc_p, req, crate) = sys.argv[1:]
o1, os_, omb, ord_, p1, ps, pmb, prd, fio, crate = map(float, (o1, os_, omb, ord_, p1, ps, pmb, prd, fio, crate))
gib = int(disk) / 2**30
print(f"| {label} | {feat} | online direct | {o1:.2f} | {os_:.2f} | {omb:.0f} | {ord_:.0f} | | | | | | {acc_o} |")
print(f"| {label} | {feat} | packed | {p1:.2f} | {ps:.2f} | {pmb:.0f} | {prd:.0f} | {crate:.0f} | {fio:.0f} ({int(req) >> 10} KiB) "
      f"| {os_ / ps:.1f}x | {float(pack_s):.1f} ({float(pack_s) / os_:.1f} epochs) | {gib:.2f} GiB | {acc_p} |")
PY
    echo "$label same_tensors=$same" >>"$RUN/identity.txt"
    lib_log "$label: online ${os}s, packed ${ps}s an epoch; tensors identical: $same"
    [[ $KEEP_PACKS == 1 ]] || rm -rf "$pack"
done
{
    echo
    echo "Checkpoint tensors of the online and packed runs identical, byte for byte (pipeline.ordered = true):"
    sed 's/^/- /' "$RUN/identity.txt"
    echo
    echo "Raw logs, configs, \`gnnprep info\` of each pack and fio's JSON: $RUN (not in git)."
} >>"$MD.tmp"
mv "$MD.tmp" "$MD"
lib_log "wrote $MD"
