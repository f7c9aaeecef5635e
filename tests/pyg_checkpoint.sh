#!/usr/bin/env bash
# tests/pyg_checkpoint.sh BUILD_DIR - docs/checkpoints.md's PyTorch Geometric
# example, checked: for sage, gcn (gcn_norm = "graph") and gat, train two
# epochs on a small synthetic graph with every neighbour, predict every node
# with gnnlaunch --predict, rebuild the model in PyG from the checkpoint
# (scripts/pyg_from_checkpoint.py) and require the same logits (1e-4) and
# predictions. Needs a Python with torch and torch_geometric: $SLUICE_PYG_PYTHON,
# else python3; exits 77 (skipped) when it has none (CI installs no PyTorch;
# bench/peers.sh makes a venv that has both).
set -euo pipefail
build=$(cd "${1:?BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
py=${SLUICE_PYG_PYTHON:-python3}
if ! "$py" -c 'import torch, torch_geometric, numpy' >/dev/null 2>&1; then
    echo "pyg_checkpoint: $py cannot import torch and torch_geometric; skipped (set SLUICE_PYG_PYTHON)"
    exit 77
fi
work=$build/tmp/pyg-checkpoint
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$build/bin/gnnprep" synth ds --nodes 3000 --avg-degree 6 --feat-dim 12 --classes 5 --homophily 0.9 \
    --feature-noise 1.0 --train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 3 >/dev/null
cat > run.toml <<TOML
[dataset]
path = "ds"
[model]
hidden = 16
fanouts = [-1, -1]
heads = 2
[train]
batch_size = 128
epochs = 2
lr = 0.01
[pipeline]
samplers = 1
extractors = 1
feature_buffer_mb = 8
staging_mb = 4
ordered = true
TOML
for kind in sage gcn gat; do
    sets=(--set "model.kind=\"$kind\"" --set 'model.gcn_norm="graph"')
    "$build/bin/gnnlaunch" --cpu run.toml --run-name "$kind" "${sets[@]}" >"train-$kind.log" 2>&1
    "$build/bin/gnnlaunch" --cpu --predict "checkpoints/$kind/latest.safetensors" run.toml "${sets[@]}" \
        --out "pred-$kind" >"pred-$kind.log" 2>"pred-$kind.err"
    "$py" "$src/scripts/pyg_from_checkpoint.py" ds "checkpoints/$kind/latest.safetensors" --compare "pred-$kind" \
        | tee "pyg-$kind.log"
    grep -q 'predictions equal on 1.0000 of the nodes' "pyg-$kind.log"
    # PyG's accuracies are the ones gnnlaunch --predict printed
    ours=$(tail -1 "pred-$kind.log" | cut -d' ' -f1-3)
    theirs=$(grep '_acc=' "pyg-$kind.log" | cut -d' ' -f1-3)
    [[ "$ours" == "$theirs" ]] || { echo "accuracies differ: '$ours' vs PyG '$theirs'"; exit 1; }
done
echo "pyg_checkpoint: sage, gcn and gat reproduce in PyTorch Geometric"
