#!/usr/bin/env bash
# bench/kge.sh - link prediction in memory (issue 23): Sluice's DistMult and
# ComplEx (kge-bench, stages/link.h) beside PyTorch Geometric's
# torch_geometric.nn.kge models (bench/kge_pyg.py) on the same dataset
# files, trained the same way (PyG's: one random negative per positive,
# heads corrupted in the first half of a batch, tails in the second;
# DistMult's margin ranking loss, ComplEx's logistic loss; Adagrad; the same
# dim, lr, batch and epochs), for several seeds; then Sluice with Marius's
# training (softmax over 100 negatives shared by chunks of 100, both sides,
# half of them by degree) against the planted MRR. Writes
# RESULTS/NAME.md with the commands, the machine and a table.
#
#   bench/kge.sh                      # both datasets, seeds 0 1 2 (~15 min on 2 cores)
#   SEEDS="0" EPOCHS=5 bench/kge.sh   # a quick look
#
# Datasets (made once under WORK):
#   planted  gnnprep synth --task link --nodes 5000 --relations 10 --avg-degree 20 --seed 1
#            (a model that learns the planted clusters reaches planted_mrr)
#   cora     Cora's 5278 undirected citation links (datasets/cora) as triples
#            of one relation, 85/5/10% train/valid/test by a seeded shuffle
#   umls, kinships  the classic small knowledge graphs (Kok and Domingos 2007)
#            with their standard splits, as PyKEEN's wheel on PyPI carries
#            them (pykeen 1.11.1, fetched with pip download, only its text
#            files used), imported from their TSV with gnnprep import --triples
#
# Environment: BUILD (build) WORK (bench/work/kge) RESULTS (bench/results)
# NAME (kge-DATE) SEEDS ("0 1 2") EPOCHS (20) DIM (64) LR (0.1) BATCH (1000)
# DATASETS ("planted cora umls kinships") MODELS ("distmult complex")
# PYG_VENV (/work/bench-data/venvs/pyg: made with torch 2.3.1 and PyG 2.8.1
# from PyPI when it cannot import torch_geometric).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
WORK=${WORK:-bench/work/kge}
RESULTS=${RESULTS:-bench/results}
NAME=${NAME:-kge-$(date +%F)}
SEEDS=${SEEDS:-0 1 2}
EPOCHS=${EPOCHS:-20}
DIM=${DIM:-64}
LR=${LR:-0.1}
BATCH=${BATCH:-1000}
DATASETS=${DATASETS:-planted cora umls kinships}
MODELS=${MODELS:-distmult complex}
PYG_VENV=${PYG_VENV:-/work/bench-data/venvs/pyg}
PREP=$BUILD/bin/gnnprep
KGE=$BUILD/bin/kge-bench
die() { echo "bench/kge.sh: $*" >&2; exit 2; }
[[ -x $PREP && -x $KGE ]] || die "build first: $PREP and $KGE are missing (cmake --build $BUILD)"
if ! "$PYG_VENV/bin/python" -c "import torch_geometric.nn.kge" 2>/dev/null; then
    echo "# making $PYG_VENV (torch 2.3.1, torch_geometric 2.8.1 from PyPI)" >&2
    python3 -m venv "$PYG_VENV"
    "$PYG_VENV/bin/pip" install -q torch==2.3.1 torch_geometric==2.8.1 numpy || die "pip install failed"
fi
PY=$PYG_VENV/bin/python
mkdir -p "$WORK/runs" "$RESULTS"

# ---- datasets ------------------------------------------------------------------------------
if [[ ! -f $WORK/planted/dataset.toml ]]; then
    rm -rf "$WORK/planted"
    "$PREP" synth "$WORK/planted" --task link --nodes 5000 --relations 10 --avg-degree 20 --seed 1 >&2
fi
if [[ ! -f $WORK/cora/dataset.toml ]]; then
    rm -rf "$WORK/cora" "$WORK/cora-npy"
    mkdir -p "$WORK/cora-npy"
    "$PY" - "$WORK/cora-npy" <<'EOF'
import gzip, sys
import numpy as np
out = sys.argv[1]
with gzip.open("datasets/cora/edges.npy.gz") as f:
    e = np.load(f)
u, v = np.minimum(e[0], e[1]), np.maximum(e[0], e[1])
keep = u != v
pairs = np.unique(np.stack([u[keep], v[keep]], 1), axis=0)
rng = np.random.default_rng(0)
pairs = pairs[rng.permutation(len(pairs))]
n = len(pairs)
t = np.zeros((n, 3), dtype=np.int64)
t[:, 0], t[:, 2] = pairs[:, 0], pairs[:, 1]
a, b = int(n * 0.85), int(n * 0.90)
np.save(f"{out}/train.npy", t[:a]); np.save(f"{out}/valid.npy", t[a:b]); np.save(f"{out}/test.npy", t[b:])
print(f"cora links: {n} (train {a}, valid {b - a}, test {n - b})", file=sys.stderr)
EOF
    "$PREP" import "$WORK/cora" --triples "$WORK/cora-npy/train.npy" --valid "$WORK/cora-npy/valid.npy" \
        --test "$WORK/cora-npy/test.npy" --nodes 2708 >&2
fi

for ds in umls kinships; do
    [[ " $DATASETS " == *" $ds "* && ! -f $WORK/$ds/dataset.toml ]] || continue
    if [[ ! -f $WORK/pykeen/pykeen/datasets/$ds/train.txt ]]; then
        mkdir -p "$WORK/pykeen"
        "$PYG_VENV/bin/pip" download -q --no-deps pykeen==1.11.1 -d "$WORK/pykeen" || die "pip download pykeen failed"
        (cd "$WORK/pykeen" && python3 -m zipfile -e pykeen-1.11.1-py3-none-any.whl .) || die "cannot unpack the pykeen wheel"
    fi
    src=$WORK/pykeen/pykeen/datasets/$ds
    rm -rf "$WORK/$ds"
    "$PREP" import "$WORK/$ds" --triples "$src/train.txt" --valid "$src/valid.txt" --test "$src/test.txt" >&2
done

# ---- runs ----------------------------------------------------------------------------------
common="--dim $DIM --lr $LR --batch $BATCH --epochs $EPOCHS"
for ds in $DATASETS; do
    for model in $MODELS; do
        loss=margin
        [[ $model == complex ]] && loss=logistic
        for seed in $SEEDS; do
            echo "# $ds $model seed $seed" >&2
            "$KGE" "$WORK/$ds" --model "$model" --loss "$loss" --sides pyg --init xavier --degree-frac 0 $common \
                --seed "$seed" --eval-every "$EPOCHS" >"$WORK/runs/$ds-$model-sluice-$seed.log"
            "$PY" bench/kge_pyg.py "$WORK/$ds" --model "$model" $common --seed "$seed" \
                >"$WORK/runs/$ds-$model-pyg-$seed.log"
            "$KGE" "$WORK/$ds" --model "$model" --loss softmax --sides both --chunk 100 --negs 100 \
                --degree-frac 0.5 --init xavier $common --seed "$seed" --eval-every "$EPOCHS" \
                >"$WORK/runs/$ds-$model-marius-$seed.log"
        done
    done
done

# ---- report --------------------------------------------------------------------------------
"$PY" bench/report_kge.py "$WORK" "$RESULTS/$NAME.md" "$SEEDS" "$common" "$DATASETS" "$MODELS"
