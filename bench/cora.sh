#!/usr/bin/env bash
# bench/cora.sh - Cora's standard split with the three configs of
# configs/cora-*.toml (PyG's example settings), test accuracy after the
# last epoch over seeds 0..9: mean and standard deviation, with the
# configs' weight decay and with none (issue 26's two columns), beside
# PyTorch Geometric running the same models on the same arrays.
#
#   bench/cora.sh [BUILD_DIR]          # Sluice only (make cora first: data/cora)
#   bench/cora.sh --pyg [BUILD_DIR]    # and PyG (bench/cora_pyg.py) in a virtual
#                                      # environment it makes once under WORK
#
# Environment (defaults): SEEDS ("0 1 2 3 4 5 6 7 8 9"), MODELS ("gcn sage
# gat"), DECAYS ("5e-4 0"), WORK (bench/work), VENV (WORK/peers-venv),
# PYG_THREADS (0: torch's default). The PyG side installs torch (the CPU
# wheels of download.pytorch.org) and torch_geometric from PyPI, and says
# which versions it ran. Prints a markdown table; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYG=0
if [[ ${1:-} == --pyg ]]; then
    PYG=1
    shift
fi
BUILD=${1:-${BUILD:-build}}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7 8 9}
MODELS=${MODELS:-gcn sage gat}
DECAYS=${DECAYS:-5e-4 0}
WORK=${WORK:-bench/work}
VENV=${VENV:-$WORK/peers-venv}
bin=$BUILD/bin
[[ -x $bin/gnnlaunch ]] || { echo "bench/cora.sh: $bin/gnnlaunch not found: build first" >&2; exit 2; }
[[ -f data/cora/dataset.toml ]] || { echo "bench/cora.sh: data/cora not found: run make cora" >&2; exit 2; }
export SLUICE_STAGE_DIR=$bin
mkdir -p "$WORK"
runs=$WORK/cora-runs.txt # MODEL DECAY SEED ACC SIDE
: >"$runs"

for m in $MODELS; do
    for wd in $DECAYS; do
        for s in $SEEDS; do
            log=$WORK/cora-$m-$wd-$s.log
            "$bin/gnnlaunch" --cpu "configs/cora-$m.toml" --set "train.seed=$s" --set "train.weight_decay=$wd" \
                --run-name "cora-$m-$s" --set "train.checkpoint_dir=\"$WORK/ck-cora-$m-$wd-$s\"" >"$log" 2>&1 ||
                { echo "bench/cora.sh: run failed, see $log" >&2; exit 1; }
            echo "$m $wd $s $(awk -F'[= ]' '/^test_acc=/ { v = $2 } END { print v }' "$log") sluice" >>"$runs"
            rm -rf "$WORK/ck-cora-$m-$wd-$s"
        done
    done
done

versions=""
if ((PYG)); then
    if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import torch, torch_geometric' 2>/dev/null; then
        echo "bench/cora.sh: making $VENV (torch CPU wheels, torch_geometric)" >&2
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q --upgrade pip
        "$VENV/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu
        "$VENV/bin/pip" install -q torch_geometric numpy
    fi
    pyg_out=$WORK/cora-pyg.txt
    "$VENV/bin/python" bench/cora_pyg.py datasets/cora --models "${MODELS// /,}" --decays "${DECAYS// /,}" \
        --seeds "${SEEDS// /,}" --threads "${PYG_THREADS:-0}" >"$pyg_out"
    versions=$(sed -n 's/^# //p' "$pyg_out")
    grep -v '^#' "$pyg_out" | sed 's/$/ pyg/' >>"$runs"
fi

echo "Test accuracy after the last epoch, mean ± sample standard deviation over seeds ($SEEDS)${versions:+; PyG: $versions}:"
echo
echo "| model | weight decay | Sluice | PyG | Sluice - PyG (points) |"
echo "|---|---|---|---|---|"
awk '
    { k = $1 " " $2; n[k, $5]++; s[k, $5] += $4; q[k, $5] += $4 * $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
    function mean(k, side) { return s[k, side] / n[k, side] }
    function sd(k, side,   mu) { mu = mean(k, side); return n[k, side] > 1 ? sqrt((q[k, side] - n[k, side] * mu * mu) / (n[k, side] - 1)) : 0 }
    END {
        for (i = 1; i <= m; i++) {
            k = order[i]; split(k, a, " ")
            sl = n[k, "sluice"] ? sprintf("%.4f ± %.4f", mean(k, "sluice"), sd(k, "sluice")) : "-"
            py = n[k, "pyg"] ? sprintf("%.4f ± %.4f", mean(k, "pyg"), sd(k, "pyg")) : "-"
            d = n[k, "sluice"] && n[k, "pyg"] ? sprintf("%+.2f", 100 * (mean(k, "sluice") - mean(k, "pyg"))) : "-"
            printf "| %s | %s | %s | %s | %s |\n", a[1], a[2], sl, py, d
        }
    }' "$runs"
