#!/usr/bin/env bash
# bench/cache_policy.sh - the feature buffer's eviction policies (issue 18)
# side by side under a memory cap, on bench/outofcore.sh's datasets, beside
# Belady's optimum from `gnnprep cache-sim` on the rows the runs requested.
# One command; it writes RESULTS/NAME.md (and keeps the raw files in WORK).
#
#   flock /tmp/sluice-bench.lock bench/cache_policy.sh        # ~15 min on a 2-core VM
#
# Per dataset of SCALES (features = SCALE x CAP, 128 x f32 rows; made once
# under WORK with bench/lib.sh's lib_dataset, the same datasets as
# bench/outofcore.sh): for each policy of POLICIES, drop the page cache,
# make a cgroup with the cap, run `gnnlaunch --cpu` in it with --metrics
# (the first policy's run also with pipeline.trace_rows), then replay that
# trace with `gnnprep cache-sim` at the runs' slot count for lru, static,
# lookahead at each window of WINDOWS and Belady.
#
# Environment (defaults):
#   BUILD (build)  WORK (/work/bench-data/ooc)  RESULTS (bench/results)
#   NAME (cache-policy-DATE)   CAP (1G)
#   FB_MB (auto)               feature buffer of every run; auto: per dataset, the largest that the
#                              costliest policy of POLICIES (its hint log and node table included) fits
#                              in the cap beside what gnnlaunch plans for the rest (arenas, topology,
#                              margin), so that every policy runs with the same slots under the same cap
#   LOOKAHEAD_MB (40)          pipeline.lookahead_mb of the lookahead runs (the hint log's budget; a
#                              window whose rows exceed it announces only what fits)
#   SCALES ("2 4")             POLICIES ("lru static lookahead:8 lookahead:32 lookahead:128")
#                              (POLICY[:W]; W = pipeline.lookahead)
#   WINDOWS (8,32,128)         cache-sim's lookahead windows
#   EPOCHS (4)                 epoch 1 is the cold start, the last one evaluates;
#                              2..EPOCHS-1 are measured
#   TRAIN_BATCHES (32) EVAL_BATCHES (1) BATCH (1000) FANOUTS ([10,10]) DEGREE (10) SEED (1)
#   SAMPLERS (2) EXTRACTORS (2) IO_DEPTH (64)
# Exit: 0 done, 2 bad usage or missing tools, 1 a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/cache_policy.sh
source bench/lib.sh

CMDLINE="$0${*:+ $*}"
ENV_SET=""
for v in BUILD WORK RESULTS NAME CAP FB_MB LOOKAHEAD_MB SCALES POLICIES WINDOWS EPOCHS TRAIN_BATCHES EVAL_BATCHES BATCH \
    FANOUTS DEGREE SEED SAMPLERS EXTRACTORS IO_DEPTH; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
[[ $# -eq 0 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=${BUILD:-build}
WORK=${WORK:-/work/bench-data/ooc}
RESULTS=${RESULTS:-bench/results}
NAME=${NAME:-cache-policy-$(date -u +%Y-%m-%d)}
CAP=${CAP:-1G}
FB_MB=${FB_MB:-auto}
LOOKAHEAD_MB=${LOOKAHEAD_MB:-40}
SCALES=${SCALES:-2 4}
POLICIES=${POLICIES:-lru static lookahead:8 lookahead:32 lookahead:128}
WINDOWS=${WINDOWS:-8,32,128}
EPOCHS=${EPOCHS:-4}
TRAIN_BATCHES=${TRAIN_BATCHES:-32}
EVAL_BATCHES=${EVAL_BATCHES:-1}
BATCH=${BATCH:-1000}
FANOUTS=${FANOUTS:-[10,10]}
DEGREE=${DEGREE:-10}
SEED=${SEED:-1}
SAMPLERS=${SAMPLERS:-2}
EXTRACTORS=${EXTRACTORS:-2}
IO_DEPTH=${IO_DEPTH:-64}
((EPOCHS >= 3)) || lib_die "EPOCHS=$EPOCHS: at least 3 (epoch 1 is cold, the last evaluates)"
CAP_BYTES=$(lib_bytes "$CAP")

lib_need_tools jq python3
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-extractor gnn-sampler gnn-trainer gnn-releaser
GL=$BUILD/bin/gnnlaunch
PREP=$BUILD/bin/gnnprep
lib_cg_detect
mkdir -p "$WORK" "$RESULTS"
RUN=$WORK/cache-policy-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RUN"
RUN_IDS=()
cleanup() {
    lib_cg_remove
    lib_shm_sweep "${RUN_IDS[@]}" >/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
lib_log "cache policies: cap $CAP, feature buffer ${FB_MB} MiB, $(lib_cg_describe); raw files in $RUN"
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load.before"

# The feature buffer (MiB of 512-byte rows) that leaves room, under the
# cap, for the costliest policy's metadata: gnnlaunch's refusal of a huge
# buffer says what it plans for the rest; the buffer's own layout is
# stages/featbuf.c's (slot records, node map) plus the lookahead region
# (stages/featbuf_lookahead.c: 16 B a slot, 4 B a node, 12 B a hint row).
fit_fb_mb() { # CFG NODES WMAX set-args...
    local cfg=$1 nodes=$2 wmax=$3 out
    shift 3
    lib_cg_create "$CAP_BYTES"
    out=$(lib_cg_exec "$GL" --cpu "$cfg" "$@" --set pipeline.feature_buffer_mb=1000000 2>&1 </dev/null || true)
    lib_cg_remove
    python3 - "$out" "$CAP_BYTES" "$nodes" "$wmax" "$LOOKAHEAD_MB" "$BATCH" "$FANOUTS" "$SAMPLERS" "$EXTRACTORS" <<'PY'
import re, sys
out, cap, n, wmax, la_mb, batch, fan, samplers, extractors = sys.argv[1:]
cap, n, wmax, la_mb, batch = int(cap), int(n), int(wmax), int(la_mb), int(batch)
mib = lambda x: float(x) * 2**20
m = re.search(r"batch arenas ([0-9.]+) MiB, topology ([0-9.]+) MiB.*margin of ([0-9.]+) MiB", out)
if not m:
    sys.exit("no plan in gnnlaunch's answer: " + out[-400:])
rest = sum(mib(x) for x in m.groups())
k = min(batch, n)
for f in [int(x) for x in fan.strip("[]").split(",")]:
    k = min(k + k * f, n)
per_slot = 512 + 24 + 16                                # row, slot record, lookahead slot
fixed = 4096 + 4 * n + (4 * n + 12 * min((wmax + 8 + int(samplers) + int(extractors)) * k, la_mb * 2**20 // 12) if wmax else 0)
slots = int((cap - rest - fixed - 8 * 2**20) / per_slot)  # 8 MiB of slack for rounding
print(max(slots * 512 // 2**20, 1))
PY
}

run_one() { # ID CFG DS set-args...
    local id=$1 cfg=$2 ds=$3 rc=0
    shift 3
    local cmd=("$GL" --cpu "$cfg" --epochs "$EPOCHS" --run-name "cp-$$-${id//./_}" --metrics "$RUN/$id.jsonl" "$@"
        --set "pipeline.feature_buffer_mb=$fb_mb" --set "train.checkpoint_dir=\"$RUN/ck-$id\"")
    printf '%q ' "${cmd[@]}" >"$RUN/$id.cmd"
    echo >>"$RUN/$id.cmd"
    lib_drop_caches "$ds"/*.bin
    lib_cg_create "$CAP_BYTES"
    cut -d' ' -f1-3 /proc/loadavg >"$RUN/$id.load"
    lib_cg_exec "${cmd[@]}" >"$RUN/$id.log" 2>&1 </dev/null || rc=$?
    cut -d' ' -f1-3 /proc/loadavg >>"$RUN/$id.load"
    lib_cg_summary >"$RUN/$id.cg.json"
    lib_cg_remove
    local rid
    rid=$(lib_run_id "$RUN/$id.log")
    [[ -n $rid ]] && { RUN_IDS+=("$rid"); lib_shm_sweep "$rid" >/dev/null; }
    rm -rf "$RUN/ck-$id"
    grep -E '^epoch [0-9]+/[0-9]+ ' "$RUN/$id.log" | cut -c1-160 >&2 || true
    [[ $rc -eq 0 ]] || { echo "$LIB_PROG: run $id exited with status $rc:" >&2; tail -3 "$RUN/$id.log" >&2; }
    return "$rc"
}

FAILED=0
: >"$RUN/manifest"
for scale in $SCALES; do
    nodes=$(python3 -c "print(int($scale * $CAP_BYTES) // 512)")
    ds=$(flock /work/bench-data/.gen.lock bash -c "LIB_PROG=$LIB_PROG; source bench/lib.sh; lib_dataset '$WORK' '$PREP' $nodes 128 f32 $DEGREE $((TRAIN_BATCHES * BATCH)) $((EVAL_BATCHES * BATCH)) $SEED")
    label=d128-f32-x$scale
    cfg=$RUN/$label.toml
    printf '# written by bench/cache_policy.sh\n[dataset]\npath = "%s"\n' "$ds" >"$cfg"
    job=(--set model.kind=sage --set "model.fanouts=$FANOUTS" --set "train.batch_size=$BATCH"
        --set train.eval_every=1000000 --set "pipeline.samplers=$SAMPLERS" --set "pipeline.extractors=$EXTRACTORS"
        --set "pipeline.io_depth=$IO_DEPTH")
    wmax=0
    for pol in $POLICIES; do
        [[ $pol == lookahead* ]] && { w=${pol#*:}; [[ $w == "$pol" ]] && w=32; ((w > wmax)) && wmax=$w; }
    done
    fb_mb=$FB_MB
    if [[ $fb_mb == auto ]]; then
        fb_mb=$(fit_fb_mb "$cfg" "$nodes" "$wmax" "${job[@]}") || lib_die "$label: cannot size the feature buffer: $fb_mb"
    fi
    lib_log "$label: feature buffer $fb_mb MiB for every policy (the costliest: lookahead at W = $wmax, hint log <= $LOOKAHEAD_MB MiB)"
    echo "fb $label $fb_mb" >>"$RUN/manifest"
    first=1
    for pol in $POLICIES; do
        name=${pol%%:*}
        win=""
        [[ $pol == *:* ]] && win=${pol#*:}
        id=$label-${pol/:/-w}
        extra=(--set "pipeline.cache_policy=$name")
        [[ -n $win ]] && extra+=(--set "pipeline.lookahead=$win")
        [[ $name == lookahead* ]] && extra+=(--set "pipeline.lookahead_mb=$LOOKAHEAD_MB")
        if [[ $first == 1 ]]; then
            extra+=(--set "pipeline.trace_rows=\"$RUN/$label.trace\"")
            first=0
            echo "$label $ds $id" >>"$RUN/manifest"
        fi
        lib_log "run $id: ${extra[*]}"
        run_one "$id" "$cfg" "$ds" "${job[@]}" "${extra[@]}" || FAILED=1
        echo "run $label $id $pol" >>"$RUN/manifest"
    done
    slots=$(sed -n 's/^gnnlaunch: feature buffer per rank: \([0-9]*\) slots.*/\1/p' "$RUN"/"$label"-*.log | head -1)
    if [[ -n $slots && -f $RUN/$label.trace.rank0 ]]; then
        simcmd=("$PREP" cache-sim "$RUN/$label.trace.rank0" --slots "$slots" --window "$WINDOWS" --dataset "$ds")
        echo "${simcmd[*]}" >"$RUN/$label.sim.cmd"
        lib_log "replaying the trace: ${simcmd[*]}"
        "${simcmd[@]}" >"$RUN/$label.sim" 2>"$RUN/$label.sim.err" || { FAILED=1; cat "$RUN/$label.sim.err" >&2; }
        rm -f "$RUN/$label.trace.rank0" # large; the summary is kept
    fi
done
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load.after"

python3 bench/report_cache_policy.py "$RUN" "$RESULTS/$NAME.md" "${ENV_SET}$CMDLINE" "$EPOCHS" "$CAP" "$LOOKAHEAD_MB"
[[ $FAILED == 0 ]] || { echo "$LIB_PROG: at least one run failed (see the result file)" >&2; exit 1; }
