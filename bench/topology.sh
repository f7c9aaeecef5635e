#!/usr/bin/env bash
# bench/topology.sh - the sampler's topology modes (pipeline.topology,
# docs/architecture.md "Topology"), side by side in one run:
#
#   1. under a memory cap (CAP, 1 GiB) on a graph whose indices.bin alone is
#      more than twice the cap (BIG: gnnprep synth --nodes 2M --avg-degree
#      300 --feat-dim 16, 2.2 GiB of ids; made once under
#      $DATA/.gen.lock): sampling alone (gnn-sampler --bench, THREADS
#      threads, SECONDS s) and training (gnnlaunch --cpu, EPOCHS epochs)
#      with the topology mapped (mmap) and in the neighbour cache with
#      direct reads (cache, the budget gnnlaunch's plan picks under the cap,
#      which is what "auto" resolves to there);
#      and, as the reference, training with the topology in memory and no cap;
#   2. without a cap on SMALL (/work/bench-data/inmem-2m, issue 27's
#      dataset): the first epoch's sampler busy time with mmap and memory.
# ONLY=cache runs the neighbour cache's rows alone: training under the cap
# on BIG and on BIG128 (the same graph with 128-dim features, the
# out-of-core benchmarks' row width, 1 GiB of them), and sampling alone
# with and without the cross-batch prefetch (--no-prefetch) and the rounds
# of at most 128 reads (--round-reads 100000: bounded by the buffer only).
# The page cache is dropped before every run (lib.sh). Each training run's
# epoch lines (seconds, busy seconds per stage) go into the table; raw logs
# stay in WORK.
#
#   flock /tmp/sluice-bench.lock bench/topology.sh
#
# Environment: BUILD (build), DATA (/work/bench-data), WORK (bench/work/topology),
# RESULTS (bench/results), NAME (topology-DATE), CAP (1G), EPOCHS (3),
# THREADS (2), SAMPLE_SECONDS (20), SMALL (DATA/inmem-2m), ONLY (all | cache),
# REPEAT (1; with ONLY=cache: the four sampling runs repeated in turn, so
# that the machine's drift falls on each alike).
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/topology.sh
source bench/lib.sh

BUILD=${BUILD:-build}
DATA=${DATA:-/work/bench-data}
WORK=${WORK:-bench/work/topology}
RESULTS=${RESULTS:-bench/results}
NAME=${NAME:-topology-$(date -u +%Y-%m-%d)}
CAP=${CAP:-1G}
EPOCHS=${EPOCHS:-3}
THREADS=${THREADS:-2}
SECONDS_=${SAMPLE_SECONDS:-20}
SMALL=${SMALL:-$DATA/inmem-2m}
BIG=$DATA/topo-2m-d300
BIG_SYNTH=(synth "$BIG" --nodes 2M --avg-degree 300 --feat-dim 16 --classes 16 --seed 1 --train-frac 0.02
    --val-frac 0.001 --test-frac 0.001 --threads 1)
ONLY=${ONLY:-all}
[[ $ONLY == all || $ONLY == cache ]] || lib_die "ONLY is all or cache, not '$ONLY'"
BIG128=$DATA/topo-2m-d300-f128
BIG128_SYNTH=(synth "$BIG128" --nodes 2M --avg-degree 300 --feat-dim 128 --classes 16 --seed 1 --train-frac 0.02
    --val-frac 0.001 --test-frac 0.001 --threads 1)

lib_need_tools jq numfmt
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-sampler gnn-extractor gnn-trainer gnn-releaser
GL=$BUILD/bin/gnnlaunch
SB=$BUILD/bin/gnn-sampler
CAP_BYTES=$(numfmt --from=iec "$CAP")
mkdir -p "$WORK" "$RESULTS"
WORK=$(realpath "$WORK")

flock "$DATA/.gen.lock" bash -c "test -f '$BIG/dataset.toml' || '$BUILD/bin/gnnprep' ${BIG_SYNTH[*]}"
[[ $ONLY == cache ]] || [[ -f $SMALL/dataset.toml ]] || lib_die "$SMALL is missing (issue 27's dataset, see helper notes)"
[[ $ONLY == all ]] || flock "$DATA/.gen.lock" bash -c "test -f '$BIG128/dataset.toml' || '$BUILD/bin/gnnprep' ${BIG128_SYNTH[*]}"

lib_cg_detect
RUN_IDS=()
cleanup() {
    lib_cg_remove
    lib_shm_sweep "${RUN_IDS[@]}" >/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The training job (a config file per dataset).
job() { # DS FANOUTS FB_LINE
    cat <<EOF
[dataset]
path = "$1"
[model]
kind = "sage"
layers = 2
hidden = 128
fanouts = $2
dropout = 0.5
[train]
batch_size = 1000
lr = 0.003
seed = 1
[pipeline]
$3
EOF
}
job "$BIG" "[10, 10]" "" >"$WORK/big.toml"
job "$BIG128" "[10, 10]" "" >"$WORK/big128.toml"
job "$SMALL" "[10, 5]" "feature_buffer_mb = 2048" >"$WORK/small.toml"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# One gnnlaunch run: ID CAP(0 = none) CFG set-args...
train() {
    local id=$1 cap=$2 cfg=$3
    shift 3
    local cmd=("$GL" --cpu "$cfg" --epochs "$EPOCHS" --skip-verify --set "train.checkpoint_dir=\"$WORK/ck-$id\"" "$@")
    printf '%q ' "${cmd[@]}" >"$WORK/$id.cmd"
    lib_drop_caches
    [[ $cap == 0 ]] || lib_cg_create "$cap"
    local rc=0
    lib_cg_exec "${cmd[@]}" >"$WORK/$id.log" 2>&1 </dev/null || rc=$?
    lib_cg_summary >"$WORK/$id.cg.json"
    lib_cg_remove
    local rid
    rid=$(lib_run_id "$WORK/$id.log")
    [[ -n $rid ]] && RUN_IDS+=("$rid")
    rm -rf "$WORK/ck-$id"
    [[ $rc == 0 ]] || { tail -5 "$WORK/$id.log" >&2; lib_die "run $id failed ($rc)"; }
}

# One gnn-sampler --bench under the cap: ID args...
sample() {
    local id=$1
    shift
    local cmd=("$SB" --bench "$BIG" --fanouts 10,10 --batch-size 1000 --threads "$THREADS" --seconds "$SECONDS_" "$@")
    printf '%q ' "${cmd[@]}" >"$WORK/$id.cmd"
    lib_drop_caches
    lib_cg_create "$CAP_BYTES"
    local rc=0
    lib_cg_exec "${cmd[@]}" >"$WORK/$id.log" 2>&1 </dev/null || rc=$?
    lib_cg_summary >"$WORK/$id.cg.json"
    lib_cg_remove
    [[ $rc == 0 ]] || { tail -5 "$WORK/$id.log" >&2; lib_die "sampler bench $id failed ($rc)"; }
}

kv() { sed -n "s/^$2=//p" "$WORK/$1.log" | head -1; }
# "epoch K/E ... seconds=S ... | busy s: sampler A extractor B trainer C releaser D" -> "S A B C D"
epoch() { # ID K
    sed -n "s|^epoch $2/[0-9]* .*seconds=\([0-9.]*\) .*busy s: sampler \([0-9.]*\) extractor \([0-9.]*\) trainer \([0-9.]*\) releaser \([0-9.]*\).*|\1 \2 \3 \4 \5|p" \
        "$WORK/$1.log" | head -1
}
peak() { jq -r '.peak_bytes // "n/a"' "$WORK/$1.cg.json" | numfmt --to=iec 2>/dev/null || echo n/a; }

# 1. under the cap: training first (its plan names the cache's budget)
train big-cache "$CAP_BYTES" "$WORK/big.toml" --set pipeline.topology=auto
CACHE_MB=$(sed -n 's/.*pipeline.neighbour_cache_mb = \([0-9]*\).*/\1/p' "$WORK/big-cache.log" | head -1)
grep -q 'pipeline.topology = "cache", chosen' "$WORK/big-cache.log" || lib_die "auto did not choose cache under $CAP"
if [[ $ONLY == cache ]]; then
    train big128-cache "$CAP_BYTES" "$WORK/big128.toml" --set pipeline.topology=auto
    grep -q 'pipeline.topology = "cache", chosen' "$WORK/big128-cache.log" || lib_die "auto did not choose cache under $CAP"
    # the stage's reads (prefetch, rounds of 128 reads) against each half and the earlier code (neither)
    for ((i = 1; i <= ${REPEAT:-1}; i++)); do
        sample smp-cache-$i --topology cache --cache-mb "$CACHE_MB"
        sample smp-cache-noprefetch-$i --topology cache --cache-mb "$CACHE_MB" --no-prefetch
        sample smp-cache-bigrounds-$i --topology cache --cache-mb "$CACHE_MB" --round-reads 100000
        sample smp-cache-neither-$i --topology cache --cache-mb "$CACHE_MB" --no-prefetch --round-reads 100000
    done
else
    train big-mmap "$CAP_BYTES" "$WORK/big.toml" --set pipeline.topology=mmap
    sample smp-cache --topology cache --cache-mb "$CACHE_MB"
    sample smp-mmap --topology mmap
    # reference: the same job with the topology in memory and no cap (what sampling costs without any topology I/O)
    train big-memory 0 "$WORK/big.toml" --set pipeline.topology=memory
    # 2. no cap, the in-memory dataset: first epoch, mmap against memory
    train small-mmap 0 "$WORK/small.toml" --set pipeline.topology=mmap
    train small-memory 0 "$WORK/small.toml" --set pipeline.topology=memory
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

{
    echo "## Raw results ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD))"
    echo
    echo "load average before / after: $LOAD_BEFORE / $LOAD_AFTER"
    echo
    echo "### Sampling alone under the $CAP cap ($BIG, fanouts 10,10, batch 1000, $THREADS threads, ${SECONDS_} s)"
    echo
    echo "| topology | open s | batches/s | sampled edges/s | lists read directly | of them read ahead | reads a round | bytes read | cgroup peak |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    SMP=(mmap cache)
    if [[ $ONLY == cache ]]; then
        SMP=()
        for ((i = 1; i <= ${REPEAT:-1}; i++)); do SMP+=(cache-$i cache-noprefetch-$i cache-bigrounds-$i cache-neither-$i); done
    fi
    for m in "${SMP[@]}"; do
        echo "| $m | $(kv smp-$m topology_open_s) | $(kv smp-$m batches_per_s) | $(kv smp-$m sampled_edges_per_s) |" \
            "$(kv smp-$m lists_read) | $(kv smp-$m lists_prefetched) | $(kv smp-$m round_reads) | $(kv smp-$m list_bytes_read | numfmt --to=iec) | $(peak smp-$m) |"
    done
    echo
    echo "### Training under the $CAP cap (sage [10,10], batch 1000, $EPOCHS epochs)"
    echo
    echo "(big: $BIG; big128: $BIG128; memory: the reference, no cap)"
    echo
    echo "| run | epoch | seconds | busy s: sampler | extractor | trainer | releaser | busiest |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    RUNS=(big-mmap big-cache big-memory)
    [[ $ONLY == cache ]] && RUNS=(big-cache big128-cache)
    for m in "${RUNS[@]}"; do
        for ((k = 1; k <= EPOCHS; k++)); do
            read -r s a b c d <<<"$(epoch $m $k)"
            busiest=$(printf 'sampler %s\nextractor %s\ntrainer %s\nreleaser %s\n' "$a" "$b" "$c" "$d" | sort -k2,2gr | head -1 | cut -d' ' -f1)
            echo "| $m | $k | $s | $a | $b | $c | $d | $busiest |"
        done
    done
    echo
    for m in "${RUNS[@]}"; do
        [[ $m == *cache ]] || continue
        echo "$m plan: $(grep -m1 '^gnnlaunch: memory:' "$WORK/$m.log"); cgroup peak $(peak $m)"
        echo
        echo "$m sampler: $(grep -m1 'gnn-sampler rank 0: topology' "$WORK/$m.log")"
        echo
        echo "$m reads: $(grep -m1 'gnn-sampler.*in-neighbour lists read directly' "$WORK/$m.log")"
        echo
    done
    if [[ $ONLY == all ]]; then
    echo "### First epoch without a cap ($SMALL, sage [10,5], batch 1000, feature_buffer_mb 2048)"
    echo
    echo "| topology | epoch | seconds | busy s: sampler | extractor | trainer | releaser |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    for m in mmap memory; do
        for ((k = 1; k <= 2; k++)); do
            read -r s a b c d <<<"$(epoch small-$m $k)"
            echo "| $m | $k | $s | $a | $b | $c | $d |"
        done
    done
    echo
    echo "memory run's sampler: $(grep -m1 'gnn-sampler rank 0: topology' "$WORK/small-memory.log")"
    echo
    fi
    echo "### Commands"
    echo
    echo '```'
    IDS=(big-cache big-mmap big-memory smp-cache smp-mmap small-mmap small-memory)
    [[ $ONLY == cache ]] && IDS=(big-cache big128-cache "${SMP[@]/#/smp-}")
    for id in "${IDS[@]}"; do
        cat "$WORK/$id.cmd"
        echo
    done
    echo '```'
} | tee "$WORK/$NAME.raw.md"
echo "$LIB_PROG: raw results in $WORK/$NAME.raw.md" >&2
