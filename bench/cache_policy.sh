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
#   NAME (cache-policy-DATE)   CAP (1G)   FB_FRAC (0.4: feature buffer = FB_FRAC x CAP, as outofcore.sh)
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
for v in BUILD WORK RESULTS NAME CAP FB_FRAC SCALES POLICIES WINDOWS EPOCHS TRAIN_BATCHES EVAL_BATCHES BATCH \
    FANOUTS DEGREE SEED SAMPLERS EXTRACTORS IO_DEPTH; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
[[ $# -eq 0 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=${BUILD:-build}
WORK=${WORK:-/work/bench-data/ooc}
RESULTS=${RESULTS:-bench/results}
NAME=${NAME:-cache-policy-$(date -u +%Y-%m-%d)}
CAP=${CAP:-1G}
FB_FRAC=${FB_FRAC:-0.4}
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
FB_MB=$(python3 -c "print(int($FB_FRAC * ($CAP_BYTES >> 20)))")

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
lib_log "cache policies: cap $CAP, feature buffer $FB_MB MiB, $(lib_cg_describe); raw files in $RUN"
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load.before"

run_one() { # ID CFG DS set-args...
    local id=$1 cfg=$2 ds=$3 rc=0
    shift 3
    local cmd=("$GL" --cpu "$cfg" --epochs "$EPOCHS" --run-name "cp-$$-${id//./_}" --metrics "$RUN/$id.jsonl" "$@"
        --set "pipeline.feature_buffer_mb=$FB_MB" --set "train.checkpoint_dir=\"$RUN/ck-$id\"")
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
    first=1
    for pol in $POLICIES; do
        name=${pol%%:*}
        win=""
        [[ $pol == *:* ]] && win=${pol#*:}
        id=$label-${pol/:/-w}
        extra=(--set "pipeline.cache_policy=$name")
        [[ -n $win ]] && extra+=(--set "pipeline.lookahead=$win")
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

python3 - "$RUN" "$RESULTS/$NAME.md" "${ENV_SET}$CMDLINE" "$EPOCHS" "$CAP" "$FB_MB" <<'EOF'
import json, os, sys, glob
run, out, cmdline, epochs, cap, fb_mb = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
sets, runs = [], []
for line in open(os.path.join(run, "manifest")):
    w = line.split()
    if w[0] == "run":
        runs.append((w[1], w[2], w[3]))
    else:
        sets.append((w[0], w[1]))
def epochs_of(rid):
    p = os.path.join(run, rid + ".jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if '"type":"epoch"' in l]
def kv(path):
    d = []
    if not os.path.exists(path):
        return d
    for l in open(path):
        if l.startswith("policy="):
            d.append(dict(x.split("=", 1) for x in l.split()))
    return d
md = []
md.append("# Feature buffer cache policies under a memory cap (issue 18)\n")
md.append(f"- **Command**: `flock /tmp/sluice-bench.lock {cmdline}`")
m = os.popen("uname -srm").read().strip()
md.append(f"- **Machine**: {m}, {os.cpu_count()} CPUs; cap {cap} (cgroup), feature buffer {fb_mb} MiB per rank; "
          f"raw files in `{run}`")
la = [open(os.path.join(run, "load.before")).read().strip(), open(os.path.join(run, "load.after")).read().strip()]
md.append(f"- **Load average** (1, 5, 15 min) before / after the whole script: {la[0]} / {la[1]}; per run:")
for lbl, rid, pol in runs:
    p = os.path.join(run, rid + ".load")
    if os.path.exists(p):
        l = open(p).read().split("\n")
        md.append(f"  {rid}: {l[0]} / {l[1] if len(l) > 1 else '?'};")
md.append(f"- **Measured**: epochs 2..{epochs - 1} of {epochs} (epoch 1 starts cold, the last also evaluates); "
          "misses = the extractor's reads (`read_ops`: one O_DIRECT read per row missed), per epoch.\n")
md.append("## Runs\n")
md.append("| dataset | policy | epoch s | misses / epoch | vs lru | hit rate | sampler busy s / epoch | extractor busy s / epoch | peak memory | OOM kills |")
md.append("|---|---|---|---|---|---|---|---|---|---|")
base = {}
for lbl, rid, pol in runs:
    ep = [e for e in epochs_of(rid) if 2 <= e["epoch"] <= epochs - 1]
    cg = json.load(open(os.path.join(run, rid + ".cg.json"))) if os.path.exists(os.path.join(run, rid + ".cg.json")) else {}
    if not ep:
        md.append(f"| {lbl} | {pol} | failed (see {rid}.log) | | | | | | | {cg.get('oom_kills')} |")
        continue
    n = len(ep)
    sec = sum(e["seconds"] for e in ep) / n
    miss = sum(e["read_ops"] for e in ep) / n
    hit = sum(e["hit_rate"] for e in ep) / n
    sb = sum(e["stages"]["sampler"]["busy_s"] for e in ep) / n
    xb = sum(e["stages"]["extractor"]["busy_s"] for e in ep) / n
    if pol == "lru":
        base[lbl] = (sec, miss)
    rel = f"{miss / base[lbl][1]:.3f}" if lbl in base else ""
    peak = cg.get("peak_bytes")
    md.append(f"| {lbl} | {pol} | {sec:.2f} | {miss:,.0f} | {rel} | {hit:.3f} | {sb:.2f} | {xb:.2f} | "
              f"{(peak or 0) / 2**20:,.0f} MiB | {cg.get('oom_kills')} |")
md.append("\n*vs lru*: misses per epoch over the lru run's. *sampler busy*: sampling plus, with lookahead, "
          "sampling every batch a second time to announce it (the window's extra cost).\n")
md.append("## Replay of the traced accesses (gnnprep cache-sim)\n")
for lbl, ds in sets:
    sim = kv(os.path.join(run, lbl + ".sim"))
    cmdp = os.path.join(run, lbl + ".sim.cmd")
    if not sim:
        md.append(f"{lbl}: no replay (see {lbl}.sim.err)\n")
        continue
    head = {}
    for l in open(os.path.join(run, lbl + ".sim")):
        if "=" in l and not l.startswith("policy="):
            k, v = l.strip().split("=", 1)
            head[k] = v
    md.append(f"**{lbl}**: `{open(cmdp).read().strip()}` - {head.get('batches')} batches, {int(head.get('accesses', 0)):,} "
              f"row requests, {head.get('slots')} slots, hot set {head.get('hot')} rows\n")
    md.append("| policy | window | misses (whole trace) | miss rate | vs Belady |")
    md.append("|---|---|---|---|---|")
    for r in sim:
        md.append(f"| {r['policy']} | {r['window'] if r['window'] != '0' else ''} | {int(r['misses']):,} | "
                  f"{float(r['miss_rate']):.4f} | {float(r['vs_belady']):.3f} |")
    md.append("")
open(out, "w").write("\n".join(md) + "\n")
print(out)
EOF
[[ $FAILED == 0 ]] || { echo "$LIB_PROG: at least one run failed (see the result file)" >&2; exit 1; }
