#!/usr/bin/env bash
# The README's demo: make a small synthetic dataset, verify it, describe it,
# then train GraphSAGE on it for 3 epochs (configs/demo.toml).
#   scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin
data=data/demo

mkdir -p data
if [[ -f $data/dataset.toml ]] && "$bin/gnnprep" check --quiet "$data" >/dev/null 2>&1; then
    echo "demo: reusing $data (remove it to generate it again)"
else
    rm -rf "$data"
    echo "demo: generating $data"
    "$bin/gnnprep" synth "$data" --nodes 200000 --avg-degree 20 --feat-dim 128 --classes 16 --seed 1
fi
echo
echo "demo: gnnprep check $data"
"$bin/gnnprep" check "$data"
echo
echo "demo: gnnprep info $data"
"$bin/gnnprep" info "$data"
echo
echo "demo: gnnlaunch --cpu configs/demo.toml (GraphSAGE, 3 epochs)"
"$bin/gnnlaunch" --cpu configs/demo.toml
