#!/usr/bin/env bash
# bench/gpu.sh - the GPU benchmark (issue 16): the same job on the CPU path
# and on one GPU, side by side in one run on one machine, with the exact
# commands in the report it writes.
#
#   bench/gpu.sh [BUILD_DIR]            # the full job (about 5-8 minutes on an H100 machine)
#   QUICK=1 bench/gpu.sh BUILD_DIR      # smoke run for scripts/gpu-check.sh (under 2 minutes)
#   PARTS=ooc bench/gpu.sh BUILD_DIR    # out of core on the GPU (bench/outofcore.sh with --gpus 1)
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
# 4x a cgroup memory cap, the feature buffer on the GPU; its own report).
#
# Environment (defaults; QUICK=1 changes the starred ones):
#   WORK (bench/work)  datasets and run files (git-ignored)
#   NODES* (2M; quick 200K)  EPOCHS* (3; quick 2)  MODELS* ("sage gcn gat"; quick sage)
#   PARTS* ("acc"; quick acc)  OUT (WORK/gpu-DATE.md)
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

# mean of the epoch seconds of epochs 2..E in a run's log ("-" when fewer)
epoch_mean() {
    awk '/^epoch [0-9]+\/[0-9]+ / { split($2, a, "/"); for (i = 1; i <= NF; i++) if ($i ~ /^seconds=/) { sub("seconds=", "", $i); if (a[1] > 1) { s += $i; n++ } } }
         END { if (n) printf "%.2f", s / n; else printf "-" }' "$1"
}
test_acc() { # the final line's test_acc
    awk -F'[= ]' '/^test_acc=/ { v = $2 } END { print (v == "" ? "-" : v) }' "$1"
}

acc_part() {
    local ds=$WORK/gpu-$NODES
    if [[ ! -f $ds/dataset.toml ]]; then
        local synth=("$bin/gnnprep" synth "$ds" --nodes "$NODES" --avg-degree 15 --feat-dim 128 --classes 16 --seed 1
            --train-frac "$TRAIN_FRAC" --val-frac 0.005 --test-frac 0.005)
        echo "+ ${synth[*]}"
        "${synth[@]}"
    fi
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
            : >"$smi"
            local smi_pid=""
            if [[ $dev == gpu ]]; then
                nvidia-smi --query-gpu=utilization.gpu,utilization.memory,memory.used --format=csv,noheader,nounits \
                    -lms 200 >"$smi" 2>/dev/null &
                smi_pid=$!
            fi
            local t0 t1 rc=0
            t0=$(date +%s.%N)
            "${cmd[@]}" >>"$log" 2>&1 </dev/null || rc=$?
            t1=$(date +%s.%N)
            [[ -n $smi_pid ]] && { kill "$smi_pid" 2>/dev/null || true; wait "$smi_pid" 2>/dev/null || true; }
            echo "wall seconds: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')  exit status: $rc" >>"$log"
            ((rc == 0)) || failed=1
            grep -E '^(epoch [0-9]+/[0-9]+ loss|test_acc=|wall seconds)|gnn-trainer rank 0: .* model' "$log" || tail -5 "$log"
            logs+=("$log")
        done
        local ce ge ca ga
        ce=$(epoch_mean "${logs[0]}") ge=$(epoch_mean "${logs[1]}")
        ca=$(test_acc "${logs[0]}") ga=$(test_acc "${logs[1]}")
        local smi=$WORK/gpu-$m-gpu.smi
        local util mem
        util=$(awk -F', *' 'NF >= 3 { s += $1; n++; if ($1 > p) p = $1 } END { if (n) printf "%.0f / %.0f", s / n, p; else printf "-" }' "$smi")
        mem=$(awk -F', *' 'NF >= 3 { if ($3 > p) p = $3 } END { printf "%s", p ? p : "-" }' "$smi")
        local up diff
        up=$(awk -v c="$ce" -v g="$ge" 'BEGIN { if (c + 0 > 0 && g + 0 > 0) printf "%.1fx", c / g; else printf "-" }')
        diff=$(awk -v c="$ca" -v g="$ga" 'BEGIN { if (c != "-" && g != "-") { d = g - c; printf "%+.4f%s", d, (d < -0.01 || d > 0.01) ? " (outside)" : "" } else printf "-" }')
        echo "| $m | $ce | $ge | $up | $ca | $ga | $diff | $util | $mem |" >>"$OUT"
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

for p in $PARTS; do
    case $p in
    acc) acc_part ;;
    ooc) ooc_part ;;
    *) echo "bench/gpu.sh: unknown part '$p' (acc, ooc)" >&2; exit 2 ;;
    esac
done
echo "report: $OUT"
cat "$OUT"
exit $failed
