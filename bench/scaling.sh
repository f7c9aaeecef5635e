#!/usr/bin/env bash
# bench/scaling.sh - the same training job at 1, 2 and 4 data-parallel
# ranks: epoch time, speedup, parallel efficiency and the share of the
# epoch spent in the gradient all-reduce. One command; it writes
# RESULTS/NAME.md, RESULTS/NAME.json and RESULTS/NAME.png.
#
#   bench/scaling.sh                    # CPU ranks 1 2 4, features in memory (~3 min on a 2-core VM)
#   bench/scaling.sh --quick            # smoke run: 1 and 2 ranks, a small graph (~20 s)
#   CAP=1G bench/scaling.sh             # every run under a 1 GiB cap (out of core; root)
#
# CPU ranks: `gnnlaunch --cpu CONFIG --set pipeline.ranks=R`. Every rank has
# its own sampler, extractor, trainer and releaser processes and feature
# buffer; the trainers all-reduce [gradients, weight] once a step through
# shared memory (ipc/allreduce.c). `train.batch_size` is per rank, so R
# ranks take 1/R of the steps per epoch on the same training split: the
# epoch's work is the same at every R (strong scaling of the epoch).
# GPUs: with nvidia-smi listing G > 0 GPUs it tries `gnnlaunch --gpus R`
# for R <= G and records the answer (the CUDA trainer is not built yet:
# gnn-trainer refuses a GPU rank); without GPUs it says so.
#
# All-reduce: the epoch objects' `reduce_s` (the slowest rank's seconds in
# allreduce_sum, waiting for peers included) over the epoch time; beside it
# an estimate of the sum alone, `allreduce-bench` at the model's gradient
# size times the steps per epoch (docs/benchmarks.md, "All-reduce time").
#
# Environment (defaults; --quick changes the starred ones):
#   BUILD (build) WORK (bench/work) RESULTS (bench/results) NAME (scaling-DATE[-quick])
#   RANKS* ("1 2 4"; quick "1 2")
#   NODES* (1048576; quick 262144) DIM (128) DTYPE (f32) DEGREE (10) SEED (1)
#   TRAIN_BATCHES* (192; quick 48)  training batches per epoch at 1 rank
#   EPOCHS* (6; quick 3)   epoch 1 cold, the last also evaluates; 2..E-1 measured
#   BATCH (1000) FANOUTS ([10,10]) MODEL (sage) SAMPLERS (2) EXTRACTORS (2) IO_DEPTH (64)
#   FB_MB                  feature buffer per rank in MiB (default: every row
#                          fits, so epochs after the first read nothing; with
#                          CAP: FB_FRAC x CAP / R, the same total at every R)
#   CAP ("")               cap every run's memory (cgroup, as bench/outofcore.sh)
#   FB_FRAC (0.4)          with CAP
#   CAP_METHOD (auto)      auto or external (--cap-external)
# Exit: 0 done, 2 bad usage or missing tools, 1 a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/scaling.sh
source bench/lib.sh

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

CMDLINE="$0${*:+ $*}"
ENV_SET=""
for v in BUILD WORK RESULTS NAME RANKS NODES DIM DTYPE DEGREE SEED TRAIN_BATCHES EPOCHS BATCH FANOUTS MODEL \
    SAMPLERS EXTRACTORS IO_DEPTH FB_MB CAP FB_FRAC CAP_METHOD; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
QUICK=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --quick) QUICK=1 ;;
    --ranks) RANKS=${2:?--ranks needs a list, e.g. "1 2 4"}; shift ;;
    --cap) CAP=${2:?--cap needs a size}; shift ;;
    --cap-external) CAP_METHOD=external ;;
    -h | --help) usage 0 ;;
    *) echo "$LIB_PROG: unknown argument '$1'" >&2; usage 2 ;;
    esac
    shift
done

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
RESULTS=${RESULTS:-bench/results}
DIM=${DIM:-128}
DTYPE=${DTYPE:-f32}
DEGREE=${DEGREE:-10}
SEED=${SEED:-1}
BATCH=${BATCH:-1000}
FANOUTS=${FANOUTS:-[10,10]}
MODEL=${MODEL:-sage}
SAMPLERS=${SAMPLERS:-2}
EXTRACTORS=${EXTRACTORS:-2}
IO_DEPTH=${IO_DEPTH:-64}
CAP=${CAP:-}
FB_FRAC=${FB_FRAC:-0.4}
if [[ $QUICK == 1 ]]; then
    RANKS=${RANKS:-1 2}
    NODES=${NODES:-262144}
    TRAIN_BATCHES=${TRAIN_BATCHES:-48}
    EPOCHS=${EPOCHS:-3}
    NAME=${NAME:-scaling-$(date -u +%Y-%m-%d)-quick}
else
    RANKS=${RANKS:-1 2 4}
    NODES=${NODES:-1048576}
    TRAIN_BATCHES=${TRAIN_BATCHES:-192}
    EPOCHS=${EPOCHS:-6}
    NAME=${NAME:-scaling-$(date -u +%Y-%m-%d)}
fi
((EPOCHS >= 2)) || lib_die "EPOCHS=$EPOCHS: at least 2 (epoch 1 is the cold start)"

lib_need_tools jq python3 gnuplot numfmt lsblk
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-sampler gnn-extractor gnn-trainer gnn-releaser allreduce-bench
GL=$BUILD/bin/gnnlaunch
if [[ -n $CAP ]]; then
    CAP_BYTES=$(lib_bytes "$CAP")
    lib_cg_detect
else
    CAP_BYTES=0
    CG_MODE=""
fi

mkdir -p "$WORK" "$RESULTS"
RUN=$WORK/scaling-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RUN"
DISK=$(lib_disk_of "$WORK")
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

lib_log "scaling benchmark: ranks $RANKS; raw files in $RUN; results will be $RESULTS/$NAME.{md,json,png}"
lib_machine_json "$BUILD" "$WORK" >"$RUN/machine.json"

ds=$(lib_dataset "$WORK" "$BUILD/bin/gnnprep" "$NODES" "$DIM" "$DTYPE" "$DEGREE" $((TRAIN_BATCHES * BATCH)) "$BATCH" "$SEED")
feat_bytes=$(stat -c %s "$ds/features.bin")
cfg=$RUN/scaling.toml
printf '# written by bench/scaling.sh\n[dataset]\npath = "%s"\n' "$ds" >"$cfg"
job=(--set "model.kind=$MODEL" --set "model.fanouts=$FANOUTS" --set "train.batch_size=$BATCH"
    --set train.eval_every=1000000 --set "pipeline.samplers=$SAMPLERS" --set "pipeline.extractors=$EXTRACTORS"
    --set "pipeline.io_depth=$IO_DEPTH")
if [[ -n $CAP ]]; then
    cap_desc="every run under a cap of $CAP: $(lib_cg_describe)"
else
    cap_desc="no cap (the machine's memory)"
fi

: >"$RUN/manifest.jsonl"
FAILED=0
params=""
for R in $RANKS; do
    if [[ -n ${FB_MB:-} ]]; then
        fb=$FB_MB
        fb_desc="$FB_MB MiB per rank (FB_MB)"
    elif [[ -n $CAP ]]; then
        fb=$(python3 -c "print(int($FB_FRAC * $CAP_BYTES / 1048576 / $R))")
        fb_desc="FB_FRAC x CAP / R = $FB_FRAC x $CAP / R per rank"
    else
        fb=$(((feat_bytes * 11 / 10 >> 20) + 1))
        fb_desc="$fb MiB per rank: every row fits (epochs after the first read nothing from disk)"
    fi
    id=r$R
    cmd=("$GL" --cpu "$cfg" --epochs "$EPOCHS" --run-name "scale-$$-$id" --metrics "$RUN/$id.jsonl" "${job[@]}"
        --set "pipeline.ranks=$R" --set "pipeline.feature_buffer_mb=$fb" --set "train.checkpoint_dir=\"$RUN/ck-$id\"")
    printf '%q ' "${cmd[@]}" >"$RUN/$id.cmd"
    echo >>"$RUN/$id.cmd"
    lib_log "run $id: pipeline.ranks=$R, feature buffer $fb MiB per rank"
    lib_drop_caches "$ds"/*.bin
    [[ -n $CAP ]] && lib_cg_create "$CAP_BYTES"
    cut -d' ' -f1-3 /proc/loadavg >"$RUN/$id.load"
    lib_sampler "$RUN/$id.samples" "$EPOCHREALTIME" "$DISK" &
    sp=$!
    BG_PIDS+=("$sp")
    rc=0
    SLUICE_PROGRESS_EVERY=30 lib_cg_exec "${cmd[@]}" >"$RUN/$id.log" 2>&1 </dev/null || rc=$?
    kill "$sp" 2>/dev/null || true
    wait "$sp" 2>/dev/null || true
    BG_PIDS=() # reaped: no stale pid is ever signalled
    cut -d' ' -f1-3 /proc/loadavg >>"$RUN/$id.load"
    lib_cg_summary >"$RUN/$id.cg.json"
    lib_cg_remove
    rid=$(lib_run_id "$RUN/$id.log")
    [[ -n $rid ]] && { RUN_IDS+=("$rid"); lib_shm_sweep "$rid" >/dev/null; }
    rm -rf "$RUN/ck-$id"
    grep -E '^(epoch [0-9]+/[0-9]+ |test_acc=)' "$RUN/$id.log" >&2 || true
    if [[ $rc -ne 0 ]]; then
        FAILED=1
        echo "$LIB_PROG: run $id exited with status $rc; the last lines of $RUN/$id.log:" >&2
        tail -5 "$RUN/$id.log" >&2
    fi
    p=$(sed -n 's/.* \([0-9][0-9]*\) parameters.*/\1/p' "$RUN/$id.log" | head -1)
    [[ -n $p ]] && params=$p
    # the sum alone: allreduce-bench at the gradient's size ([gradients, weight] floats)
    ar_json=null
    ar_cmd=""
    if ((R > 1)) && [[ -n $params ]]; then
        bytes=$(((params + 1) * 4))
        ar_cmd="$BUILD/bin/allreduce-bench --ranks $R --min-bytes $bytes --max-bytes $bytes --iters 200 --json"
        ar_json=$($ar_cmd 2>/dev/null | tail -1)
        [[ $ar_json == \{* ]] || ar_json=null
    fi
    jq -nc --arg id "$id" --argjson ranks "$R" --argjson fb "$fb" --argjson ar "$ar_json" --arg ar_cmd "$ar_cmd" \
        '{id: $id, ranks: $ranks, fb_mb: $fb, allreduce: $ar, allreduce_cmd: $ar_cmd}' >>"$RUN/manifest.jsonl"
done

# GPUs: detect, try, record.
first_msg() { grep -m1 '^gnnlaunch:' <<<"$1" || tail -1 <<<"$1"; }
gpu_n=0
gpu_cmds=()
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu_n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if ((gpu_n > 0)); then
    gpu_note="$gpu_n GPU(s) found (nvidia-smi -L)."
    for R in $RANKS; do
        ((R <= gpu_n)) || continue
        out=$("$GL" --gpus "$R" "$cfg" --epochs "$EPOCHS" "${job[@]}" --run-name "scale-$$-g$R" 2>&1 </dev/null) && grc=0 || grc=$?
        gpu_cmds+=("$GL --gpus $R $cfg --epochs $EPOCHS ${job[*]}   # exit $grc")
        if [[ $grc -ne 0 ]]; then
            gpu_note+=" \`gnnlaunch --gpus $R\` exited $grc: \"$(first_msg "$out")\"."
        else
            gpu_note+=" \`gnnlaunch --gpus $R\` ran (GPU results are not parsed by this version of the script)."
        fi
    done
else
    out=$("$GL" --gpus 1 "$cfg" --epochs 1 2>&1 </dev/null) && grc=0 || grc=$?
    gpu_note="no GPU found (nvidia-smi absent or listing none), so no GPU runs. For the record, \`gnnlaunch --gpus 1\` says (exit $grc): \"$(first_msg "$out")\""
fi
lib_log "$gpu_note"

gpu_json=$(printf '%s\n' "${gpu_cmds[@]}" | jq -R . | jq -sc 'map(select(length > 0))')
jq -n --arg command "${ENV_SET}$CMDLINE" --argjson quick "$QUICK" --arg ranks "$RANKS" --argjson epochs "$EPOCHS" \
    --arg model "$MODEL" --arg fanouts "$FANOUTS" --argjson batch "$BATCH" --argjson samplers "$SAMPLERS" \
    --argjson extractors "$EXTRACTORS" --argjson io_depth "$IO_DEPTH" --arg fb_desc "$fb_desc" \
    --arg cap_desc "$cap_desc" --arg drop "$(lib_drop_method)" --arg gpu_note "$gpu_note" --argjson gpu_cmds "$gpu_json" \
    --arg synth "$(cat "$ds.synth.cmd" 2>/dev/null || grep '^source' "$ds/dataset.toml")" \
    --arg desc "$NODES nodes x $DIM $DTYPE (features.bin $((feat_bytes >> 20)) MiB), gnnprep synth --avg-degree $DEGREE, $((TRAIN_BATCHES * BATCH)) training targets ($TRAIN_BATCHES batches at 1 rank)" \
    --arg dlabel "d$DIM-$DTYPE-n$NODES" --argjson capped "$([[ -n $CAP ]] && echo true || echo false)" \
    --argjson train_batches "$TRAIN_BATCHES" --arg run_dir "$RUN" \
    '{command: $command, quick: $quick, ranks: $ranks, epochs: $epochs, model: $model, fanouts: $fanouts,
      batch: $batch, samplers: $samplers, extractors: $extractors, io_depth: $io_depth, fb_desc: $fb_desc,
      cap_desc: $cap_desc, drop_caches: $drop, gpu_note: $gpu_note, gpu_cmds: $gpu_cmds, synth_cmd: $synth,
      dataset_desc: $desc, dataset_label: $dlabel, capped: $capped, train_batches: $train_batches,
      run_dir: $run_dir}' >"$RUN/settings.json"

python3 bench/report.py scaling "$RUN" "$RESULTS" "$NAME"
[[ $FAILED == 0 ]] || { echo "$LIB_PROG: at least one run failed (see the result file)" >&2; exit 1; }
