#!/usr/bin/env bash
# bench/train.sh - issue 5's CPU training benchmarks, with the exact
# commands in the log they print:
#
#   1. accuracy: on a `gnnprep synth` dataset of 1M nodes with gnnprep's
#      default homophily and noise, GraphSAGE, GCN, GAT and the feature-only
#      MLP, each with the default configuration (3 layers, fanouts
#      [10, 10, 10], hidden 256, batch 1000) for EPOCHS epochs;
#   2. out of core: GraphSAGE with the feature buffer at half the size of
#      features.bin (fanouts [10, 10] so that the deadlock reserve fits),
#      for the epoch time and the per-stage busy / wait seconds.
#
# Environment (defaults): BUILD (build), WORK (bench/work, git-ignored),
# NODES (1M), EPOCHS (3), MODELS ("sage mlp gcn gat"), PARTS ("1 2").
# Results: the last lines of each run in $WORK/train-*.log; copy the
# numbers with the machine into bench/results/. It asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
NODES=${NODES:-1M}
EPOCHS=${EPOCHS:-3}
MODELS=${MODELS:-sage mlp gcn gat}
PARTS=${PARTS:-1 2}
bin=$BUILD/bin
ds=$WORK/train-$NODES

mkdir -p "$WORK"
if [[ ! -f $ds/dataset.toml ]]; then
    echo "+ $bin/gnnprep synth $ds --nodes $NODES --avg-degree 20 --feat-dim 128 --classes 16 --seed 1"
    "$bin/gnnprep" synth "$ds" --nodes "$NODES" --avg-degree 20 --feat-dim 128 --classes 16 --seed 1
fi
feat_bytes=$(stat -c %s "$ds/features.bin")
cfg=$WORK/train.toml
printf '[dataset]\npath = "%s"\n' "$ds" >"$cfg"

run() { # name, then gnnlaunch arguments
    local name=$1
    shift
    local log=$WORK/train-$name.log
    echo "+ $bin/gnnlaunch --cpu $cfg $*" | tee "$log"
    /usr/bin/time -v "$bin/gnnlaunch" --cpu "$cfg" "$@" >>"$log" 2>&1 || echo "exit status $?" >>"$log"
    grep -E '^(epoch |test_acc=|exit status)|Maximum resident|Elapsed' "$log"
}

for part in $PARTS; do
    case $part in
    1)
        for m in $MODELS; do
            run "$m" --epochs "$EPOCHS" --set model.kind="$m" --run-name "bench-$m" \
                --set train.checkpoint_dir="\"$WORK/ck-$m\""
        done
        ;;
    2)
        mb=$((feat_bytes / 2 / 1048576))
        run ooc --epochs "$EPOCHS" --set model.kind=sage --set "model.fanouts=[10,10]" \
            --set pipeline.feature_buffer_mb=$mb --run-name bench-ooc \
            --set train.checkpoint_dir="\"$WORK/ck-ooc\""
        ;;
    esac
done
