#!/usr/bin/env bash
# bench/inmem.sh - issue 27: Sluice in memory against its own limits, and an
# older build against this one side by side. For each job (GraphSAGE mean,
# hidden 128, batch 1000, Adam 0.003, dropout 0.5, feature_buffer_mb 2048;
# fanouts [10,5] for 5 epochs and [10,10,10] for 3), for each build, with
# the page cache dropped before every run: gnnlaunch --cpu, its epoch lines
# (seconds, per-stage busy seconds) and its wall time. Then, for each job,
# bench/trainer_bench.c on the new build: the trainer's GFLOP/s per layer
# against plain sgemm of the same shapes, and the FLOP bound of an epoch
# (its training batches' dense products at the plain sgemm rate).
# bench/report_inmem.py turns the logs into the tables of
# bench/results/inmem-*.md.
#
#   BASE=/tmp/inmem-base/build bench/inmem.sh      # base vs build/
#   NOHUGE=1 BASE=... bench/inmem.sh               # and build/ with SLUICE_NO_HUGE_PAGES=1
#
# Environment (defaults): DATA (/work/bench-data/inmem-2m: `gnnprep synth
# --nodes 2M --avg-degree 15 --feat-dim 128 --classes 16 --seed 1
# --train-frac 0.05 --val-frac 0.005 --test-frac 0.005`), BASE (the older
# build tree; empty: the new one only), NEW (build), OUT (bench/work/inmem),
# JOBS ("105 101010"), REPS (1: runs of each build per job, interleaved),
# LOCK (/tmp/sluice-bench.lock: every timed run holds it), NOHUGE (1: also
# run the new build with SLUICE_NO_HUGE_PAGES=1, labelled nohuge, to
# isolate the warm start's huge pages), ALONE (1; 0: skip the sampler
# and trainer-bench runs, only gnnlaunch). Needs root for
# drop_caches. Asserts nothing about time (STYLE.md).
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DATA:-/work/bench-data/inmem-2m}
BASE=${BASE:-}
NEW=${NEW:-build}
OUT=${OUT:-bench/work/inmem}
JOBS=${JOBS:-105 101010}
REPS=${REPS:-1}
LOCK=${LOCK:-/tmp/sluice-bench.lock}
mkdir -p "$OUT"

cfg() { # job -> config file
    local job=$1 fan epochs
    case $job in
    105) fan="[10, 5]" epochs=5 ;;
    101010) fan="[10, 10, 10]" epochs=3 ;;
    *) echo "bench/inmem.sh: unknown job $job (105, 101010)" >&2; exit 2 ;;
    esac
    cat >"$OUT/job-$job.toml" <<EOF
[dataset]
path = "$DATA"
[model]
kind = "sage"
hidden = 128
fanouts = $fan
dropout = 0.5
[train]
batch_size = 1000
lr = 0.003
epochs = $epochs
[pipeline]
feature_buffer_mb = 2048
EOF
    echo "$OUT/job-$job.toml"
}

run() { # label build job rep
    local label=$1 build=$2 job=$3 rep=$4 c log envs=""
    c=$(cfg "$job")
    log=$OUT/$label-$job-$rep.log
    [[ $label == nohuge ]] && envs="SLUICE_NO_HUGE_PAGES=1 "
    {
        echo "+ load: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "+ sync; echo 3 > /proc/sys/vm/drop_caches; $envs$build/bin/gnnlaunch --cpu $c --skip-verify --run-name inmem-$label-$job"
    } >"$log"
    flock "$LOCK" env $envs bash -c "sync; echo 3 > /proc/sys/vm/drop_caches; s=\$(date +%s.%N);
        '$build/bin/gnnlaunch' --cpu '$c' --skip-verify --run-name 'inmem-$label-$job' >>'$log' 2>&1 || echo \"exit status \$?\" >>'$log';
        e=\$(date +%s.%N); awk -v s=\$s -v e=\$e 'BEGIN { printf \"+ wall_s=%.2f\\n\", e - s }' >>'$log'"
    echo "+ load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"
    grep -E '^(epoch [0-9]+/[0-9]+ loss|test_acc=|exit status|\+ wall)' "$log" | sed "s/^/$label $job: /"
}

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo "new: $NEW ($(git rev-parse --short HEAD))"
[[ -n $BASE ]] && echo "base: $BASE ($(git -C "$BASE/.." rev-parse --short HEAD 2>/dev/null || echo '?'))"
for job in $JOBS; do
    case $job in
    105) fan=10,5 ;;
    101010) fan=10,10,10 ;;
    esac
    for rep in $(seq 1 "$REPS"); do
        [[ -n $BASE ]] && run base "$BASE" "$job" "$rep"
        [[ ${NOHUGE:-0} == 1 ]] && run nohuge "$NEW" "$job" "$rep"
        run new "$NEW" "$job" "$rep"
    done
    [[ ${ALONE:-1} == 0 ]] && continue
    # the sampler alone (one thread, the topology read into memory as gnnlaunch does): edges per second and
    # per CPU second (task-clock), so that other load on the machine shows as the gap between the two
    for label in base new; do
        b=$NEW
        [[ $label == base ]] && b=$BASE
        [[ -z $b ]] && continue
        sl=$OUT/sampler-$label-$job.log
        echo "+ perf stat -x, -e task-clock $b/bin/gnn-sampler --bench $DATA --fanouts $fan --batch-size 1000 --threads 1 --seconds 5 --topology memory" >"$sl"
        flock "$LOCK" bash -c "perf stat -x, -e task-clock -o '$sl.perf' '$b/bin/gnn-sampler' --bench '$DATA' --fanouts $fan --batch-size 1000 --threads 1 --seconds 5 --topology memory >>'$sl' 2>&1"
        grep -E "^(sampled_edges_per_s|seconds)=" "$sl" | sed "s/^/sampler $label $job: /"
        grep task-clock "$sl.perf" | cut -d, -f1 | sed "s/^/sampler $label $job: task_clock_ms=/"
    done
    # the trainer alone, its rows in small pages and in huge pages (as the warm start leaves them)
    for huge in 0 1; do
        tb=$OUT/trainer-bench-$job.log
        [[ $huge == 1 ]] && tb=$OUT/trainer-bench-$job-huge.log
        echo "+ $NEW/bin/trainer-bench $DATA --fanouts $fan --batches 30 --warmup 3 --huge $huge" >"$tb"
        flock "$LOCK" "$NEW/bin/trainer-bench" "$DATA" --fanouts "$fan" --batches 30 --warmup 3 --huge $huge >>"$tb" 2>&1
        sed "s/^/trainer-bench $job huge=$huge: /" "$tb"
    done
done
