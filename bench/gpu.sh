#!/usr/bin/env bash
# bench/gpu.sh - the GPU benchmark (issue 16): the same job on the CPU path
# and on one GPU, side by side in one run on one machine, with the exact
# commands in the report it writes.
#
#   bench/gpu.sh [BUILD_DIR]            # the full job (about 5-8 minutes on an H100 machine)
#   QUICK=1 bench/gpu.sh BUILD_DIR      # smoke run for scripts/gpu-check.sh (under 2 minutes)
#   PARTS=ooc bench/gpu.sh BUILD_DIR    # out of core on the GPU (bench/outofcore.sh with --gpus 1)
#   PARTS="acc ooc1 ranks pyg" PYG_SRC=.pysrc bench/gpu.sh BUILD_DIR   # what one GPU session runs
#
# Part "acc": a `gnnprep synth` dataset of NODES nodes, dimension 128, f32
# (made once under WORK), and for each model of MODELS the job of issue 16
# (3 layers, fanouts [10, 10, 10], hidden 256, batch 1000, EPOCHS epochs)
# twice with the same configuration and seed: `gnnlaunch --cpu` and
# `gnnlaunch --gpus 1`. For each run: every epoch line (seconds, per-stage
# busy and wait, reads, buffer hit rate), the final test accuracy, the
# whole run's wall time; for the GPU run, nvidia-smi sampled every 200 ms
# (GPU and memory utilisation, memory used). The report has a table of
# mean epoch seconds (epochs 2..E: epoch 1 includes the cold start),
# test accuracy on both, the difference against issue 16's 1-point bound,
# and the mean and peak GPU utilisation, then each run's lines.
#
# Part "ooc": bench/outofcore.sh --quick with LAUNCH="--gpus 1" (features
# 4x a cgroup memory cap, the feature buffer on the GPU; its own report;
# needs fio, jq, gnuplot and cgroups).
#
# Part "ooc1": out of core with nothing but the build: the acc dataset with
# pipeline.feature_buffer_mb a quarter of its features (OOC_FRAC) and
# fanouts [10, 5] (a [10, 10, 10] batch of 1000 needs more slots than
# that), --gpus 1 then --cpu, EPOCHS epochs. No cgroup: the rows are read
# with O_DIRECT, so a miss is a disk read whatever the page cache holds.
# Beside it the disk: dd's sequential rate, gnn-extractor --bench's random
# 512-byte IOPS and, when fio is installed, fio's at the same request size
# and depth; the table gives each epoch's reads, hit rate and the I/O lower
# bound (reads / the best random IOPS measured) beside its seconds.
#
# Part "ranks": two ranks on the one GPU (--ranks-per-gpu 2, batch 1000
# each) beside one rank of batch 2000, the acc dataset, sage, EPOCHS
# epochs: each epoch's loss side by side (the same global batch, so the
# curves should agree within noise), and the trainers' line saying their
# parameters are identical after epoch 1.
#
# Part "pyg": PyTorch Geometric (bench/peers.py --system pyg --device cuda)
# on the same GPU, dataset and job as part acc for each model of MODELS
# (GAT with 4 heads, as Sluice's model.heads default), beside Sluice's GPU
# numbers when part acc ran before it. PyG's NeighborLoader needs pyg-lib
# or torch-sparse: when neither imports, PYG_SRC (archives from
# scripts/gpu-pysrc.sh) is built with scripts/gpu-pyg.sh into
# WORK/pyg-prefix first; without it the part says why it is skipped.
#
# Environment (defaults; QUICK=1 changes the starred ones):
#   WORK (bench/work)  datasets and run files (git-ignored)
#   NODES* (2M; quick 200K)  EPOCHS* (3; quick 2)  MODELS* ("sage gcn gat"; quick sage)
#   PARTS* ("acc"; quick acc)  OUT (WORK/gpu-DATE.md)  OOC_FRAC (4: buffer = features / 4)
#   PYG_SRC (unset)  torch-scatter / torch-sparse source archives for part pyg
#   TRAIN_FRAC (0.05: 100 training batches per epoch at 2M nodes)
# Exit: 0 done (the bounds are reported, not asserted), 1 a run failed,
# 2 usage or no GPU. It asserts nothing about speed.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${1:-${BUILD:-build}}
[[ -x $BUILD/bin/gnnlaunch ]] || { echo "bench/gpu.sh: $BUILD/bin/gnnlaunch not found: build first (or give the build directory)" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd)
WORK=${WORK:-bench/work}
if [[ ${QUICK:-0} == 1 ]]; then
    NODES=${NODES:-200K} EPOCHS=${EPOCHS:-2} MODELS=${MODELS:-sage} PARTS=${PARTS:-acc}
else
    NODES=${NODES:-2M} EPOCHS=${EPOCHS:-3} MODELS=${MODELS:-sage gcn gat} PARTS=${PARTS:-acc}
fi
TRAIN_FRAC=${TRAIN_FRAC:-0.05}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=${OUT:-$WORK/gpu-$(date +%F).md}
bin=$BUILD/bin
export SLUICE_STAGE_DIR=$bin

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/gpu.sh: no GPU (nvidia-smi finds none); this benchmark needs one" >&2
    exit 2
fi

{
    echo "# GPU benchmark, $(date -u '+%F %H:%M UTC')"
    echo
    echo "- command: \`${QUICK:+QUICK=$QUICK }bench/gpu.sh $*\` (NODES=$NODES EPOCHS=$EPOCHS MODELS=\"$MODELS\" PARTS=\"$PARTS\")"
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
    echo "- host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -r)"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
} >"$OUT"

failed=0

# Runs a gnnlaunch command: run_logged DEV SMI LOG CMD... appends CMD's
# output to LOG, samples nvidia-smi into SMI every 200 ms while it runs
# when DEV is gpu (SMI emptied first), then appends "wall seconds: S  exit
# status: RC" to LOG; its status is CMD's.
run_logged() {
    local dev=$1 smi=$2 log=$3
    shift 3
    : >"$smi"
    local smi_pid=""
    if [[ $dev == gpu ]]; then
        nvidia-smi --query-gpu=utilization.gpu,utilization.memory,memory.used --format=csv,noheader,nounits \
            -lms 200 >"$smi" 2>/dev/null &
        smi_pid=$!
    fi
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    "$@" >>"$log" 2>&1 </dev/null || rc=$?
    t1=$(date +%s.%N)
    [[ -n $smi_pid ]] && { kill "$smi_pid" 2>/dev/null || true; wait "$smi_pid" 2>/dev/null || true; }
    echo "wall seconds: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')  exit status: $rc" >>"$log"
    return "$rc"
}
# "mean / peak" GPU utilisation % of an nvidia-smi sample file ("-" when empty)
smi_util() {
    awk -F', *' 'NF >= 3 { s += $1; n++; if ($1 > p) p = $1 } END { if (n) printf "%.0f / %.0f", s / n, p; else printf "-" }' "$1"
}

# mean of the epoch seconds of epochs 2..E in a run's log ("-" when fewer)
epoch_mean() {
    awk '/^epoch [0-9]+\/[0-9]+ / { split($2, a, "/"); for (i = 1; i <= NF; i++) if ($i ~ /^seconds=/) { sub("seconds=", "", $i); if (a[1] > 1) { s += $i; n++ } } }
         END { if (n) printf "%.2f", s / n; else printf "-" }' "$1"
}
test_acc() { # the final line's test_acc
    awk -F'[= ]' '/^test_acc=/ { v = $2 } END { print (v == "" ? "-" : v) }' "$1"
}

acc_part() {
    acc_dataset
    local ds=$ACC_DS
    local cfg=$WORK/gpu-job.toml
    printf '[dataset]\npath = "%s"\n\n[model]\nhidden = 256\nfanouts = [10, 10, 10]\n\n[train]\nbatch_size = 1000\nseed = 1\n' \
        "$ds" >"$cfg"
    {
        echo "## The same job on the CPU and on one GPU"
        echo
        echo "Dataset: \`gnnprep synth $ds --nodes $NODES --avg-degree 15 --feat-dim 128 --classes 16 --seed 1 --train-frac $TRAIN_FRAC --val-frac 0.005 --test-frac 0.005\`"
        echo
        echo "Configuration ($cfg):"
        echo
        sed 's/^/    /' "$cfg"
        echo
        echo "| model | CPU epoch s (2..E) | GPU epoch s (2..E) | speed-up | CPU test_acc | GPU test_acc | difference (bound 0.01) | GPU util mean / peak % | GPU memory peak MiB |"
        echo "|---|---|---|---|---|---|---|---|---|"
    } >>"$OUT"
    local details=""
    for m in $MODELS; do
        local logs=() dev
        for dev in cpu gpu; do
            local log=$WORK/gpu-$m-$dev.log smi=$WORK/gpu-$m-$dev.smi
            local flags=(--cpu)
            [[ $dev == gpu ]] && flags=(--gpus 1)
            local cmd=("$bin/gnnlaunch" "${flags[@]}" "$cfg" --epochs "$EPOCHS" --set "model.kind=\"$m\""
                --run-name "bench-gpu-$m-$dev" --metrics "$WORK/gpu-$m-$dev.jsonl"
                --set "train.checkpoint_dir=\"$WORK/ck-gpu-$m-$dev\"")
            echo "+ ${cmd[*]}" | tee "$log"
            run_logged "$dev" "$smi" "$log" "${cmd[@]}" || failed=1
            grep -E '^(epoch [0-9]+/[0-9]+ loss|test_acc=|wall seconds)|gnn-trainer rank 0: .* model' "$log" || tail -5 "$log"
            logs+=("$log")
        done
        local ce ge ca ga
        ce=$(epoch_mean "${logs[0]}") ge=$(epoch_mean "${logs[1]}")
        ca=$(test_acc "${logs[0]}") ga=$(test_acc "${logs[1]}")
        local smi=$WORK/gpu-$m-gpu.smi
        local util mem
        util=$(smi_util "$smi")
        mem=$(awk -F', *' 'NF >= 3 { if ($3 > p) p = $3 } END { printf "%s", p ? p : "-" }' "$smi")
        local up diff
        up=$(awk -v c="$ce" -v g="$ge" 'BEGIN { if (c + 0 > 0 && g + 0 > 0) printf "%.1fx", c / g; else printf "-" }')
        diff=$(awk -v c="$ca" -v g="$ga" 'BEGIN { if (c != "-" && g != "-") { d = g - c; printf "%+.4f%s", d, (d < -0.01 || d > 0.01) ? " (outside)" : "" } else printf "-" }')
        echo "| $m | $ce | $ge | $up | $ca | $ga | $diff | $util | $mem |" >>"$OUT"
        GPU_EPOCH[$m]=$ge GPU_ACC[$m]=$ga
        for l in "${logs[@]}"; do
            details+=$'\n'"### $(basename "$l" .log)"$'\n\n'
            details+=$(grep -E '^\+ |^(epoch [0-9]+/[0-9]+ loss|test_acc=|wall seconds)|gnn-trainer rank 0: .* model|gnnlaunch: --gpus' "$l" | sed 's/^/    /')
            if ! grep -q 'exit status: 0$' "$l"; then
                details+=$'\n    ...\n'$(tail -8 "$l" | sed 's/^/    /')
            fi
            details+=$'\n'
        done
    done
    {
        echo
        echo "Epoch lines give per-stage busy and wait seconds; GPU utilisation is nvidia-smi's, sampled every 200 ms over the whole GPU run (start-up included)."
        echo "$details"
    } >>"$OUT"
}

ooc_part() {
    echo "## Out of core on the GPU" >>"$OUT"
    echo >>"$OUT"
    local rc=0
    LAUNCH="--gpus 1" BUILD=$BUILD WORK=$WORK bench/outofcore.sh --quick || rc=$?
    echo "bench/outofcore.sh --quick with LAUNCH=\"--gpus 1\": exit status $rc; its report is in bench/results/ (outofcore-DATE-quick.md)" >>"$OUT"
    ((rc == 0)) || failed=1
}

# The acc part's dataset (made once).
acc_dataset() {
    ACC_DS=$WORK/gpu-$NODES
    if [[ ! -f $ACC_DS/dataset.toml ]]; then
        local synth=("$bin/gnnprep" synth "$ACC_DS" --nodes "$NODES" --avg-degree 15 --feat-dim 128 --classes 16 --seed 1
            --train-frac "$TRAIN_FRAC" --val-frac 0.005 --test-frac 0.005)
        echo "+ ${synth[*]}"
        "${synth[@]}"
    fi
}

# seconds of each epoch line of a log, space-separated
epoch_secs() {
    awk '/^epoch [0-9]+\/[0-9]+ loss/ { for (i = 1; i <= NF; i++) if ($i ~ /^seconds=/) { sub("seconds=", "", $i); printf "%s%s", (n++ ? " / " : ""), $i } }' "$1"
}
# one field of each epoch line ("loss", "reads", "hit"), " / "-separated
epoch_field() {
    awk -v f="$2" '/^epoch [0-9]+\/[0-9]+ loss/ {
        v = "-"
        if (f == "reads") { for (i = 1; i <= NF; i++) if ($i == "reads,") v = $(i - 1) }
        else if (f == "hit") { v = $NF }
        else { for (i = 1; i <= NF; i++) if (index($i, f "=") == 1) { v = substr($i, length(f) + 2) } }
        printf "%s%s", (n++ ? " / " : ""), v }' "$1"
}

ooc1_part() {
    acc_dataset
    local feat=$ACC_DS/features.bin
    local fb_mb=$(($(stat -c %s "$feat") / ${OOC_FRAC:-4} / 1048576))
    local cfg=$WORK/gpu-ooc1.toml
    printf '[dataset]\npath = "%s"\n\n[model]\nhidden = 256\nfanouts = [10, 5]\n\n[train]\nbatch_size = 1000\nseed = 1\n\n[pipeline]\nfeature_buffer_mb = %d\n' \
        "$ACC_DS" "$fb_mb" >"$cfg"
    {
        echo "## Out of core on the GPU: the feature buffer a ${OOC_FRAC:-4}th of the features"
        echo
        echo "Configuration ($cfg): the acc dataset, fanouts [10, 5], hidden 256, batch 1000, seed 1, pipeline.feature_buffer_mb = $fb_mb; no cgroup (O_DIRECT reads)."
        echo
        echo "| disk measurement | command | result |"
        echo "|---|---|---|"
    } >>"$OUT"
    local seq
    seq=$(dd if="$feat" of=/dev/null bs=4M iflag=direct 2>&1 | tail -n 1) || seq="failed: $seq"  # a probe's failure is reported, not fatal
    echo "| sequential | \`dd if=features.bin of=/dev/null bs=4M iflag=direct\` | $seq |" >>"$OUT"
    local best=0 t iops
    for t in 2 4; do
        local xb=("$bin/gnn-extractor" --bench "$ACC_DS" --io direct --io-depth 64 --threads "$t" --seconds 4 --batch-nodes 16384 --seed 1)
        iops=$("${xb[@]}" 2>/dev/null | awk -F= '$1 == "iops" { print $2 }') || iops=""
        echo "| random 512 B, extractor alone | \`${xb[*]}\` | ${iops:-failed} IOPS |" >>"$OUT"
        [[ -n $iops ]] && best=$(awk -v a="$best" -v b="$iops" 'BEGIN { print (b > a ? b : a) }')
    done
    if command -v fio >/dev/null; then
        local fio_cmd=(fio --name=randread "--filename=$feat" --readonly --ioengine=io_uring --direct=1 --rw=randread
            --bs=512 --iodepth=64 --numjobs=2 --time_based --runtime=5 --group_reporting --output-format=terse --terse-version=3)
        iops=$("${fio_cmd[@]}" 2>/dev/null | awk -F';' 'NR == 1 && $8 ~ /^[0-9.]+$/ { print $8 }') || iops=""
        echo "| random 512 B, fio | \`${fio_cmd[*]}\` | ${iops:-failed} IOPS |" >>"$OUT"
        [[ -n $iops ]] && best=$(awk -v a="$best" -v b="$iops" 'BEGIN { print (b > a ? b : a) }')
    else
        echo "| random 512 B, fio | - | fio is not installed here |" >>"$OUT"
    fi
    {
        echo
        echo "| run | epoch seconds | reads per epoch | hit rate | I/O lower bound s (reads / $best IOPS) | test_acc | GPU util mean / peak % |"
        echo "|---|---|---|---|---|---|---|"
    } >>"$OUT"
    local dev details=""
    for dev in gpu cpu; do
        local log=$WORK/gpu-ooc1-$dev.log smi=$WORK/gpu-ooc1-$dev.smi flags=(--cpu)
        [[ $dev == gpu ]] && flags=(--gpus 1)
        local cmd=("$bin/gnnlaunch" "${flags[@]}" "$cfg" --epochs "$EPOCHS" --run-name "bench-gpu-ooc1-$dev"
            --set "train.checkpoint_dir=\"$WORK/ck-gpu-ooc1-$dev\"")
        echo "+ ${cmd[*]}" | tee "$log"
        run_logged "$dev" "$smi" "$log" "${cmd[@]}" || failed=1
        local reads bound util
        reads=$(epoch_field "$log" reads)
        bound=$(awk -v r="$reads" -v b="$best" 'BEGIN { n = split(r, a, " / "); for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? " / " : ""), (b > 0 && a[i] != "-") ? sprintf("%.1f", a[i] / b) : "-" }')
        util=$(smi_util "$smi")
        echo "| $dev | $(epoch_secs "$log") | $reads | $(epoch_field "$log" hit) | $bound | $(test_acc "$log") | $util |" >>"$OUT"
        details+=$'\n'"### gpu-ooc1-$dev"$'\n\n'$(grep -E '^\+ |^(epoch [0-9]+/[0-9]+ loss|test_acc=|wall seconds)|gnnlaunch: (memory|feature buffer)|warm start' "$log" | sed 's/^/    /')$'\n'
    done
    echo "$details" >>"$OUT"
}

ranks_part() {
    acc_dataset
    local cfg=$WORK/gpu-ranks.toml
    printf '[dataset]\npath = "%s"\n\n[model]\nhidden = 256\nfanouts = [10, 10, 10]\n\n[train]\nseed = 1\n' "$ACC_DS" >"$cfg"
    {
        echo "## Two ranks on the one GPU beside one rank of twice the batch"
        echo
        echo "Configuration ($cfg), sage, $EPOCHS epochs."
        echo
        echo "| run | epoch loss | epoch seconds | test_acc | in step |"
        echo "|---|---|---|---|---|"
    } >>"$OUT"
    local how details=""
    for how in two one; do
        local log=$WORK/gpu-ranks-$how.log
        local cmd=("$bin/gnnlaunch" --gpus 1 --ranks-per-gpu 2 "$cfg" --set train.batch_size=1000)
        [[ $how == one ]] && cmd=("$bin/gnnlaunch" --gpus 1 "$cfg" --set train.batch_size=2000)
        cmd+=(--epochs "$EPOCHS" --run-name "bench-gpu-ranks-$how" --set "train.checkpoint_dir=\"$WORK/ck-gpu-ranks-$how\"")
        echo "+ ${cmd[*]}" | tee "$log"
        run_logged gpu "$WORK/gpu-ranks-$how.smi" "$log" "${cmd[@]}" || failed=1
        local step="-"
        [[ $how == two ]] && step=$(grep -q "parameters are identical after epoch 1" "$log" && echo "identical after epoch 1" || echo "NOT said")
        local label="2 ranks x batch 1000 on GPU 0"
        [[ $how == one ]] && label="1 rank x batch 2000"
        echo "| $label | $(epoch_field "$log" loss) | $(epoch_secs "$log") | $(test_acc "$log") | $step |" >>"$OUT"
        details+=$'\n'"### gpu-ranks-$how"$'\n\n'$(grep -E '^\+ |^(epoch [0-9]+/[0-9]+ loss|test_acc=|wall seconds)|gnnlaunch: --(gpus|ranks)|identical after|differ after|nccl' "$log" | sed 's/^/    /')$'\n'
    done
    echo "$details" >>"$OUT"
}

pyg_part() {
    acc_dataset
    echo "## PyTorch Geometric on the same GPU" >>"$OUT"
    echo >>"$OUT"
    local pp=$WORK/pyg-prefix
    if ! PYTHONPATH=$pp${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import torch_sparse' 2>/dev/null &&
        ! python3 -c 'import torch_geometric.typing as t, sys; sys.exit(0 if t.WITH_PYG_LIB else 1)' 2>/dev/null; then
        if [[ -z ${PYG_SRC:-} ]]; then
            echo "Skipped: PyG's NeighborLoader needs pyg-lib or torch-sparse and neither imports here; give PYG_SRC (scripts/gpu-pysrc.sh) to build them." >>"$OUT"
            return
        fi
        if ! scripts/gpu-pyg.sh "$PYG_SRC" "$pp" >"$WORK/gpu-pyg-build.log" 2>&1; then
            { echo "Skipped: building torch-scatter / torch-sparse failed (scripts/gpu-pyg.sh $PYG_SRC $pp):"; echo; tail -n 20 "$WORK/gpu-pyg-build.log" | sed 's/^/    /'; } >>"$OUT"
            failed=1
            return
        fi
        grep '^gpu-pyg: built' "$WORK/gpu-pyg-build.log" | sed 's/^/    /' >>"$OUT"
        echo >>"$OUT"
    fi
    {
        echo "Job: part acc's (3 layers [10, 10, 10], hidden 256, batch 1000, lr 0.003, dropout 0.5, $EPOCHS epochs); \`python3 bench/peers.py --system pyg --device cuda --dataset $ACC_DS --model M --fanouts 10,10,10 --hidden 256 --batch 1000 --epochs $EPOCHS --seed 1\`."
        echo
        echo "| model | Sluice GPU epoch s (2..E) | PyG GPU epoch s (2..E) | Sluice faster by | Sluice test_acc | PyG test_acc |"
        echo "|---|---|---|---|---|---|"
    } >>"$OUT"
    local m details=""
    for m in $MODELS; do
        local log=$WORK/gpu-pyg-$m.jsonl
        local cmd=(python3 bench/peers.py --system pyg --device "${PYG_DEVICE:-cuda}" --dataset "$ACC_DS" --model "$m" --fanouts 10,10,10
            --hidden 256 --batch 1000 --epochs "$EPOCHS" --seed 1)
        echo "+ ${cmd[*]}"
        local rc=0
        PYTHONPATH=$pp${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 "${cmd[@]}" >"$log" 2>"$log.err" </dev/null || rc=$?
        ((rc == 0)) || { failed=1; details+=$'\n'"### pyg $m: exit $rc"$'\n\n'$(tail -n 8 "$log.err" | sed 's/^/    /')$'\n'; }
        local pe pa
        pe=$(python3 -c 'import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
s = [r["seconds"] for r in e if r.get("type") == "epoch" and r["epoch"] > 1]
print("%.2f" % (sum(s) / len(s)) if s else "-")' "$log" 2>/dev/null || echo -)
        pa=$(python3 -c 'import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
f = [r for r in e if r.get("type") == "final"]
print("%.4f" % f[0]["test_acc"] if f else "-")' "$log" 2>/dev/null || echo -)
        local ge=${GPU_EPOCH[$m]:--} ga=${GPU_ACC[$m]:--}
        local up
        up=$(awk -v s="$ge" -v p="$pe" 'BEGIN { if (s + 0 > 0 && p + 0 > 0) printf "%.1fx", p / s; else printf "-" }')
        echo "| $m | $ge | $pe | $up | $ga | $pa |" >>"$OUT"
        details+=$'\n'"### pyg $m"$'\n\n'$(sed 's/^/    /' "$log")$'\n'
    done
    echo "$details" >>"$OUT"
}

declare -A GPU_EPOCH=() GPU_ACC=()
for p in $PARTS; do
    case $p in
    acc) acc_part ;;
    ooc) ooc_part ;;
    ooc1) ooc1_part ;;
    ranks) ranks_part ;;
    pyg) pyg_part ;;
    *) echo "bench/gpu.sh: unknown part '$p' (acc, ooc, ooc1, ranks, pyg)" >&2; exit 2 ;;
    esac
done
echo "report: $OUT"
cat "$OUT"
exit $failed
