#!/usr/bin/env bash
# bench/outofcore.sh - out-of-core training under a memory cap: Sluice's
# direct I/O (io_uring + O_DIRECT into the feature buffer) against its mmap
# mode (rows through the page cache, as PyG+ reads them in the GNNDrive and
# Ginex papers), side by side on the same datasets, with fio on the same
# file as the device's reference. One command; it writes
# RESULTS/NAME.md, RESULTS/NAME.json and RESULTS/NAME-{epoch,stages,memory}.png.
#
#   bench/outofcore.sh                 # the default set, cap 1 GiB (~15 min on a 2-core VM)
#   bench/outofcore.sh --quick         # smoke run: cap 512 MiB, two datasets (~3 min)
#   bench/outofcore.sh --cap 2G        # another cap; datasets scale with it
#   systemd-run --user --scope -p MemoryMax=1G -p MemorySwapMax=0 \
#       bench/outofcore.sh --cap-external --cap 1G      # without root (docs/benchmarks.md)
#
# What it does, per dataset of SETS (synthetic, `gnnprep synth`, made once
# under WORK and reused; features = scale x CAP):
#   1. fio --ioengine=io_uring --direct=1 --rw=randread on features.bin with
#      the extractor's read size per row, iodepth = pipeline.io_depth,
#      numjobs = pipeline.extractors (the device's random-read IOPS), and
#      fio --ioengine=mmap with the row size, one read at a time per job,
#      under the cap (what mmap mode can expect); gnn-extractor --bench
#      (the extraction engine alone, cold buffer);
#   2. for each mode of MODES: drop the page cache, make a cgroup with the
#      cap, run `gnnlaunch --cpu` in it with --metrics, sample the cgroup's
#      memory and the disk's counters once a second, and profile the stage
#      processes with perf during the last epoch (outside the measured ones);
#      remove the cgroup.
# Then bench/report.py turns the metrics files into the result files and
# checks the targets of issue 8 at 4x the cap: direct >= 3x faster per epoch
# than mmap; the extractor >= 85% of fio's IOPS; overlap efficiency <= 1.2.
#
# Environment (defaults; --quick changes the starred ones):
#   BUILD (build)            tree with bin/gnnlaunch, gnnprep, gnn-extractor
#   WORK (bench/work)        datasets and raw run files (git-ignored)
#   RESULTS (bench/results)  where the result files go; NAME (outofcore-DATE[-quick])
#   CAP* (1G; quick 512M)    the memory cap of every run (--cap)
#   FB_FRAC* (0.4; quick 0.3)  feature buffer of direct runs = FB_FRAC x CAP:
#                            what the cap has left after the densest dataset's
#                            topology (0.375 x CAP at 4x), node map, arenas and
#                            the processes' own memory
#   MMAP_FB (min)            mmap runs' feature buffer: min = the least gnnlaunch
#                            accepts (the rest of the cap is page cache, as PyG+);
#                            same = the direct runs' size
#   SETS* ("128:f32:fit 128:f32:2 128:f32:4 768:f32:4 128:f16:2"; quick
#                            "128:f32:fit 128:f32:4")  DIM:DTYPE:SCALE, features =
#                            SCALE x CAP bytes; fit = FB_FRAC x CAP (the whole
#                            file fits in the feature buffer and in the page cache)
#   MODES ("direct mmap")    pipeline.io values to run
#   EPOCHS* (4)              epoch 1 is the cold start, the last one also
#                            evaluates and is profiled; 2..E-1 are measured
#   FIT_EPOCHS* (10; quick 8)  the same for the "fit" datasets, whose epochs
#                            are short (all rows in memory): more of them, so
#                            that the measured ones span several of the
#                            launcher's 1-second samples of the stage counters
#   TRAIN_BATCHES* (32; quick 16)  training batches per epoch (train split size)
#   EVAL_BATCHES (1)         validation and test batches
#   BATCH (1000) FANOUTS ([10,10]) MODEL (sage)  the job; the batch is halved
#                            for a dataset until extraction's deadlock reserve
#                            fits in the feature buffer (768-dim rows)
#   DEGREE (10) SEED (1)     gnnprep synth's --avg-degree and --seed
#   SAMPLERS (2) EXTRACTORS (2) IO_DEPTH (64)  pipeline settings
#   FIO_SECS* (10; quick 3)  seconds per fio / extractor-bench measurement
#   PERF (auto)              1/0: profile with perf (auto: when perf works)
#   PROF_SECS* (5; quick 2)  seconds of perf in the last epoch
#   LAUNCH (--cpu)           gnnlaunch's device flag: "--gpus 1" puts the
#                            feature buffer on a GPU (bench/gpu.sh PARTS=ooc)
#   CAP_METHOD (auto)        auto: a cgroup per run (root); external: the
#                            caller capped the script (--cap-external)
# Exit: 0 done (targets missed are reported, not failures), 2 bad usage or
# missing tools, 1 a run failed. The benchmark reports; it asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/outofcore.sh
source bench/lib.sh

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

CMDLINE="$0${*:+ $*}"
ENV_SET=""
for v in BUILD WORK RESULTS NAME CAP FB_FRAC MMAP_FB SETS MODES EPOCHS FIT_EPOCHS TRAIN_BATCHES EVAL_BATCHES BATCH FANOUTS \
    MODEL DEGREE SEED SAMPLERS EXTRACTORS IO_DEPTH FIO_SECS PERF PROF_SECS CAP_METHOD; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
QUICK=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --quick) QUICK=1 ;;
    --cap) CAP=${2:?--cap needs a size}; shift ;;
    --cap=*) CAP=${1#--cap=} ;;
    --cap-external) CAP_METHOD=external ;;
    -h | --help) usage 0 ;;
    *) echo "$LIB_PROG: unknown argument '$1'" >&2; usage 2 ;;
    esac
    shift
done

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
RESULTS=${RESULTS:-bench/results}
MMAP_FB=${MMAP_FB:-min}
MODES=${MODES:-direct mmap}
EVAL_BATCHES=${EVAL_BATCHES:-1}
BATCH=${BATCH:-1000}
FANOUTS=${FANOUTS:-[10,10]}
MODEL=${MODEL:-sage}
DEGREE=${DEGREE:-10}
SEED=${SEED:-1}
SAMPLERS=${SAMPLERS:-2}
EXTRACTORS=${EXTRACTORS:-2}
IO_DEPTH=${IO_DEPTH:-64}
PERF=${PERF:-auto}
if [[ $QUICK == 1 ]]; then
    CAP=${CAP:-512M}
    SETS=${SETS:-128:f32:fit 128:f32:4}
    EPOCHS=${EPOCHS:-4}
    FIT_EPOCHS=${FIT_EPOCHS:-8}
    FB_FRAC=${FB_FRAC:-0.3}
    TRAIN_BATCHES=${TRAIN_BATCHES:-16}
    FIO_SECS=${FIO_SECS:-3}
    PROF_SECS=${PROF_SECS:-2}
    NAME=${NAME:-outofcore-$(date -u +%Y-%m-%d)-quick}
else
    CAP=${CAP:-1G}
    SETS=${SETS:-128:f32:fit 128:f32:2 128:f32:4 768:f32:4 128:f16:2}
    EPOCHS=${EPOCHS:-4}
    FIT_EPOCHS=${FIT_EPOCHS:-10}
    FB_FRAC=${FB_FRAC:-0.4}
    TRAIN_BATCHES=${TRAIN_BATCHES:-32}
    FIO_SECS=${FIO_SECS:-10}
    PROF_SECS=${PROF_SECS:-5}
    NAME=${NAME:-outofcore-$(date -u +%Y-%m-%d)}
fi
[[ $MMAP_FB == min || $MMAP_FB == same ]] || lib_die "MMAP_FB=$MMAP_FB: use min or same"
((EPOCHS >= 2 && FIT_EPOCHS >= 2)) || lib_die "EPOCHS=$EPOCHS, FIT_EPOCHS=$FIT_EPOCHS: at least 2 (epoch 1 is the cold start)"
CAP_BYTES=$(lib_bytes "$CAP")
CAP_MB=$((CAP_BYTES >> 20))
FB_MB=$(python3 -c "print(int($FB_FRAC * $CAP_MB))")

lib_need_tools fio jq python3 gnuplot numfmt lsblk
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-extractor gnn-sampler gnn-trainer gnn-releaser
GL=$BUILD/bin/gnnlaunch
PREP=$BUILD/bin/gnnprep
XB=$BUILD/bin/gnn-extractor
if [[ $PERF == auto ]]; then
    PERF=0
    perf stat -e task-clock -- true >/dev/null 2>&1 && PERF=1
fi
lib_cg_detect

mkdir -p "$WORK" "$RESULTS"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RUN=$WORK/outofcore-$STAMP
mkdir -p "$RUN"
DISK=$(lib_disk_of "$WORK")

# Everything a run leaves behind goes on every way out.
BG_PIDS=()
RUN_IDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    lib_cg_remove
    lib_shm_sweep "${RUN_IDS[@]}" >/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

lib_log "out-of-core benchmark: cap $CAP ($CAP_BYTES bytes), $(lib_cg_describe)"
lib_log "raw files in $RUN; results will be $RESULTS/$NAME.{md,json}"
lib_machine_json "$BUILD" "$WORK" >"$RUN/machine.json"

# Worst-case nodes of one batch (docs/architecture.md, "Slot size"), for
# choosing the batch so that the extraction reserve fits the buffer.
batch_nodes() { # N B fanouts-csv
    python3 -c "
n, b = $1, $2
k = min(b, n)
for f in [$3]:
    k = min(k + k * f, n)
print(k)"
}

# fio JSON -> IOPS
fio_iops() { jq '.jobs[0].read.iops' "$1"; }

# Waits for epoch K's object in a metrics file, then profiles the stage
# processes for PROF_SECS: perf record (flat, 499 Hz) over all of them, and
# perf stat per process. Gives up when the launcher LPID is gone.
profile_last_epoch() { # METRICS K OUTPREFIX LPID
    local m=$1 k=$2 out=$3 lpid=$4 pids stage pid
    while ! grep -q "\"type\":\"epoch\".*\"epoch\":$k," "$m" 2>/dev/null; do
        kill -0 "$lpid" 2>/dev/null || return 0
        sleep 0.2
    done
    # the newest process objects: stage and pid of each process
    pids=$(tail -n 40 "$m" | jq -r 'select(.type == "process" and .pid > 0 and .state == "running") | "\(.stage) \(.pid)"' |
        sort -u -k2,2n)
    [[ -n $pids ]] || return 0
    echo "$pids" >"$out.pids"
    local all
    all=$(awk '{ print $2 }' <<<"$pids" | paste -sd, -)
    perf record -F 499 -o "$out.perf.data" -p "$all" -- sleep "$PROF_SECS" >"$out.perf.err" 2>&1 &
    while read -r stage pid; do
        perf stat -x, -o "$out.stat.$stage.$pid" \
            -e task-clock,context-switches,cpu-migrations,page-faults,major-faults \
            -p "$pid" -- sleep "$PROF_SECS" >/dev/null 2>&1 &
    done <<<"$pids"
    wait
    if [[ -s $out.perf.data ]]; then
        perf report -i "$out.perf.data" --stdio --no-children --sort comm,dso,sym --percent-limit 1 2>/dev/null |
            grep -v '^#' | grep -v '^$' | head -40 >"$out.perf.txt" || true
        rm -f "$out.perf.data" "$out.perf.data.old"
    fi
}

# One training run under the cap. Writes RUN/ID.{cmd,log,jsonl,samples,cg.json}
# and, with PERF=1, RUN/ID.prof.*. Returns gnnlaunch's exit status.
run_one() { # ID CFG MODE FB_MB DS EPOCHS set-args...
    local id=$1 cfg=$2 mode=$3 fb=$4 ds=$5 epochs=$6
    shift 6
    local cmd=("$GL" ${LAUNCH:---cpu} "$cfg" --epochs "$epochs" --run-name "ooc-$$-$id" --metrics "$RUN/$id.jsonl"
        "$@" --set "pipeline.io=$mode" --set "pipeline.feature_buffer_mb=$fb"
        --set "train.checkpoint_dir=\"$RUN/ck-$id\"")
    printf '%q ' "${cmd[@]}" >"$RUN/$id.cmd"
    echo >>"$RUN/$id.cmd"
    lib_drop_caches "$ds"/*.bin
    lib_cg_create "$CAP_BYTES"
    cut -d' ' -f1-3 /proc/loadavg >"$RUN/$id.load"
    local t0=$EPOCHREALTIME
    lib_sampler "$RUN/$id.samples" "$t0" "$DISK" &
    local sp=$!
    BG_PIDS+=("$sp")
    SLUICE_PROGRESS_EVERY=30 lib_cg_exec "${cmd[@]}" >"$RUN/$id.log" 2>&1 </dev/null &
    local gp=$! pp="" rc=0
    BG_PIDS+=("$gp")
    if [[ $PERF == 1 ]]; then
        profile_last_epoch "$RUN/$id.jsonl" $((epochs - 1)) "$RUN/$id.prof" "$gp" &
        pp=$!
        BG_PIDS+=("$pp")
    fi
    wait "$gp" || rc=$?
    [[ -n $pp ]] && { wait "$pp" 2>/dev/null || true; }
    kill "$sp" 2>/dev/null || true
    wait "$sp" 2>/dev/null || true
    BG_PIDS=() # all reaped: no stale pid is ever signalled
    cut -d' ' -f1-3 /proc/loadavg >>"$RUN/$id.load"
    lib_cg_summary >"$RUN/$id.cg.json"
    lib_cg_remove
    local rid
    rid=$(lib_run_id "$RUN/$id.log")
    if [[ -n $rid ]]; then
        RUN_IDS+=("$rid")
        local left
        left=$(lib_shm_sweep "$rid")
        [[ -z $left ]] || echo "$LIB_PROG: removed segments the run left: $left" >&2
    fi
    rm -rf "$RUN/ck-$id"
    grep -E '^(epoch [0-9]+/[0-9]+ |test_acc=)' "$RUN/$id.log" >&2 || true
    if [[ $rc -ne 0 ]]; then
        echo "$LIB_PROG: run $id exited with status $rc; the last lines of $RUN/$id.log:" >&2
        tail -5 "$RUN/$id.log" >&2
    fi
    return "$rc"
}

FAILED=0
: >"$RUN/manifest.jsonl"
for set in $SETS; do
    IFS=: read -r dim dtype scale <<<"$set"
    [[ -n $dim && -n $dtype && -n $scale ]] || lib_die "SETS entry '$set': use DIM:DTYPE:SCALE (e.g. 128:f32:4)"
    stride=$(lib_row_stride "$dim" "$dtype")
    if [[ $scale == fit ]]; then
        feat_target=$((FB_MB << 20))
    else
        feat_target=$(python3 -c "print(int($scale * $CAP_BYTES))")
    fi
    nodes=$((feat_target / stride))
    esize=4
    [[ $dtype == f16 ]] && esize=2
    fbrow=$(((dim * esize + 63) / 64 * 64))
    batch=$BATCH
    fan=${FANOUTS#[}
    fan=${fan%]}
    while :; do
        worst=$(batch_nodes "$nodes" "$batch" "$fan")
        reserve_rows=$((EXTRACTORS * worst < nodes ? EXTRACTORS * worst : nodes))
        ((reserve_rows * fbrow <= (FB_MB << 20) || batch <= 1)) && break
        batch=$((batch / 2))
    done
    ((reserve_rows * fbrow <= FB_MB << 20)) ||
        lib_die "$set: the feature buffer ($FB_MB MiB = FB_FRAC x CAP) cannot hold the extraction reserve even for batch $batch; raise CAP or FB_FRAC"
    label="d$dim-$dtype-x$scale"
    epochs=$EPOCHS
    [[ $scale == fit ]] && epochs=$FIT_EPOCHS
    lib_log "dataset $label: $nodes nodes x $dim $dtype (stride $stride B), batch $batch"
    ds=$(lib_dataset "$WORK" "$PREP" "$nodes" "$dim" "$dtype" "$DEGREE" $((TRAIN_BATCHES * batch)) \
        $((EVAL_BATCHES * batch)) "$SEED")
    cfg=$RUN/$label.toml
    printf '# written by bench/outofcore.sh\n[dataset]\npath = "%s"\n' "$ds" >"$cfg"
    job=(--set "model.kind=$MODEL" --set "model.fanouts=$FANOUTS" --set "train.batch_size=$batch"
        --set train.eval_every=1000000 --set "pipeline.samplers=$SAMPLERS" --set "pipeline.extractors=$EXTRACTORS"
        --set "pipeline.io_depth=$IO_DEPTH")
    reserve_mb=$(lib_fb_reserve_mb "$GL" "$cfg" "${job[@]}") || lib_die "$set: gnnlaunch refused the job (above)"
    ((reserve_mb <= FB_MB)) || lib_die "$set: gnnlaunch needs a feature buffer of $reserve_mb MiB, more than $FB_MB"
    mmap_fb=$FB_MB
    [[ $MMAP_FB == min ]] && mmap_fb=$reserve_mb

    # the extractor's read per row, and the references
    probe=$("$XB" --bench "$ds" --io direct --seconds 0.1 2>/dev/null)
    bs=$(lib_kv read_bytes_max "$probe")
    [[ -n $bs ]] || lib_die "no read_bytes_max from $XB --bench $ds"
    feat=$ds/features.bin
    fio_cmd=(fio --name=randread "--filename=$feat" --readonly --ioengine=io_uring --direct=1 --rw=randread
        "--bs=$bs" "--iodepth=$IO_DEPTH" "--numjobs=$EXTRACTORS" --time_based "--runtime=$FIO_SECS"
        --norandommap --randrepeat=0 --group_reporting --output-format=json)
    lib_drop_caches "$feat"
    "${fio_cmd[@]}" >"$RUN/$label.fio.json" 2>"$RUN/$label.fio.err" || lib_die "fio failed: $(cat "$RUN/$label.fio.err")"
    fio_mmap_cmd=(fio --name=mmapread "--filename=$feat" --readonly --ioengine=mmap --rw=randread
        "--bs=$((dim * esize))" --iodepth=1 "--numjobs=$EXTRACTORS" --time_based
        "--runtime=$FIO_SECS" --norandommap --randrepeat=0 --group_reporting --output-format=json)
    lib_drop_caches "$feat"
    lib_cg_create "$CAP_BYTES"
    lib_cg_exec "${fio_mmap_cmd[@]}" >"$RUN/$label.fio-mmap.json" 2>"$RUN/$label.fio-mmap.err" ||
        lib_die "fio (mmap) failed: $(cat "$RUN/$label.fio-mmap.err")"
    lib_cg_remove
    xb_cmd=("$XB" --bench "$ds" --io direct --io-depth "$IO_DEPTH" --threads "$EXTRACTORS" --seconds "$FIO_SECS"
        --batch-nodes 16384 --seed 1)
    lib_drop_caches "$feat"
    "${xb_cmd[@]}" >"$RUN/$label.xbench" 2>"$RUN/$label.xbench.err" || lib_die "$XB --bench failed"
    lib_log "$label: fio $(printf '%.0f' "$(fio_iops "$RUN/$label.fio.json")") IOPS (bs $bs, depth $IO_DEPTH x $EXTRACTORS), fio mmap $(printf '%.0f' "$(fio_iops "$RUN/$label.fio-mmap.json")") reads/s, extractor alone $(lib_kv iops "$(cat "$RUN/$label.xbench")") IOPS"

    runs=()
    for mode in $MODES; do
        fb=$FB_MB
        [[ $mode == mmap ]] && fb=$mmap_fb
        id=$label-$mode
        lib_log "run $id: pipeline.io=$mode, feature buffer $fb MiB, cap $CAP"
        if run_one "$id" "$cfg" "$mode" "$fb" "$ds" "$epochs" "${job[@]}"; then
            runs+=("\"$id\"")
        else
            FAILED=1
            runs+=("\"$id\"")
        fi
    done
    jq -nc --arg lbl "$label" --arg ds "$ds" --argjson dim "$dim" --arg dtype "$dtype" --arg scale "$scale" \
        --argjson nodes "$nodes" --argjson stride "$stride" --argjson batch "$batch" \
        --argjson feat_bytes "$(stat -c %s "$feat")" --argjson topo_bytes "$(($(stat -c %s "$ds/indptr.bin") + $(stat -c %s "$ds/indices.bin")))" \
        --argjson fb_mb "$FB_MB" --argjson mmap_fb_mb "$mmap_fb" --argjson reserve_mb "$reserve_mb" --argjson bs "$bs" \
        --arg synth "$(cat "$ds.synth.cmd" 2>/dev/null || grep '^source' "$ds/dataset.toml")" \
        --arg fio "${fio_cmd[*]}" --arg fio_mmap "${fio_mmap_cmd[*]}" --arg xbench "${xb_cmd[*]}" \
        --argjson runs "[$(IFS=,; echo "${runs[*]}")]" --arg job "${job[*]}" --argjson epochs "$epochs" \
        '{"label": $lbl, dataset: $ds, dim: $dim, dtype: $dtype, scale: $scale, nodes: $nodes, stride: $stride,
          batch: $batch, feat_bytes: $feat_bytes, topo_bytes: $topo_bytes, fb_mb: $fb_mb, mmap_fb_mb: $mmap_fb_mb,
          reserve_mb: $reserve_mb, read_bytes: $bs, synth_cmd: $synth, fio_cmd: $fio, fio_mmap_cmd: $fio_mmap,
          xbench_cmd: $xbench, runs: $runs, job: $job, epochs: $epochs}' >>"$RUN/manifest.jsonl"
done

jq -n --arg cap "$CAP" --argjson cap_bytes "$CAP_BYTES" --argjson fb_frac "$FB_FRAC" --arg mmap_fb "$MMAP_FB" \
    --argjson epochs "$EPOCHS" --argjson fit_epochs "$FIT_EPOCHS" --argjson train_batches "$TRAIN_BATCHES" --argjson eval_batches "$EVAL_BATCHES" \
    --arg fanouts "$FANOUTS" --arg model "$MODEL" --argjson degree "$DEGREE" --argjson seed "$SEED" \
    --argjson samplers "$SAMPLERS" --argjson extractors "$EXTRACTORS" --argjson io_depth "$IO_DEPTH" \
    --argjson fio_secs "$FIO_SECS" --argjson perf "$PERF" --argjson prof_secs "$PROF_SECS" \
    --argjson quick "$QUICK" --arg cap_method "$(lib_cg_describe)" --arg drop "$(lib_drop_method)" \
    --arg cmdline "${ENV_SET}$CMDLINE" --arg sets "$SETS" --arg modes "$MODES" \
    --arg name "$NAME" --arg run_dir "$RUN" --arg build "$BUILD" \
    '{cap: $cap, cap_bytes: $cap_bytes, fb_frac: $fb_frac, mmap_fb: $mmap_fb, epochs: $epochs, fit_epochs: $fit_epochs,
      train_batches: $train_batches, eval_batches: $eval_batches, fanouts: $fanouts, model: $model,
      degree: $degree, seed: $seed, samplers: $samplers, extractors: $extractors, io_depth: $io_depth,
      fio_secs: $fio_secs, perf: $perf, prof_secs: $prof_secs, quick: $quick, cap_method: $cap_method,
      drop_caches: $drop, command: $cmdline, sets: $sets, modes: $modes, name: $name, run_dir: $run_dir,
      build: $build}' >"$RUN/settings.json"

python3 bench/report.py outofcore "$RUN" "$RESULTS" "$NAME"
[[ $FAILED == 0 ]] || { echo "$LIB_PROG: at least one run failed (see the result file)" >&2; exit 1; }
