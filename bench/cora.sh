#!/usr/bin/env bash
# bench/cora.sh - Cora's standard split with the three configs of
# configs/cora-*.toml (PyG's example settings), test accuracy after the
# last epoch over seeds 0..9: mean and standard deviation, with the
# configs' weight decay and with none (issue 26's two columns).
#
#   bench/cora.sh [BUILD_DIR]          # make cora first (data/cora)
#
# Environment (defaults): SEEDS ("0 1 2 3 4 5 6 7 8 9"), MODELS ("gcn sage
# gat"), DECAYS ("config 0": the config's weight_decay, then 0), WORK
# (bench/work). Prints a markdown table and each run's final line; it
# asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD:-build}}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7 8 9}
MODELS=${MODELS:-gcn sage gat}
DECAYS=${DECAYS:-config 0}
WORK=${WORK:-bench/work}
bin=$BUILD/bin
[[ -x $bin/gnnlaunch ]] || { echo "bench/cora.sh: $bin/gnnlaunch not found: build first" >&2; exit 2; }
[[ -f data/cora/dataset.toml ]] || { echo "bench/cora.sh: data/cora not found: run make cora" >&2; exit 2; }
export SLUICE_STAGE_DIR=$bin
mkdir -p "$WORK"

echo "| model | weight decay | test accuracy, mean ± std over seeds ($SEEDS) | min | max |"
echo "|---|---|---|---|---|"
for m in $MODELS; do
    for wd in $DECAYS; do
        accs=()
        for s in $SEEDS; do
            set_wd=()
            [[ $wd != config ]] && set_wd=(--set "train.weight_decay=$wd")
            log=$WORK/cora-$m-$wd-$s.log
            "$bin/gnnlaunch" --cpu "configs/cora-$m.toml" --set "train.seed=$s" "${set_wd[@]}" \
                --run-name "cora-$m-$wd-$s" --set "train.checkpoint_dir=\"$WORK/ck-cora-$m-$wd-$s\"" >"$log" 2>&1 ||
                { echo "bench/cora.sh: run failed, see $log" >&2; exit 1; }
            accs+=("$(awk -F'[= ]' '/^test_acc=/ { v = $2 } END { print v }' "$log")")
            rm -rf "$WORK/ck-cora-$m-$wd-$s"
        done
        label=$wd
        [[ $wd == config ]] && label="$(awk -F' *= *' '/^weight_decay/ { print $2 }' "configs/cora-$m.toml") (config)"
        printf '%s\n' "${accs[@]}" | awk -v m="$m" -v w="$label" '
            { x[NR] = $1; s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1 }
            END { mean = s / NR; for (i = 1; i <= NR; i++) v += (x[i] - mean) ^ 2;
                  printf "| %s | %s | %.4f ± %.4f | %.4f | %.4f |\n", m, w, mean, sqrt(v / (NR > 1 ? NR - 1 : 1)), lo, hi }'
    done
done
