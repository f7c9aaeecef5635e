#!/usr/bin/env bash
# scripts/cora.sh [BUILD_DIR] - builds data/cora, the standard Planetoid
# split of Cora, from the arrays committed in datasets/cora/ (gunzipped
# into a temporary folder, then gnnprep import; datasets/cora/README.md
# says where they come from), checks it, and trains GCN on it once.
#   make cora
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin
data=data/cora
src=datasets/cora

mkdir -p data
if [[ -f $data/dataset.toml ]] && "$bin/gnnprep" check --quiet "$data" >/dev/null 2>&1; then
    echo "cora: reusing $data (remove it to import it again)"
else
    rm -rf "$data"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for f in edges features labels train val test; do
        gunzip -c "$src/$f.npy.gz" >"$tmp/$f.npy"
    done
    echo "cora: gnnprep import $data (from $src)"
    "$bin/gnnprep" import "$data" --edges "$tmp/edges.npy" --features "$tmp/features.npy" \
        --labels "$tmp/labels.npy" --train "$tmp/train.npy" --val "$tmp/val.npy" --test "$tmp/test.npy" \
        --undirected --dedupe --drop-self-loops
fi
"$bin/gnnprep" check --quiet "$data"
echo
echo "cora: gnnlaunch --cpu configs/cora-gcn.toml (GCN as PyG's example: 200 epochs, full batch)"
"$bin/gnnlaunch" --cpu configs/cora-gcn.toml
echo
echo "cora: configs/cora-sage.toml and configs/cora-gat.toml run the same way; any seed: --set train.seed=N"
