#!/usr/bin/env bash
# Builds torch-scatter and torch-sparse (CPU operators only: PyG's
# NeighborLoader samples on the CPU) from the source archives that
# scripts/gpu-pysrc.sh downloaded, against this machine's python3 and
# torch, into PREFIX, so that bench/peers.py --system pyg runs on a GPU
# machine whose image has PyG without pyg-lib or torch-sparse. Nothing is
# installed into the image: use PYTHONPATH=PREFIX.
#
#   scripts/gpu-pyg.sh SRC_DIR PREFIX [JOBS]
#
# Exit: 0 built (or already importable: nothing done), 1 a build failed
# (its log is PREFIX/build-*.log), 2 usage.
set -uo pipefail
src=${1:-} prefix=${2:-} jobs=${3:-$(nproc)}
if [[ -z $src || -z $prefix || $src == -h || $src == --help ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    [[ $src == -h || $src == --help ]] && exit 0
    exit 2
fi
mkdir -p "$prefix" || exit 2
prefix=$(cd "$prefix" && pwd)
if PYTHONPATH=$prefix${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import torch_sparse, torch_scatter' 2>/dev/null; then
    echo "gpu-pyg: torch_scatter and torch_sparse import already (PYTHONPATH=$prefix)"
    exit 0
fi
python3 -c 'import torch' 2>/dev/null || { echo "gpu-pyg: python3 has no torch" >&2; exit 1; }
for name in torch_scatter torch_sparse; do
    archive=$(ls "$src"/$name-*.tar.gz 2>/dev/null | head -1)
    [[ -n $archive ]] || { echo "gpu-pyg: no $name archive in $src (scripts/gpu-pysrc.sh fetches them)" >&2; exit 2; }
    t0=$(date +%s)
    # FORCE_ONLY_CPU: no CUDA kernels (not used by the sampler; a CUDA build takes many minutes)
    if ! FORCE_ONLY_CPU=1 MAX_JOBS=$jobs PYTHONPATH=$prefix${PYTHONPATH:+:$PYTHONPATH} \
        python3 -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir --target "$prefix" \
        "$archive" >"$prefix/build-$name.log" 2>&1; then
        echo "gpu-pyg: building $name failed; the end of $prefix/build-$name.log:" >&2
        tail -n 25 "$prefix/build-$name.log" >&2
        exit 1
    fi
    echo "gpu-pyg: built $name in $(($(date +%s) - t0)) s"
done
PYTHONPATH=$prefix${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import torch_sparse, torch_geometric.typing as t; print("gpu-pyg: torch_sparse", torch_sparse.__version__, "WITH_TORCH_SPARSE", t.WITH_TORCH_SPARSE)' || exit 1
echo "gpu-pyg: export PYTHONPATH=$prefix\${PYTHONPATH:+:\$PYTHONPATH}"
