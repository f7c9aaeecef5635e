#!/usr/bin/env bash
# bench/packed_tier.sh - the packed mode's cache tier (docs/packed.md, "The
# cache tier's layout"): the same job packed without a cache tier and with
# one (sized by --disk-limit, or by --cache-limit), against online direct
# I/O, on out-of-core datasets under a memory cap, with fio's sequential
# bandwidth at each kind of request beside the achieved read rates.
# Writes RESULTS/NAME.md (raw files under WORK).
#
#   bench/packed_tier.sh                           # cap 1G, dim 128 f32 at 4x the cap
#   SETS="128:f16:4 768:f32:4" bench/packed_tier.sh
#
# Per dataset of SETS (DIM:DTYPE:SCALE, features = SCALE x CAP; gnnprep
# synth, made once under WORK), under one `flock /tmp/sluice-bench.lock`:
#   1. one gnnprep pack per variant of VARIANTS, in the cap (timed; disk
#      space, tiers, and the layout's blocks per batch from its output):
#        none       no cache tier (--cache-limit 0)
#        disk:F     --disk-limit F x the size of the pack without a cache
#                   (the cache tier gnnprep pack chooses to fit it)
#        cache:SIZE --cache-limit SIZE
#   2. the online run: pipeline.io = direct, cache policy auto;
#   3. the packed run of each variant;
#   4. fio, sequential direct reads of features.bin: one job of the mean
#      chunk request, one at a time (an extractor thread's chunk read), and
#      one of the mean cache extent with 16 in flight on io_uring (an
#      extractor thread's cache reads); and random direct reads of the
#      pack's cache.bin of the mean extent, 16 in flight (where the extents
#      really are).
# With BASE_BUILD (another build tree, e.g. of main), each packed run is
# made again with its gnnlaunch on the same pack, right after this
# build's: base and this build side by side (the pack is this build's
# gnnprep's; the format must be one both read).
# Each run drops the page cache first and runs in a cgroup of CAP. Epoch 1
# is the cold start; epochs 2..EPOCHS are the measured ones.
#
# Environment (defaults): BUILD (build), WORK (bench/work), RESULTS
# (bench/results), NAME (packed-tier-DATE), CAP (1G), FB_FRAC (0.3), SETS
# ("128:f32:4"), VARIANTS ("none disk:0.8 cache:1G"), EPOCHS (3),
# TRAIN_BATCHES (32), BATCH (1000), FANOUTS ([10,10]), DEGREE (10),
# EXTRACTORS (2), SAMPLERS (2), PACK_MEM (512M), FIO_SECS (10),
# KEEP_DATA (1: 0 deletes each dataset after its runs), BASE_BUILD (none),
# REPEAT (1: each packed run, of each build in turn, made this many times;
# fio measured at the first).
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=bench/packed_tier.sh
source bench/lib.sh

CMDLINE="$0${*:+ $*}"
ENV_SET=""
for v in BUILD WORK RESULTS NAME CAP FB_FRAC SETS VARIANTS EPOCHS TRAIN_BATCHES BATCH FANOUTS DEGREE EXTRACTORS \
    SAMPLERS PACK_MEM FIO_SECS KEEP_DATA BASE_BUILD REPEAT; do
    [[ -n ${!v+x} ]] && ENV_SET+="$v=${!v} "
done
[[ $# -eq 0 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
RESULTS=${RESULTS:-bench/results}
NAME=${NAME:-packed-tier-$(date -u +%Y-%m-%d)}
CAP=${CAP:-1G}
FB_FRAC=${FB_FRAC:-0.3}
SETS=${SETS:-128:f32:4}
VARIANTS=${VARIANTS:-none disk:0.8 cache:1G}
EPOCHS=${EPOCHS:-3}
TRAIN_BATCHES=${TRAIN_BATCHES:-32}
BATCH=${BATCH:-1000}
FANOUTS=${FANOUTS:-[10,10]}
DEGREE=${DEGREE:-10}
EXTRACTORS=${EXTRACTORS:-2}
SAMPLERS=${SAMPLERS:-2}
PACK_MEM=${PACK_MEM:-512M}
FIO_SECS=${FIO_SECS:-10}
KEEP_DATA=${KEEP_DATA:-1}
BASE_BUILD=${BASE_BUILD:-}
REPEAT=${REPEAT:-1}
CAP_BYTES=$(lib_bytes "$CAP")
FB_MB=$(python3 -c "print(int($FB_FRAC * ($CAP_BYTES >> 20)))")

lib_need_tools fio jq python3 flock
lib_need_bins "$BUILD" gnnlaunch gnnprep gnn-extractor gnn-sampler gnn-trainer gnn-releaser
[[ -z $BASE_BUILD ]] || lib_need_bins "$BASE_BUILD" gnnlaunch gnn-extractor gnn-sampler gnn-trainer gnn-releaser
GL=$BUILD/bin/gnnlaunch
PREP=$BUILD/bin/gnnprep
lib_cg_detect
mkdir -p "$WORK" "$RESULTS"
RUN=$WORK/packed-tier-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RUN"
RUN_IDS=()
cleanup() {
    lib_cg_remove
    lib_shm_sweep "${RUN_IDS[@]}" >/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
LOCK=${LOCK:-/tmp/sluice-bench.lock} # a smoke test of the script may name another

# From a log's epoch lines: epoch 1's seconds, the mean of epochs 2..E, MB read and reads per epoch.
epoch_stats() { # LOG
    python3 - "$1" <<'PY'
import re, sys
rows = []
for l in open(sys.argv[1]):
    m = re.match(r"epoch (\d+)/(\d+) .* seconds=([0-9.]+) .*\| read ([0-9.]+) MB in (\d+) reads", l)
    if m:
        rows.append((int(m[1]), float(m[3]), float(m[4]), int(m[5])))
first = [r for r in rows if r[0] == 1]
rest = [r for r in rows if r[0] > 1]
n = max(len(rest), 1)
e = max(len(rows), 1)
print("%.2f %.2f %.1f %.0f" % (first[0][1] if first else float("nan"), sum(r[1] for r in rest) / n,
                                 sum(r[2] for r in rows) / e, sum(r[3] for r in rows) / e))
PY
}

run_capped() { # LOG cmd...
    local log=$1
    shift
    lib_drop_caches
    lib_cg_create "$CAP_BYTES"
    local rc=0 t0=$EPOCHREALTIME
    if [[ -n $CG ]]; then
        sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@" >"$log" 2>&1 </dev/null || rc=$?
    else
        "$@" >"$log" 2>&1 </dev/null || rc=$?
    fi
    python3 -c "print('%.2f' % ($EPOCHREALTIME - $t0))" >"$log.wall"
    lib_cg_summary >"$log.cg.json"
    lib_cg_remove
    local rid
    rid=$(lib_run_id "$log")
    [[ -z $rid ]] || RUN_IDS+=("$rid")
    return "$rc"
}

tensors_same() { # CKPT_A CKPT_B
    python3 - "$1" "$2" <<'PY'
import struct, sys
def tensors(p):
    b = open(p, "rb").read()
    return b[8 + struct.unpack("<Q", b[:8])[0]:]
print("yes" if tensors(sys.argv[1]) == tensors(sys.argv[2]) else "no")
PY
}

fio_mbs() { # FILE BS IODEPTH OUT.json [RW (read)] (fio splits file names at ':': escaped)
    local ioe=psync
    [[ $3 -gt 1 ]] && ioe=io_uring
    lib_drop_caches
    fio --name=seq --filename="${1//:/\\:}" --rw="${5:-read}" --direct=1 --ioengine="$ioe" --iodepth="$3" --bs="$2" \
        --numjobs=1 --time_based --runtime="$FIO_SECS" --output-format=json >"$4"
    jq '.jobs[0].read.bw_bytes / 1048576' "$4"
}

MD=$RESULTS/$NAME.md
TAB=$RUN/table.md
PACKTAB=$RUN/packs.md
: >"$TAB"
: >"$PACKTAB"
: >"$RUN/identity.txt"
: >"$RUN/load.txt"
: >"$RUN/readbench.md"
for set in $SETS; do
    IFS=: read -r dim dtype scale <<<"$set"
    stride=$(lib_row_stride "$dim" "$dtype")
    nodes=$(python3 -c "print(int($scale * $CAP_BYTES / $stride))")
    ntrain=$((TRAIN_BATCHES * BATCH))
    ds=$(lib_dataset "$WORK" "$PREP" "$nodes" "$dim" "$dtype" "$DEGREE" "$ntrain" "$BATCH" 1)
    label=d$dim-$dtype-x$scale
    cfg=$RUN/$label.toml
    cat >"$cfg" <<EOF
[dataset]
path = "$ds"
[model]
kind = "sage"
fanouts = $FANOUTS
hidden = 128
[train]
epochs = $EPOCHS
batch_size = $BATCH
seed = 1
[pipeline]
extractors = $EXTRACTORS
samplers = $SAMPLERS
feature_buffer_mb = $FB_MB
ordered = true
EOF
    grep -v '^feature_buffer_mb' "$cfg" >"$RUN/$label.online.toml"
    feat=$(numfmt --to=iec "$(stat -c %s "$ds/features.bin")")
    lib_log "$label: waiting for $LOCK"
    exec 9>"$LOCK"
    flock 9
    echo "$label: $(cut -d' ' -f1-3 /proc/loadavg) at the start" >>"$RUN/load.txt"
    full=0
    for var in $VARIANTS; do
        pack=$RUN/$label.$var.pack
        opts=(--epochs "$EPOCHS" --mem-limit "$PACK_MEM")
        case $var in
        none) opts+=(--cache-limit 0) ;;
        disk:*)
            [[ $full -gt 0 ]] || lib_die "variant $var needs the variant none before it"
            opts+=(--disk-limit "$(python3 -c "print(int(${var#disk:} * $full))")") ;;
        cache:*) opts+=(--cache-limit "${var#cache:}") ;;
        *) lib_die "unknown variant $var (none, disk:F, cache:SIZE)" ;;
        esac
        lib_log "$label: packing ($var): ${opts[*]}"
        echo "$PREP pack $ds $cfg $pack ${opts[*]}" >"$RUN/$label.$var.pack.cmd"
        run_capped "$RUN/$label.$var.pack.log" "$PREP" pack "$ds" "$cfg" "$pack" "${opts[@]}" ||
            { tail -3 "$RUN/$label.$var.pack.log" >&2; lib_die "gnnprep pack ($var) failed"; }
        "$PREP" info "$pack" >"$RUN/$label.$var.pack.info"
        if [[ -x $BUILD/bin/pack-read-bench ]] && grep -q '^cache_rows=[1-9]' "$RUN/$label.$var.pack.log"; then
            "$BUILD/bin/pack-read-bench" "$pack" --threads "$EXTRACTORS" --rounds 2 >"$RUN/$label.$var.readbench" ||
                lib_die "pack-read-bench ($var) failed"
            sed -n 's/^round=2 mode=\([a-z]*\) .*cache_reads=\([0-9]*\) cache_MiB=\([0-9.]*\) cache_req_KiB=\([0-9.]*\) .*wall_s=\([0-9.]*\) .*MiB_per_s=\([0-9]*\) .*/| '"$label"' | '"$var"' | \1 | \2 | \4 | \5 | \6 |/p' \
                "$RUN/$label.$var.readbench" >>"$RUN/readbench.md"
        fi
        disk=$(du -sb "$pack" | cut -f1)
        [[ $var != none ]] || full=$disk
        python3 - "$label" "$var" "$RUN/$label.$var.pack.log" "$RUN/$label.$var.pack.info" "$disk" >>"$PACKTAB" <<'PY'
import sys
label, var, log, info, disk = sys.argv[1:]
kv = {}
for f in (log, info):
    for l in open(f):
        if "=" in l and " " not in l.split("=")[0]:
            k, v = l.strip().split("=", 1)
            kv.setdefault(k, v)
g = lambda k, d="": kv.get(k, d)
cache = f"{int(g('cache_rows', 0))} rows, {int(g('cache_bytes', 0)) / 2**20:.0f} MiB ({g('cache_chosen_by', '-')})" \
    if int(g("cache_rows", 0)) else "none"
blocks = (f"{float(g('cache_blocks_4k_per_batch')):.0f} / {float(g('cache_blocks_4k_per_batch_node_order')):.0f} / "
          f"{float(g('cache_blocks_4k_per_batch_random')):.0f}") if int(g("cache_rows", 0)) else ""
b64 = (f"{float(g('cache_blocks_64k_per_batch')):.0f} / {float(g('cache_blocks_64k_per_batch_node_order')):.0f} / "
       f"{float(g('cache_blocks_64k_per_batch_random')):.0f}") if int(g("cache_rows", 0)) else ""
ext = (f"{float(g('cache_extents_per_batch')):.0f} ({float(g('cache_read_per_batch')) / 2**20:.2f} MiB) / "
       f"{float(g('cache_extents_per_batch_node_order')):.0f} ({float(g('cache_read_per_batch_node_order')) / 2**20:.2f} MiB)"
       if int(g("cache_rows", 0)) else "")
rows = f"{float(g('cache_rows_per_batch')):.0f}" if int(g("cache_rows", 0)) else ""
print(f"| {label} | {var} | {float(g('seconds')):.1f} | {int(disk) / 2**30:.2f} GiB | {int(g('hot_rows'))} | {cache} | "
      f"{int(g('packed_rows'))} | {float(g('replication_with_cache')):.2f} / {float(g('replication_without_cache')):.2f} | "
      f"{rows} | {ext} | {blocks} | {b64} |")
PY
    done
    lib_log "$label: online direct"
    run_capped "$RUN/$label.online.log" "$GL" --cpu "$RUN/$label.online.toml" --run-name "ptier-$$-${label//./_}-online" \
        --set "train.checkpoint_dir=\"$RUN/ck-$label-online\"" || { tail -3 "$RUN/$label.online.log" >&2; lib_die "online run failed"; }
    read -r o1 os omb ord < <(epoch_stats "$RUN/$label.online.log")
    acc_o=$(sed -n 's/^test_acc=\([0-9.]*\).*/\1/p' "$RUN/$label.online.log")
    echo "| $label | $feat | online direct | $o1 | $os | $omb | $ord | | | | | | | $acc_o |" >>"$TAB"
    builds=("this:$BUILD")
    [[ -z $BASE_BUILD ]] || builds+=("base:$BASE_BUILD")
    declare -A FIO_C=() FIO_S=() FIO_R=()
    for var in $VARIANTS; do
     for rep in $(seq "$REPEAT"); do
      for bb in "${builds[@]}"; do
        who=${bb%%:*}
        gl=${bb#*:}/bin/gnnlaunch
        tag=$var
        [[ $who == this ]] || tag=$var.$who
        [[ $rep == 1 ]] || tag=$tag.run$rep
        label_who=$who
        [[ $REPEAT == 1 ]] || label_who="$who, run $rep"
        pack=$RUN/$label.$var.pack
        lib_log "$label: packed ($var, $who build)"
        run_capped "$RUN/$label.$tag.log" "$gl" --cpu "$cfg" --run-name "ptier-$$-${label//./_}-${tag//[:.]/_}" \
            --set pipeline.mode=packed --set "pipeline.pack=\"$pack\"" \
            --set "train.checkpoint_dir=\"$RUN/ck-$label-$tag\"" || { tail -3 "$RUN/$label.$tag.log" >&2; lib_die "packed run ($tag) failed"; }
        same=$(tensors_same "$RUN/ck-$label-online/latest.safetensors" "$RUN/ck-$label-$tag/latest.safetensors")
        echo "$label $tag same_tensors=$same" >>"$RUN/identity.txt"
        rm -rf "$RUN/ck-$label-$tag"
        read -r p1 ps pmb prd < <(epoch_stats "$RUN/$label.$tag.log")
        # the extractors' reads: all, MiB, seconds; of them the cache extents: reads, MiB, seconds; the time some
        # thread of the rank was reading (0 where the build does not say) (summed over ranks)
        read -r n mib s cn cmib cs busy < <(python3 - "$RUN/$label.$tag.log" <<'PY'
import re, sys
t = [0.0] * 7
for l in open(sys.argv[1]):
    m = re.search(r"packed: (\d+) reads, ([0-9.]+) MiB, ([0-9.]+) s reading .* of them (\d+) reads of cache extents, "
                  r"([0-9.]+) MiB in ([0-9.]+) s", l)
    if m:
        b = re.search(r"reading ([0-9.]+) s \(some thread reading\)", l)
        t = [a + float(x) for a, x in zip(t, list(m.groups()) + [b[1] if b else 0])]
print(" ".join("%g" % x for x in t))
PY
)
        rank_rate=$(python3 -c "print('%.0f' % ($mib / $busy) if $busy > 0 else '')")
        chunk_req=$(python3 -c "print(max(4096, int(($mib - $cmib) * 1048576 / max($n - $cn, 1)) // 4096 * 4096))")
        chunk_rate=$(python3 -c "print('%.0f' % (($mib - $cmib) / max($s - $cs, 1e-9)))")
        [[ $who == this && $cn != 0 ]] && chunk_rate="" # overlapped: no time of the chunk reads alone
        [[ -n ${FIO_C[$who.$var]:-} ]] ||
            FIO_C[$who.$var]=$(fio_mbs "$ds/features.bin" "$chunk_req" 1 "$RUN/$label.$tag.fio-chunk.json")
        fio_chunk=${FIO_C[$who.$var]}
        cache_col="" fio_cache_col=""
        if python3 -c "import sys; sys.exit(0 if $cn > 0 else 1)"; then
            ext_req=$(python3 -c "print(max(4096, int($cmib * 1048576 / $cn) // 4096 * 4096))")
            cache_rate=$(python3 -c "print('%.0f' % ($cmib / max($cs, 1e-9)))")
            if [[ -z ${FIO_S[$who.$var]:-} ]]; then
                FIO_S[$who.$var]=$(fio_mbs "$ds/features.bin" "$ext_req" 16 "$RUN/$label.$tag.fio-cache.json")
                FIO_R[$who.$var]=$(fio_mbs "$pack/cache.bin" "$ext_req" 16 "$RUN/$label.$tag.fio-cache-rand.json" randread)
            fi
            fio_cache=${FIO_S[$who.$var]} fio_rand=${FIO_R[$who.$var]}
            cache_col="$(python3 -c "print('%.0f reads, %.0f MiB at %s MiB/s' % ($cn / $EPOCHS, $cmib / $EPOCHS, $cache_rate))")"
            fio_cache_col="$(python3 -c "print('%.0f seq / %.0f random in cache.bin (%d KiB, 16 in flight)' % ($fio_cache, $fio_rand, $ext_req >> 10))")"
        fi
        acc_p=$(sed -n 's/^test_acc=\([0-9.]*\).*/\1/p' "$RUN/$label.$tag.log")
        python3 - "$label" "$feat" "$var ($label_who)" "$p1" "$ps" "$pmb" "$prd" "$chunk_rate" "$fio_chunk" "$chunk_req" \
            "$cache_col" "$fio_cache_col" "$os" "$acc_p" "$rank_rate" >>"$TAB" <<'PY'
import sys
(label, feat, var, p1, ps, pmb, prd, crate, fio, req, cache_col, fio_cache_col, os_, acc, rrate) = sys.argv[1:]
print(f"| {label} | {feat} | packed, {var} | {float(p1):.2f} | {float(ps):.2f} | {float(pmb):.0f} | {float(prd):.0f} | "
      f"{rrate} | {crate} | {float(fio):.0f} ({int(req) >> 10} KiB) | {cache_col} | {fio_cache_col} | {float(os_) / float(ps):.1f}x | {acc} |")
PY
        lib_log "$label $tag: packed ${ps}s an epoch (online ${os}s); tensors identical: $same"
      done
     done
    done
    echo "$label: $(cut -d' ' -f1-3 /proc/loadavg) at the end" >>"$RUN/load.txt"
    flock -u 9
    exec 9>&-
    rm -rf "$RUN/ck-$label-online" "$RUN"/$label.*.pack
    [[ $KEEP_DATA == 1 ]] || rm -rf "$ds"
done
{
    echo "# The packed mode's cache tier ($(date -u +%Y-%m-%d))"
    echo
    echo "Command: \`${ENV_SET}$CMDLINE\` at commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')."
    echo "Machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/ {print $2}') GiB RAM,"
    echo "disk $(lib_disk_of "$WORK"); memory cap $CAP per run ($(lib_cg_describe | cut -d: -f1)), page cache dropped before each run."
    echo "Job: GraphSAGE, fanouts $FANOUTS, batch $BATCH, $TRAIN_BATCHES training batches an epoch, $EPOCHS epochs,"
    echo "pipeline.extractors = $EXTRACTORS, samplers = $SAMPLERS, pipeline.ordered = true; packed runs: feature buffer"
    echo "$FB_MB MiB (it sizes the hot tier); online: pipeline.io = direct, cache policy auto, sized to the cap by gnnlaunch."
    echo "Packing: \`gnnprep pack --epochs $EPOCHS --mem-limit $PACK_MEM\` and the variant's option, in the same cap."
    echo
    echo "## Packs"
    echo
    echo "Variants: none = \`--cache-limit 0\`; disk:F = \`--disk-limit\` F x the pack without a cache (gnnprep pack sizes"
    echo "the cache tier to fit); cache:SIZE = \`--cache-limit SIZE\`. Replication: stored rows per distinct row outside"
    echo "the hot tier, with the cache tier / as if its rows were replicated. Blocks and extents a batch's cache rows"
    echo "touch, means over all batches: first-touch order (the pack's) / node order / uniformly random places (expected)."
    echo
    echo "| dataset | variant | pack s | pack disk | hot rows | cache tier | packed rows | replication | cache rows / batch | extents (bytes) / batch | 4 KiB blocks / batch | 64 KiB blocks / batch |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    cat "$PACKTAB"
    echo
    echo "## Runs"
    echo
    echo "Epoch 1 is the cold start; \"epoch s\" is the mean of epochs 2..$EPOCHS. MB and reads per epoch: the extractor's,"
    echo "the run's total over its epochs (the packed sampler's batch image reads come on top, one per batch)."
    echo "\"rank MiB/s\": all the extractor's bytes over the time during which some thread of it was reading (what the"
    echo "disk gave the rank; builds before it do not say). \"chunk MiB/s\": the packed extractors' chunk reads, bytes over"
    echo "the time spent in them summed over the threads (one read stream's rate; empty where the chunk's rows are read"
    echo "beside the cache extents); fio: one job of sequential direct reads of features.bin of the mean chunk read's"
    echo "size, one at a time. \"cache reads / epoch\": the cache extents' reads, bytes and rate (bytes over the"
    echo "time the threads spent in reads with extents in flight, summed over the threads: with the overlap that time"
    echo "also reads the chunk's rows); fio beside it: direct reads of the mean extent's size, 16 in flight on io_uring"
    echo "(what one extractor thread issues), sequential in features.bin and random in the pack's cache.bin."
    echo "Speedup: online epoch s over packed epoch s. (this): the build measured; (base): BASE_BUILD on the same pack."
    echo
    echo "| dataset | features | mode | epoch 1 s | epoch s | MB read / epoch | reads / epoch | rank MiB/s | chunk MiB/s | fio seq MiB/s (request) | cache reads / epoch | fio MiB/s (request) | speedup | test_acc |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    cat "$TAB"
    echo
    if [[ -s $RUN/readbench.md ]]; then
        echo "## The reads alone"
        echo
        echo "\`pack-read-bench PACK --threads $EXTRACTORS --rounds 2\` (bench/pack_read_bench.c) after packing: every chunk and"
        echo "cache extent of the pack (all its epochs) read as the extractor threads read them, nothing else running;"
        echo "serial: rows and tail, then the extents (the order before the overlap); overlap: the tail's blocks, then the"
        echo "rows and the extents together. Round 2 of 2 (the modes take turns)."
        echo
        echo "| dataset | variant | mode | cache extents | mean extent KiB | wall s | MiB/s (all reads) |"
        echo "|---|---|---|---|---|---|---|"
        cat "$RUN/readbench.md"
        echo
    fi
    echo "Load average (1, 5, 15 min) while the lock was held:"
    sed 's/^/- /' "$RUN/load.txt"
    echo
    echo "Checkpoint tensors of the online and packed runs identical, byte for byte (pipeline.ordered = true):"
    sed 's/^/- /' "$RUN/identity.txt"
    echo
    echo "Raw logs, configs, \`gnnprep info\` of each pack and fio's JSON: $RUN (not in git)."
} >"$MD"
lib_log "wrote $MD"
