#!/usr/bin/env bash
# bench/link_ooc.sh - link prediction with the node table out of core
# (issue 23, docs/link.md "Out of core") against the same run in memory:
# a synthetic knowledge graph (gnnprep synth --task link) whose node
# embeddings are SCALE x a memory cap, one `gnnlaunch --cpu` run in memory
# (no cap) and one per p:c of SETTINGS with pipeline.mode = "partitions"
# inside a fresh cgroup of CAP (page cache dropped first), the same model,
# batches and epochs. Reports per run: training edges/s of each epoch (the
# epoch line's edges_per_s: training and the end-of-epoch flush, not the
# evaluation or the checkpoint), partitions loaded per epoch against
# BETA's count and Marius's lower bound, bytes read and written per
# epoch, the cgroup's peak, and the test MRR.
#
#   flock /tmp/sluice-bench.lock bench/link_ooc.sh               # CAP 256M, NODES 2M, DIM 128
#   CAP=256M SETTINGS="128:10" EPOCHS=2 bench/link_ooc.sh
#
# Environment (defaults): BUILD (build), WORK (bench/work/link-ooc), CAP
# (256M), NODES (2M), DEGREE (8), RELATIONS (50), DIM (128), SETTINGS
# ("128:10", p:c), EPOCHS (2), BATCH (5000), NEGS (100), CHUNK (100),
# SAMPLED (100: test MRR against that many uniform nodes, raw). Prints
# key=value lines and a markdown table on stdout. Reports; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/link_ooc.sh
source bench/lib.sh

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work/link-ooc}
CAP=${CAP:-256M}
NODES=${NODES:-2M}
DEGREE=${DEGREE:-8}
RELATIONS=${RELATIONS:-50}
DIM=${DIM:-128}
SETTINGS=${SETTINGS:-"128:10"}
EPOCHS=${EPOCHS:-2}
BATCH=${BATCH:-5000}
NEGS=${NEGS:-100}
CHUNK=${CHUNK:-100}
SAMPLED=${SAMPLED:-100}

lib_need_bins "$BUILD" gnnprep gnnlaunch
lib_cg_detect
trap lib_cg_remove EXIT
cap_bytes=$(lib_bytes "$CAP")
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
ds=$WORK/kg-$NODES-$DEGREE
if [[ ! -f $ds/dataset.toml ]]; then
    lib_log "making $ds"
    "$BUILD/bin/gnnprep" synth "$ds" --task link --nodes "$NODES" --relations "$RELATIONS" --avg-degree "$DEGREE" \
        --valid-frac 0.0005 --test-frac 0.0005 --seed 1 >&2
fi
nodes=$(sed -n 's/^nodes = //p' "$ds/dataset.toml")
table=$((nodes * DIM * 4))
echo "cap=$CAP cap_bytes=$cap_bytes nodes=$nodes dim=$DIM embedding_table_bytes=$table table_over_cap=$(python3 -c "print(round($table / $cap_bytes, 2))")"
echo "with_adagrad_bytes=$((2 * table))"
cfg=$WORK/link.toml
cat >"$cfg" <<EOF
[dataset]
path = "$ds"
[model]
kind = "distmult"
hidden = $DIM
[train]
epochs = $EPOCHS
eval_every = 1000
batch_size = $BATCH
lr = 0.1
seed = 1
[link]
loss = "softmax"
negatives = $NEGS
chunk = $CHUNK
degree_frac = 0.5
sides = "both"
eval = "raw"
eval_sampled = $SAMPLED
EOF

run() { # NAME CAPPED(0/1) set-args...
    local name=$1 capped=$2
    shift 2
    local ck=$WORK/ck-$name log=$WORK/$name.log
    rm -rf "$ck"
    lib_drop_caches "$ds"/*.bin
    if [[ $capped == 1 ]]; then
        lib_cg_create "$cap_bytes"
    fi
    local t0 rc=0
    t0=$(date +%s.%N)
    lib_cg_exec "$BUILD/bin/gnnlaunch" --cpu "$cfg" --set "train.checkpoint_dir=\"$ck\"" "$@" >"$log" 2>&1 || rc=$?
    local wall
    wall=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
    local cg='{"peak_bytes": null}'
    [[ $capped == 1 ]] && cg=$(lib_cg_summary)
    lib_cg_remove
    echo "run=$name exit=$rc wall_s=$wall cgroup=$cg"
    grep -E '^(epoch [0-9]+/|test_mrr=)' "$log" | sed 's/^/  /'
    grep -E 'out of core' "$log" | grep -v 'batches/s' | sed 's/^/  /' || true
    rm -rf "$ck"
}

echo "machine=$(lib_machine_json "$BUILD" "$WORK" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(json.dumps({k: m[k] for k in ("cpu_model","cores","mem_total_bytes","kernel","commit_short","dirty","build_type")} | {"disk": m["disk"]["model"] or m["disk"]["device"]}))')"
echo "cap_method=$(lib_cg_describe)"
echo "drop_caches=$(lib_drop_method)"
run in-memory 0
for s in $SETTINGS; do
    p=${s%%:*}
    c=${s##*:}
    run "ooc-p$p-c$c" 1 --set 'pipeline.mode="partitions"' --set "pipeline.partitions=$p" \
        --set "pipeline.buffer_partitions=$c"
done
