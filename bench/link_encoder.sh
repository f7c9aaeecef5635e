#!/usr/bin/env bash
# bench/link_encoder.sh - link prediction with the GNN encoder
# (model.encoder = "sage", docs/link.md "The GNN encoder") against the
# decoder alone: test MRR and training edges/s of `gnnlaunch --cpu` with
# encoder none, sage with one layer (fanouts [F1]) and sage with two
# layers ([F1, F2]), the same DistMult, batches and epochs, on
#   planted  gnnprep synth --task link (10,000 nodes, 20 relations, degree 20)
#   cora     Cora's 5278 undirected citation links (datasets/cora) as one-relation triples, 85/5/10 split
#   umls     UMLS (135 nodes, 46 relations, standard split), when UMLS_DIR holds its train/valid/test.txt
# then out of core: a larger synthetic graph whose embedding table is
# OOC_SCALE x a cgroup cap, the one-layer encoder in memory (no cap) and
# with pipeline.mode = "partitions" (COMET, p:c of OOC_SETTING) inside a
# fresh cgroup of CAP.
#
#   flock /tmp/sluice-bench.lock bench/link_encoder.sh
#
# Environment (defaults): BUILD (build), WORK (bench/work/link-encoder),
# DIM (100), EPOCHS (5), F1 (10), F2 (5), SEED (1), UMLS_DIR (bench/work/kge/
# pykeen/pykeen/datasets/umls), PARTS ("planted cora umls ooc"), CAP (160M),
# OOC_NODES (1M), OOC_DEGREE (3), OOC_DIM (64), OOC_SETTING (64:4),
# OOC_EPOCHS (2), OOC_BATCH (1000). Prints key=value lines; reports,
# asserts nothing. The cap must hold, beside the buffer's c + 1
# partitions, the encoder's graph (about 8 bytes a triple and 12 a node)
# and one batch's worst-case neighbourhood (the sampled rows and the
# layers' activations: with a batch of 1000 and fanouts [10], about 33,000
# rows of OOC_DIM floats, a few times over).
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/link_encoder.sh
source bench/lib.sh

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work/link-encoder}
DIM=${DIM:-100}
EPOCHS=${EPOCHS:-5}
F1=${F1:-10}
F2=${F2:-5}
SEED=${SEED:-1}
UMLS_DIR=${UMLS_DIR:-bench/work/kge/pykeen/pykeen/datasets/umls}
PARTS=${PARTS:-"planted cora umls ooc"}
CAP=${CAP:-160M}
OOC_NODES=${OOC_NODES:-1M}
OOC_DEGREE=${OOC_DEGREE:-3}
OOC_DIM=${OOC_DIM:-64}
OOC_SETTING=${OOC_SETTING:-64:4}
OOC_EPOCHS=${OOC_EPOCHS:-2}
OOC_BATCH=${OOC_BATCH:-1000}

lib_need_bins "$BUILD" gnnprep gnnlaunch
PREP=$BUILD/bin/gnnprep
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

echo "machine=$(lib_machine_json "$BUILD" "$WORK" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(json.dumps({k: m[k] for k in ("cpu_model","cores","mem_total_bytes","kernel","commit_short","dirty","build_type")}))')"

# ---- datasets ------------------------------------------------------------------------------
if [[ ! -f $WORK/planted/dataset.toml ]]; then
    "$PREP" synth "$WORK/planted" --task link --nodes 10000 --relations 20 --avg-degree 20 --seed 1 >&2
fi
if [[ " $PARTS " == *" cora "* && ! -f $WORK/cora/dataset.toml ]]; then
    rm -rf "$WORK/cora" "$WORK/cora-npy"
    mkdir -p "$WORK/cora-npy"
    # the standard library only: read edges.npy.gz, write int64 .npy triples
    python3 - "$WORK/cora-npy" <<'EOF'
import ast, gzip, random, struct, sys
out = sys.argv[1]
with gzip.open("datasets/cora/edges.npy.gz") as f:
    raw = f.read()
hl = struct.unpack("<H", raw[8:10])[0]
hdr = ast.literal_eval(raw[10:10 + hl].decode())
rows, cols = hdr["shape"]
size = {"<i8": 8, "<i4": 4}[hdr["descr"]]
fmt = "<%d%s" % (rows * cols, "q" if size == 8 else "i")
vals = struct.unpack(fmt, raw[10 + hl:10 + hl + rows * cols * size])
src, dst = vals[:cols], vals[cols:]
pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(src, dst) if a != b})
random.Random(0).shuffle(pairs)
n = len(pairs)
a, b = int(n * 0.85), int(n * 0.90)
def save(name, ps):
    h = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d, 3), }" % len(ps)
    h += " " * (127 - 10 - len(h)) + "\n"
    with open(f"{out}/{name}.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        for u, v in ps:
            f.write(struct.pack("<qqq", u, 0, v))
save("train", pairs[:a]); save("valid", pairs[a:b]); save("test", pairs[b:])
print(f"cora links: {n} (train {a}, valid {b - a}, test {n - b})", file=sys.stderr)
EOF
    "$PREP" import "$WORK/cora" --triples "$WORK/cora-npy/train.npy" --valid "$WORK/cora-npy/valid.npy" \
        --test "$WORK/cora-npy/test.npy" --nodes 2708 >&2
fi
if [[ " $PARTS " == *" umls "* && ! -f $WORK/umls/dataset.toml ]]; then
    if [[ -f $UMLS_DIR/train.txt ]]; then
        "$PREP" import "$WORK/umls" --triples "$UMLS_DIR/train.txt" --valid "$UMLS_DIR/valid.txt" \
            --test "$UMLS_DIR/test.txt" >&2
    else
        lib_log "no $UMLS_DIR/train.txt (bench/kge.sh fetches PyKEEN's copy): umls skipped"
    fi
fi

# ---- in memory: none vs sage, 1 and 2 layers ------------------------------------------------
# run NAME DATASET EPOCHS set-args...: one gnnlaunch, its epoch lines and final line
run() {
    local name=$1 ds=$2 epochs=$3
    shift 3
    local ck=$WORK/ck-$name log=$WORK/$name.log cfg=$WORK/$name.toml rc=0
    cat >"$cfg" <<EOF
[dataset]
path = "$ds"
[model]
kind = "distmult"
hidden = $DIM
[train]
epochs = $epochs
eval_every = 1000
batch_size = 1000
lr = 0.1
seed = $SEED
checkpoint_dir = "$ck"
[link]
negatives = 100
chunk = 100
degree_frac = 0.5
eval = "filtered"
EOF
    rm -rf "$ck"
    "$BUILD/bin/gnnlaunch" --cpu "$cfg" "$@" >"$log" 2>&1 || rc=$?
    local eps
    eps=$(sed -n 's/^epoch .* edges_per_s=\([0-9]*\).*/\1/p' "$log" | tail -n +2 | tr '\n' ' ')
    echo "run=$name exit=$rc edges_per_s_after_first=[${eps% }] $(grep '^test_mrr=' "$log" || echo 'no final line')"
    grep -E 'encoder: [0-9]+ nodes' "$log" | tail -1 | sed 's/^/  /' || true
    rm -rf "$ck"
}

for ds in planted cora umls; do
    [[ " $PARTS " == *" $ds "* && -f $WORK/$ds/dataset.toml ]] || continue
    ep=$EPOCHS
    [[ $ds != planted ]] && ep=$((EPOCHS * 6)) # small graphs: more, shorter epochs
    run "$ds-none" "$WORK/$ds" "$ep"
    run "$ds-sage1" "$WORK/$ds" "$ep" --set model.encoder=sage --set "model.fanouts=[$F1]"
    run "$ds-sage2" "$WORK/$ds" "$ep" --set model.encoder=sage --set "model.fanouts=[$F1, $F2]"
done

# ---- out of core: the one-layer encoder in memory vs COMET under a cap ----------------------
if [[ " $PARTS " == *" ooc "* ]]; then
    lib_cg_detect
    trap lib_cg_remove EXIT
    cap_bytes=$(lib_bytes "$CAP")
    ds=$WORK/ooc-$OOC_NODES-$OOC_DEGREE
    if [[ ! -f $ds/dataset.toml ]]; then
        "$PREP" synth "$ds" --task link --nodes "$OOC_NODES" --relations 50 --avg-degree "$OOC_DEGREE" \
            --valid-frac 0.001 --test-frac 0.001 --seed 1 >&2
    fi
    nodes=$(sed -n 's/^nodes = //p' "$ds/dataset.toml")
    table=$((nodes * OOC_DIM * 4))
    echo "cap=$CAP cap_method=$(lib_cg_describe) nodes=$nodes dim=$OOC_DIM embedding_table_bytes=$table" \
         "table_over_cap=$(python3 -c "print(round($table / $cap_bytes, 2))") with_adagrad_bytes=$((2 * table))"
    cfg=$WORK/ooc.toml
    cat >"$cfg" <<EOF
[dataset]
path = "$ds"
[model]
kind = "distmult"
hidden = $OOC_DIM
encoder = "sage"
fanouts = [$F1]
[train]
epochs = $OOC_EPOCHS
eval_every = 1000
batch_size = $OOC_BATCH
lr = 0.1
seed = $SEED
[link]
negatives = 100
chunk = 100
eval = "raw"
eval_sampled = 100
EOF
    ooc() { # NAME CAPPED set-args...
        local name=$1 capped=$2
        shift 2
        local ck=$WORK/ck-$name log=$WORK/$name.log rc=0
        rm -rf "$ck"
        lib_drop_caches "$ds"/*.bin
        [[ $capped == 1 ]] && lib_cg_create "$cap_bytes"
        local t0
        t0=$(date +%s.%N)
        lib_cg_exec "$BUILD/bin/gnnlaunch" --cpu "$cfg" --set "train.checkpoint_dir=\"$ck\"" "$@" >"$log" 2>&1 || rc=$?
        local wall cg='{"peak_bytes": null}'
        wall=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
        [[ $capped == 1 ]] && cg=$(lib_cg_summary)
        lib_cg_remove
        echo "run=$name exit=$rc wall_s=$wall cgroup=$cg"
        grep -E '^(epoch [0-9]+/|test_mrr=)' "$log" | sed 's/^/  /' || true
        grep -E 'out of core|encoder: [0-9]+ nodes' "$log" | grep -v 'batches/s' | sed 's/^/  /' || true
        rm -rf "$ck"
    }
    ooc ooc-in-memory 0
    p=${OOC_SETTING%%:*}
    c=${OOC_SETTING##*:}
    ooc "ooc-comet-p$p-c$c" 1 --set 'pipeline.mode="partitions"' --set "pipeline.partitions=$p" \
        --set "pipeline.buffer_partitions=$c"
fi
