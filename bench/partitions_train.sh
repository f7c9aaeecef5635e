#!/usr/bin/env bash
# bench/partitions_train.sh - training in the partition mode (issue 22)
# against the online mode on the same out-of-core data: for each dataset
# of bench/outofcore.sh's family (features SCALE x a memory cap), one
# `gnnlaunch --cpu` run in online mode (the memory plan sizes the feature
# buffer to the cap, direct reads, pipeline.cache_policy auto) and one per
# (p, c) of SETTINGS and ordering in pipeline.mode = "partitions", each
# inside a fresh cgroup of the cap with the page cache dropped first, the
# same model, batches and epochs. Reports per run: mean epoch seconds
# (all epochs, and epochs after the first), test accuracy, bytes the
# extractor read, the partitions read against the count printed at start.
# bench/partitions.sh measures the buffer's I/O alone. PORDERS lists the
# layouts' node orders (gnnprep partition --order), each optionally with
# "+eval" (--eval-first): a layout other than plain random is made in a
# twin of the dataset (DS-ORDER[-eval], its files hard-linked), since
# parts.P names one layout per P; the runs on it keep the defaults
# pipeline.partition_fill = "auto" (first, for neighbours) and
# pipeline.partition_eval = "auto" (inside the buffer where the layout
# allows it).
#
#   bench/partitions_train.sh                       # CAP 1G, SCALES 2, SETTINGS 32:4, EPOCHS 3
#   CAP=512M SCALES=2 SETTINGS=16:4 EPOCHS=2 bench/partitions_train.sh   # quick
#
# Environment (defaults): BUILD (build), WORK (bench/work), CAP (1G),
# SCALES ("2"), SETTINGS ("32:4", p:c), ORDERS ("comet beta"), PORDERS
# ("random"), EPOCHS (3),
# DIM (128), DTYPE (f32), DEGREE (10), NTRAIN (32000), FANOUTS ("[10, 5]"),
# BATCH (1000), HIDDEN (64), SEED (1: train.seed). Prints key=value lines and a markdown table
# on stdout. Reports; asserts nothing. Wrap it in
# `flock /tmp/sluice-bench.lock` beside other benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/partitions_train.sh
source bench/lib.sh

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
CAP=${CAP:-1G}
SCALES=${SCALES:-"2"}
SETTINGS=${SETTINGS:-"32:4"}
ORDERS=${ORDERS:-"comet beta"}
PORDERS=${PORDERS:-"random"}
EPOCHS=${EPOCHS:-3}
DIM=${DIM:-128}
DTYPE=${DTYPE:-f32}
DEGREE=${DEGREE:-10}
NTRAIN=${NTRAIN:-32000}
FANOUTS=${FANOUTS:-"[10, 5]"}
BATCH=${BATCH:-1000}
HIDDEN=${HIDDEN:-64}
SEED=${SEED:-1}

lib_need_tools python3
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-extractor gnn-sampler gnn-trainer gnn-releaser
PREP=$BUILD/bin/gnnprep
GL=$BUILD/bin/gnnlaunch
cap=$(lib_bytes "$CAP")
stride=$(lib_row_stride "$DIM" "$DTYPE")
lib_cg_detect
trap lib_cg_remove EXIT
mkdir -p "$WORK"

echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo '+dirty')"
echo "# host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM"
echo "# cap: $CAP ($(lib_cg_describe))"

# One run: prints a key=value line and appends a table row.
rows=()
run() { # NAME DS set-args...
    local name=$1 ds=$2
    shift 2
    local cfg=$WORK/partitions-train.toml log=$WORK/partitions-train.$name.log
    cat >"$cfg" <<EOF
[dataset]
path = "$(realpath "$ds")"
[model]
fanouts = $FANOUTS
hidden = $HIDDEN
[train]
epochs = $EPOCHS
batch_size = $BATCH
seed = $SEED
EOF
    lib_drop_caches "$ds/features.bin" "$ds"/parts.*/features.bin
    lib_cg_create "$cap"
    local t0 rc=0
    t0=$(date +%s.%N)
    lib_cg_exec "$GL" --cpu "$cfg" "$@" >"$log" 2>&1 </dev/null || rc=$?
    local wall cg
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    cg=$(lib_cg_summary)
    lib_cg_remove
    python3 - "$name" "$(basename "$ds")" "$log" "$rc" "$wall" "$cg" <<'PY'
import json, re, sys
name, ds, log, rc, wall, cg = sys.argv[1:]
t = open(log).read()
ep = [float(x) for x in re.findall(r"^epoch \d+/\d+ .*?seconds=([0-9.]+)", t, re.M)]
acc = re.search(r"^test_acc=([0-9.]+)", t, re.M)
planned = re.search(r"the run reads (\d+) partitions", t)
read = re.search(r"partitions: read (\d+) partitions, ([0-9.]+) MiB in (\d+) requests", t)
ext = re.search(r"rank 0: \d+ batches, \d+ rows: .*? read \(([0-9.]+) MiB\)", t)
mean = sum(ep) / len(ep) if ep else float("nan")
later = sum(ep[1:]) / len(ep[1:]) if len(ep) > 1 else float("nan")
r = dict(run=name, dataset=ds, rc=int(rc), wall_s=float(wall), epochs=len(ep), epoch_s=round(mean, 2),
         epoch_s_after_first=round(later, 2), test_acc=float(acc.group(1)) if acc else None,
         rows_read_mib=float(ext.group(1)) if ext else None,
         parts_planned=int(planned.group(1)) if planned else None, parts_read=int(read.group(1)) if read else None,
         parts_mib=float(read.group(2)) if read else None,
         avg_request_mib=round(float(read.group(2)) / int(read.group(3)), 2) if read and int(read.group(3)) else None,
         cgroup=json.loads(cg))
print("run " + " ".join(f"{k}={json.dumps(v)}" for k, v in r.items()))
with open(sys.argv[3] + ".row", "w") as f:
    f.write("| %s | %s | %d | %d | %.2f | %.2f | %s | %s | %s | %s | %s | %.1f |\n" % (
        ds.split("-")[0] + "-" + ds.split("-")[1], name, r["rc"], r["epochs"], mean, later,
        "%.4f" % r["test_acc"] if r["test_acc"] is not None else "-",
        r["rows_read_mib"] if r["rows_read_mib"] is not None else "-",
        "%s/%s" % (r["parts_read"], r["parts_planned"]) if read else "-",
        r["parts_mib"] if read else "-", r["avg_request_mib"] if read else "-", r["wall_s"]))
PY
    rows+=("$(cat "$log.row")")
}

for scale in $SCALES; do
    nodes=$((scale * cap / stride))
    ds=$(lib_dataset "$WORK" "$PREP" "$nodes" "$DIM" "$DTYPE" "$DEGREE" "$NTRAIN" 1000 1)
    run "online-x$scale" "$ds"
    for porder in $PORDERS; do
    pds=$ds tag="" pargs=(--order "${porder%%+*}")
    [[ $porder == *+eval ]] && pargs+=(--eval-first)
    if [[ $porder != random ]]; then
        pds=$ds-${porder/+/-} tag="-${porder/+/-}"
        mkdir -p "$pds"
        for f in "$ds"/*; do
            [[ -f $f && ! -e $pds/$(basename "$f") ]] && ln "$f" "$pds/"
        done
    fi
    for setting in $SETTINGS; do
        p=${setting%%:*}
        c=${setting##*:}
        if [[ ! -f $pds/parts.$p/partition.toml ]]; then
            rm -rf "$pds/parts.$p"
            lib_cg_create "$cap"
            t0=$(date +%s.%N)
            lib_cg_exec "$PREP" partition "$pds" --parts "$p" "${pargs[@]}" --mem-limit "$((cap / 2))" --quiet
            echo "partition scale=$scale p=$p order=$porder seconds=$(echo "$(date +%s.%N) - $t0" | bc)"
            lib_cg_remove
        fi
        for order in $ORDERS; do
            run "partitions-x$scale-p$p-c$c-$order$tag" "$pds" --set pipeline.mode='"partitions"' \
                --set pipeline.partitions="$p" --set pipeline.buffer_partitions="$c" \
                --set pipeline.partition_order="\"$order\""
        done
    done
    done
done

echo
echo "| dataset | run | rc | epochs | epoch s | epoch s after the first | test acc | rows read from features.bin MiB | partitions read/planned | partition MiB | avg request MiB | wall s |"
echo "|--|--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
printf '%s\n' "${rows[@]}"
