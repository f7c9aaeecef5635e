#!/usr/bin/env bash
# bench/peers.sh - the same job trained by Sluice, PyTorch Geometric and DGL,
# side by side on the same machine and the same dataset files. One command;
# it writes RESULTS/NAME.md and RESULTS/NAME.json (bench/report_peers.py).
#
#   bench/peers.sh                          # job "default": both regimes below (~40 min on 2 cores)
#   bench/peers.sh --job inmem              # features in memory only
#   bench/peers.sh --job ooc --cap 1G       # out of core only
#   bench/peers.sh --job i24                # issue 24: SAGE [10,10,10], Sluice beside PyG
#   bench/peers.sh --job i27                # issue 27: Sluice beside DGL, [10,5] and [10,10,10]
#   bench/peers.sh --systems sluice,dgl     # a subset of the systems
#   bench/peers.sh --tune-workers           # first try loader workers 0,1,2 for each peer
#   bench/peers.sh --gpu                    # Sluice --gpus 1, PyG on cuda (DGL from PyPI is CPU-only: skipped)
#
# Every system reads the dataset directory Sluice uses (docs/format.md):
# the peers (bench/peers.py) read features.bin with numpy honouring the
# row stride and dtype - into memory (np.fromfile) or memory-mapped
# (np.memmap, rows through the page cache: the "PyG+" baseline) - and
# build their own graph structure from indptr.bin/indices.bin (PyG: a
# torch_sparse SparseTensor as data.adj_t; DGL: dgl.graph(('csc', ...)));
# that is part of their measured load time. Every run gets a fresh cgroup
# (memory peak; with a cap in the out-of-core regime) - bench/lib.sh.
#
# Jobs (--job; each a list of runs: dataset, regime, model, fanouts, epochs):
#   inmem    INMEM_DS (/work/bench-data/inmem-2m), features in memory, page
#            cache warm (the files are read once before each run), no cap:
#            INMEM_MODELS ("sage gcn"; gat too: 4 heads) [10,5], INMEM_EPOCHS (4) epochs each,
#            validation every epoch, test after the last
#   ooc      the d128-f32-x4 dataset of bench/outofcore.sh (features 4 x CAP,
#            made once under OOC_WORK with flock OOC_WORK/../.gen.lock),
#            under a cgroup cap of CAP, caches dropped before each run, the
#            peers on memory-mapped features, Sluice with its default
#            (planned to the cap) direct I/O: OOC_MODELS ("sage gcn") [10,5], OOC_EPOCHS (3)
#            epochs of OOC_STEPS (8) training batches, validation and test
#            after the last
#   default  inmem, then ooc
#   tune     only --tune-workers: each peer with 0, 1, 2 loader workers, 2 epochs of
#            sage [10,5] on a 20-batch view of INMEM_DS (the second epoch's
#            training time decides); the result file lists every try
#   i24      issue 24: sage 3 layers [10,10,10], hidden 128, batch 1000, lr
#            0.003, 20 training batches an epoch, 3 epochs, inmem-2m,
#            systems sluice,pyg, two seeds (SEEDS_I24, "1 2")
#   i27      issue 27: sage [10,5] 5 epochs and [10,10,10] 3 epochs, hidden
#            128, batch 1000, lr 0.003, dropout 0.5, inmem-2m with its whole
#            training split (100 batches), Sluice with feature_buffer_mb =
#            2048, caches dropped before each run, systems sluice,dgl; the
#            whole run's wall time (start to exit) is reported too
# Fewer training batches than the dataset's training split: a view of the
# dataset (VIEWS/NAME-trK-sS: the same files as symlinks, train.bin a seeded
# random subset of K ids, dataset.toml updated) that every system reads.
#
# Environment (defaults):
#   BUILD (build)                      tree with bin/gnnlaunch and bin/gnnprep
#   WORK (bench/work)                  raw run files (git-ignored)
#   RESULTS (bench/results)  NAME (peers-DATE[-JOB])
#   VENVS (/work/bench-data/venvs)     where the venvs are made once:
#   PYG_VENV (VENVS/pyg)               torch 2.3.1 + torch_geometric 2.8.1 + torch-scatter
#                                      2.1.2 + torch-sparse 0.6.18 built from source (no pyg-lib)
#   DGL_VENV (VENVS/dgl)               torch 2.2.1 + dgl 2.1.0 + torchdata 0.7.1 (PyPI, CPU)
#   PYG_WORKERS (1) DGL_WORKERS (0)    loader workers in memory (the best of 0,1,2 that
#                                      --job tune measured on the 2-core development VM)
#   OOC_PYG_WORKERS (2) OOC_DGL_WORKERS (2)  out of core: page faults overlap across workers,
#                                      and DGL keeps int32 ids only with workers (docs/benchmarks.md)
#   INMEM_DS INMEM_EPOCHS INMEM_MODELS OOC_WORK (/work/bench-data/ooc) OOC_EPOCHS OOC_STEPS
#   OOC_MADVISE (random)               the peers' mapped features: random = madvise(MADV_RANDOM),
#                                      no readahead (the kernel's default readahead, "normal",
#                                      reads 128 KiB per 512-byte row: far slower)
#   CAP (1G; --cap)                    the out-of-core regime's memory cap
#   BATCH (1000) HIDDEN (128) LR (0.003) DROPOUT (0.5) SEED (1)
#   VIEWS (/work/bench-data/views)
# Exit: 0 done (targets are reported, not asserted), 2 bad usage or setup, 1 a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/peers.sh
source bench/lib.sh

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

CMDLINE="$0${*:+ $*}"
ENV_SET=""
for v in BUILD WORK RESULTS NAME VENVS PYG_VENV DGL_VENV PYG_WORKERS DGL_WORKERS OOC_PYG_WORKERS OOC_DGL_WORKERS INMEM_DS INMEM_EPOCHS INMEM_MODELS OOC_MODELS OOC_WORK \
    OOC_EPOCHS OOC_STEPS OOC_MADVISE CAP BATCH HIDDEN LR DROPOUT SEED VIEWS SEEDS_I24; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
JOB=default
SYSTEMS=""
GPU=0
TUNE=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --cap) CAP=${2:?--cap needs a size}; shift ;;
    --cap=*) CAP=${1#--cap=} ;;
    --job) JOB=${2:?--job needs a name}; shift ;;
    --job=*) JOB=${1#--job=} ;;
    --systems) SYSTEMS=${2:?--systems needs a list}; shift ;;
    --systems=*) SYSTEMS=${1#--systems=} ;;
    --gpu) GPU=1 ;;
    --tune-workers) TUNE=1 ;;
    -h | --help) usage 0 ;;
    *) echo "$LIB_PROG: unknown argument '$1'" >&2; usage 2 ;;
    esac
    shift
done

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
RESULTS=${RESULTS:-bench/results}
VENVS=${VENVS:-/work/bench-data/venvs}
PYG_VENV=${PYG_VENV:-$VENVS/pyg}
DGL_VENV=${DGL_VENV:-$VENVS/dgl}
PYG_WORKERS=${PYG_WORKERS:-1}
DGL_WORKERS=${DGL_WORKERS:-0}
OOC_PYG_WORKERS=${OOC_PYG_WORKERS:-2}
OOC_DGL_WORKERS=${OOC_DGL_WORKERS:-2}
INMEM_DS=${INMEM_DS:-/work/bench-data/inmem-2m}
INMEM_EPOCHS=${INMEM_EPOCHS:-4}
INMEM_MODELS=${INMEM_MODELS:-sage gcn}
OOC_MODELS=${OOC_MODELS:-sage gcn}
OOC_WORK=${OOC_WORK:-/work/bench-data/ooc}
OOC_EPOCHS=${OOC_EPOCHS:-3}
OOC_STEPS=${OOC_STEPS:-8}
OOC_MADVISE=${OOC_MADVISE:-random}
CAP=${CAP:-1G}
BATCH=${BATCH:-1000}
HIDDEN=${HIDDEN:-128}
LR=${LR:-0.003}
DROPOUT=${DROPOUT:-0.5}
SEED=${SEED:-1}
SEEDS_I24=${SEEDS_I24:-1 2}
VIEWS=${VIEWS:-/work/bench-data/views}
case $JOB in
default | inmem | ooc) DEF_SYSTEMS=sluice,pyg,dgl ;;
tune) DEF_SYSTEMS=pyg,dgl TUNE=1 ;;
i24) DEF_SYSTEMS=sluice,pyg ;;
i27) DEF_SYSTEMS=sluice,dgl ;;
*) lib_die "--job $JOB: use default, inmem, ooc, tune, i24 or i27" ;;
esac
SYSTEMS=${SYSTEMS:-$DEF_SYSTEMS}
for m in $INMEM_MODELS $OOC_MODELS; do
    [[ $m == sage || $m == gcn || $m == gat ]] || lib_die "INMEM_MODELS/OOC_MODELS: '$m' is not sage, gcn or gat"
done
for s in ${SYSTEMS//,/ }; do
    [[ $s == sluice || $s == pyg || $s == dgl ]] || lib_die "--systems: '$s' is not sluice, pyg or dgl"
done
has() { [[ ",$SYSTEMS," == *",$1,"* ]]; }
if [[ $GPU == 1 ]] && has dgl; then
    lib_log "--gpu: DGL from PyPI is CPU-only; DGL runs are skipped"
    SYSTEMS=$(tr ',' '\n' <<<"$SYSTEMS" | grep -vx dgl | paste -sd, -)
fi
NAME=${NAME:-peers-$(date -u +%Y-%m-%d)$([[ $JOB == default ]] || echo "-$JOB")}
CAP_BYTES=$(lib_bytes "$CAP")

lib_need_tools python3 jq numfmt lsblk flock
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-extractor gnn-sampler gnn-trainer gnn-releaser
GL=$BUILD/bin/gnnlaunch
PREP=$BUILD/bin/gnnprep

# ---- the virtual environments (made once) -----------------------------------------------

venv_ok() { # VENV module...
    local v=$1
    shift
    [[ -x $v/bin/python ]] || return 1
    "$v/bin/python" -c "import $(IFS=,; echo "$*")" >/dev/null 2>&1
}

make_pyg_venv() {
    local v=$PYG_VENV log=$VENVS/logs/pyg-setup.log
    mkdir -p "$VENVS/logs"
    lib_log "making $v (PyTorch 2.3.1, PyG 2.8.1, torch-scatter and torch-sparse from source: ~30 min on 2 cores); log $log"
    {
        [[ -x $v/bin/python ]] || python3 -m venv "$v"
        "$v/bin/pip" install torch==2.3.1 torch_geometric==2.8.1 numpy psutil scipy setuptools wheel
        # No pyg-lib wheel is reachable from PyPI (data.pyg.org hosts them), and
        # pyg-lib has no sdist there: its neighbour sampler comes from
        # torch-sparse, built from its PyPI sdist against this torch.
        MAX_JOBS=2 FORCE_ONLY_CPU=1 FORCE_CUDA=0 WITH_METIS=0 nice "$v/bin/pip" install --no-build-isolation \
            --no-binary :all: torch-scatter==2.1.2 torch-sparse==0.6.18
    } >"$log" 2>&1 || lib_die "making $v failed; see $log"
}

make_dgl_venv() {
    local v=$DGL_VENV log=$VENVS/logs/dgl-setup.log
    mkdir -p "$VENVS/logs"
    lib_log "making $v (PyTorch 2.2.1, DGL 2.1.0, torchdata 0.7.1 from PyPI); log $log"
    {
        [[ -x $v/bin/python ]] || python3 -m venv "$v"
        "$v/bin/pip" install torch==2.2.1 dgl==2.1.0 torchdata==0.7.1 "numpy<2" "pandas<2.3" psutil pydantic pyyaml xxhash
    } >"$log" 2>&1 || lib_die "making $v failed; see $log"
}

if has pyg; then
    venv_ok "$PYG_VENV" torch_geometric torch_sparse || make_pyg_venv
    venv_ok "$PYG_VENV" torch_geometric torch_sparse || lib_die "$PYG_VENV cannot import torch_geometric and torch_sparse"
fi
if has dgl; then
    venv_ok "$DGL_VENV" dgl dgl.dataloading || make_dgl_venv
    venv_ok "$DGL_VENV" dgl dgl.dataloading || lib_die "$DGL_VENV cannot import dgl"
fi
# A python with xxhash for the dataset views' dataset.toml (either venv has it through its packages or pip).
VIEW_PY=python3
for v in "$PYG_VENV" "$DGL_VENV"; do
    if venv_ok "$v" xxhash; then VIEW_PY=$v/bin/python; break; fi
done

lib_cg_detect
mkdir -p "$WORK" "$RESULTS"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RUN=$WORK/peers-$STAMP
mkdir -p "$RUN"

RUN_IDS=()
cleanup() {
    lib_cg_remove
    lib_shm_sweep "${RUN_IDS[@]}" >/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

lib_log "peers benchmark, job $JOB, systems $SYSTEMS; raw files in $RUN; results will be $RESULTS/$NAME.{md,json}"
lib_machine_json "$BUILD" "$RUN" >"$RUN/machine.json"

# ---- datasets and views -----------------------------------------------------------------

ooc_dataset() {
    local nodes=$((4 * CAP_BYTES / 512))
    local gen=$OOC_WORK/../.gen.lock
    mkdir -p "$OOC_WORK"
    # outofcore.sh's d128-f32-x4 recipe: DEGREE 10, TRAIN_BATCHES 32, EVAL_BATCHES 1, SEED 1
    flock "$gen" bash -c "source bench/lib.sh; lib_dataset '$OOC_WORK' '$PREP' $nodes 128 f32 10 32000 1000 1"
}

# A view of DS whose training split is K of its training ids (seeded,
# ascending): the other files are symlinks. Prints its path.
make_view() { # DS K SEED
    local ds=$1 k=$2 s=$3 out
    out=$VIEWS/$(basename "$ds")-tr$k-s$s
    if [[ ! -f $out/dataset.toml ]]; then
        mkdir -p "$VIEWS"
        flock "$VIEWS/.lock" "$VIEW_PY" - "$ds" "$out" "$k" "$s" <<'PY' || lib_die "could not make the view $out"
import os, re, sys, numpy as np
ds, out, k, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if os.path.exists(os.path.join(out, "dataset.toml")):
    sys.exit(0)
lines = open(os.path.join(ds, "dataset.toml")).read().split("\n")
start = lines.index("[train]")
end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
sec = "\n".join(lines[start:end])
dt = re.search(r'dtype = "(u32|u64)"', sec).group(1)
ids = np.fromfile(os.path.join(ds, "train.bin"), dtype=np.uint32 if dt == "u32" else np.uint64)
if k > ids.shape[0]:
    sys.exit(f"{ds}: the training split has {ids.shape[0]} ids, fewer than {k}")
sub = np.sort(np.random.default_rng(s).choice(ids, size=k, replace=False)).astype(ids.dtype)
tmp = out + ".tmp"
import shutil
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp, exist_ok=True)
sub.tofile(os.path.join(tmp, "train.bin"))
try:
    import xxhash
    h = xxhash.xxh3_64_hexdigest(sub.tobytes())
except ImportError:
    sys.exit("no xxhash module: install it in the venv (pip install xxhash)")
sec = re.sub(r'shape = \[\d+\]', f'shape = [{k}]', sec)
sec = re.sub(r'bytes = \d+', f'bytes = {sub.nbytes}', sec)
sec = re.sub(r'xxh3 = "[0-9a-f]+"', f'xxh3 = "{h}"', sec)
toml = "\n".join(lines[:start] + [sec] + lines[end:])
toml = re.sub(r'(source = ".*)"', r'\1 (view: train = %d of its ids, bench/peers.sh, seed %d)"' % (k, s), toml, count=1)
for f in os.listdir(ds):
    if f.endswith(".bin") and f != "train.bin":
        os.symlink(os.path.realpath(os.path.join(ds, f)), os.path.join(tmp, f))
open(os.path.join(tmp, "dataset.toml"), "w").write(toml)
os.rename(tmp, out)
PY
    fi
    echo "$out"
}

# ---- one run ----------------------------------------------------------------------------

# Runs one system on one job in a fresh cgroup. Writes RUN/ID.{cmd,log,load,cg.json,wall}.
run_one() { # ID SYSTEM DS REGIME(mem|ooc) DROP(0|1) MODEL FANOUTS(csv) EPOCHS EVAL(every|last) FB_MB(""=planned) RUNSEED
    local id=$1 sys=$2 ds=$3 regime=$4 drop=$5 model=$6 fan=$7 epochs=$8 ev=$9 fb=${10} seed=${11}
    local cmd cap
    if [[ $sys == sluice ]]; then
        local cfg=$RUN/$id.toml
        printf '# written by bench/peers.sh\n[dataset]\npath = "%s"\n' "$ds" >"$cfg"
        cmd=("$GL")
        if [[ $GPU == 1 ]]; then cmd+=(--gpus 1); else cmd+=(--cpu); fi
        cmd+=("$cfg" --epochs "$epochs" --run-name "peers-$$-$id" --set "model.kind=\"$model\""
            --set "model.fanouts=[$fan]" --set "model.hidden=$HIDDEN" --set "train.batch_size=$BATCH"
            --set "train.lr=$LR" --set "model.dropout=$DROPOUT" --set "train.seed=$seed"
            --set "train.checkpoint_dir=\"$RUN/ck-$id\"")
        [[ $ev == last ]] && cmd+=(--set train.eval_every=1000000)
        [[ -n $fb ]] && cmd+=(--set "pipeline.feature_buffer_mb=$fb")
    else
        local venv=$PYG_VENV workers=$PYG_WORKERS
        [[ $sys == dgl ]] && { venv=$DGL_VENV; workers=$DGL_WORKERS; }
        if [[ $regime == ooc ]]; then
            workers=$OOC_PYG_WORKERS
            [[ $sys == dgl ]] && workers=$OOC_DGL_WORKERS
        fi
        cmd=("$venv/bin/python" bench/peers.py --system "$sys" --dataset "$ds" --model "$model" --fanouts "$fan"
            --hidden "$HIDDEN" --batch "$BATCH" --lr "$LR" --dropout "$DROPOUT" --epochs "$epochs"
            --workers "$workers" --seed "$seed" --features "$([[ $regime == ooc ]] && echo mmap || echo mem)")
        [[ $ev == last ]] && cmd+=(--eval-last)
        [[ $regime == ooc ]] && cmd+=(--madvise "$OOC_MADVISE")
        [[ $GPU == 1 ]] && cmd+=(--device cuda)
    fi
    printf '%q ' "${cmd[@]}" >"$RUN/$id.cmd"
    echo >>"$RUN/$id.cmd"
    if [[ $drop == 1 ]]; then
        lib_drop_caches "$ds"/*.bin
    elif [[ $regime == mem ]]; then
        cat "$ds"/*.bin >/dev/null # warm: the peers' np.fromfile reads from the page cache
    fi
    cap=$CAP_BYTES
    [[ $regime == mem ]] && cap=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))
    lib_cg_create "$cap"
    cut -d' ' -f1-3 /proc/loadavg >"$RUN/$id.load"
    local t0=$EPOCHREALTIME rc=0
    lib_cg_exec "${cmd[@]}" >"$RUN/$id.log" 2>"$RUN/$id.err" </dev/null || rc=$?
    local t1=$EPOCHREALTIME
    cut -d' ' -f1-3 /proc/loadavg >>"$RUN/$id.load"
    lib_cg_summary >"$RUN/$id.cg.json"
    lib_cg_remove
    python3 -c "print($t1 - $t0)" >"$RUN/$id.wall"
    echo "$rc" >"$RUN/$id.rc"
    if [[ $sys == sluice ]]; then
        local rid
        rid=$(lib_run_id "$RUN/$id.err")
        [[ -n $rid ]] || rid=$(lib_run_id "$RUN/$id.log")
        [[ -n $rid ]] && { RUN_IDS+=("$rid"); lib_shm_sweep "$rid" >/dev/null; }
        rm -rf "$RUN/ck-$id"
        grep -E '^(epoch [0-9]+/[0-9]+ |test_acc=)' "$RUN/$id.log" | cut -c1-120 >&2 || true
    else
        jq -c 'select(.type == "epoch" or .type == "final") | {epoch, train_s, seconds, test_acc}' "$RUN/$id.log" >&2 2>/dev/null || true
    fi
    if [[ $rc -ne 0 ]]; then
        FAILED=1
        echo "$LIB_PROG: run $id exited with status $rc; the last lines of $RUN/$id.err:" >&2
        tail -5 "$RUN/$id.err" >&2
    fi
    jq -nc --arg id "$id" --arg sys "$sys" --arg ds "$ds" --arg regime "$regime" --argjson drop "$drop" \
        --arg model "$model" --arg fanouts "[$fan]" --argjson epochs "$epochs" --arg eval "$ev" --arg fb "$fb" \
        --argjson seed "$seed" --arg group "$GROUP" --argjson rc "$rc" \
        '{id: $id, system: $sys, dataset: $ds, regime: $regime, drop_caches: ($drop == 1), model: $model,
          fanouts: $fanouts, epochs: $epochs, eval: $eval, feature_buffer_mb: $fb, seed: $seed, group: $group, rc: $rc}' \
        >>"$RUN/manifest.jsonl"
    return 0
}

# All systems on one job. GROUP names the row group in the report.
run_group() { # GROUP DS REGIME DROP MODEL FANOUTS EPOCHS EVAL FB SEED
    GROUP=$1
    shift
    local s
    lib_log "$GROUP: $(basename "$1"), $2, $4 $5, $6 epochs"
    for s in ${SYSTEMS//,/ }; do
        lib_log "  $s"
        run_one "$GROUP-$s" "$s" "$@"
    done
}

tune_workers() { # DS
    local ds=$1 s w best bt t
    for s in pyg dgl; do
        has "$s" || continue
        best=0 bt=""
        for w in 0 1 2; do
            GROUP=tune-$s-w$w
            if [[ $s == pyg ]]; then PYG_WORKERS=$w; else DGL_WORKERS=$w; fi
            lib_log "workers: $s with $w"
            run_one "tune-$s-w$w" "$s" "$ds" mem 0 sage 10,5 2 last "" "$SEED"
            t=$(jq -s '[.[] | select(.type == "epoch")] | .[-1].train_s // empty' "$RUN/tune-$s-w$w.log" 2>/dev/null || true)
            [[ -n $t ]] || continue
            if [[ -z $bt ]] || python3 -c "import sys; sys.exit(0 if $t < $bt else 1)"; then best=$w bt=$t; fi
        done
        lib_log "workers: $s fastest with $best ($bt s, the second epoch's training)"
        if [[ $s == pyg ]]; then PYG_WORKERS=$best; else DGL_WORKERS=$best; fi
    done
}

FAILED=0
: >"$RUN/manifest.jsonl"
GROUP=""
[[ $TUNE == 1 ]] && tune_workers "$(make_view "$INMEM_DS" 20000 "$SEED")"
case $JOB in
default | inmem | ooc)
    if [[ $JOB != ooc ]]; then
        for m in $INMEM_MODELS; do
            run_group "inmem-$m-10-5" "$INMEM_DS" mem 0 "$m" 10,5 "$INMEM_EPOCHS" every 2048 "$SEED"
        done
    fi
    if [[ $JOB != inmem ]]; then
        ds=$(ooc_dataset)
        view=$(make_view "$ds" $((OOC_STEPS * BATCH)) "$SEED")
        for m in $OOC_MODELS; do
            run_group "ooc-$m-10-5" "$view" ooc 1 "$m" 10,5 "$OOC_EPOCHS" last "" "$SEED"
        done
    fi
    ;;
i24)
    view=$(make_view "$INMEM_DS" $((20 * BATCH)) "$SEED")
    for s in $SEEDS_I24; do
        run_group "i24-sage-10-10-10-seed$s" "$view" mem 0 sage 10,10,10 3 every 2048 "$s"
    done
    ;;
tune) ;;
i27)
    run_group i27-sage-10-5 "$INMEM_DS" mem 1 sage 10,5 5 every 2048 "$SEED"
    run_group i27-sage-10-10-10 "$INMEM_DS" mem 1 sage 10,10,10 3 every 2048 "$SEED"
    ;;
esac

jq -n --arg job "$JOB" --arg systems "$SYSTEMS" --arg cap "$CAP" --argjson cap_bytes "$CAP_BYTES" \
    --argjson pyg_workers "$([[ $JOB == ooc ]] && echo "$OOC_PYG_WORKERS" || echo "$PYG_WORKERS")" \
    --argjson dgl_workers "$([[ $JOB == ooc ]] && echo "$OOC_DGL_WORKERS" || echo "$DGL_WORKERS")" --argjson tuned "$TUNE" \
    --argjson gpu "$GPU" --arg pyg_venv "$PYG_VENV" --arg dgl_venv "$DGL_VENV" --argjson batch "$BATCH" \
    --argjson hidden "$HIDDEN" --argjson lr "$LR" --argjson dropout "$DROPOUT" --argjson ooc_steps "$OOC_STEPS" \
    --arg cap_method "$(lib_cg_describe)" --arg drop "$(lib_drop_method)" --arg cmdline "${ENV_SET}$CMDLINE" \
    --arg name "$NAME" --arg run_dir "$RUN" --arg build "$BUILD" \
    '{job: $job, systems: $systems, cap: $cap, cap_bytes: $cap_bytes, pyg_workers: $pyg_workers,
      dgl_workers: $dgl_workers, tuned_workers: $tuned, gpu: $gpu, pyg_venv: $pyg_venv, dgl_venv: $dgl_venv,
      batch: $batch, hidden: $hidden, lr: $lr, dropout: $dropout, ooc_steps: $ooc_steps, cap_method: $cap_method,
      drop_caches: $drop, command: $cmdline, name: $name, run_dir: $run_dir, build: $build}' >"$RUN/settings.json"

python3 bench/report_peers.py "$RUN" "$RESULTS" "$NAME"
[[ $FAILED == 0 ]] || { echo "$LIB_PROG: at least one run failed (see the result file)" >&2; exit 1; }
