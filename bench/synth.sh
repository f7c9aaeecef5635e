#!/usr/bin/env bash
# bench/synth.sh - times `gnnprep synth` on the issue's reference size
# (20M nodes, avg in-degree 20 -> ~400M edges, 128-dim f32 features, 64
# classes), then `gnnprep check` on the result, and records both with the
# machine and the exact commands in bench/results/$NAME.md and .json.
#
#   bench/synth.sh                      # the reference run (~12 GB on disk)
#   NODES=1M NAME=synth-1m bench/synth.sh   # a quick smaller run
#
# Environment (defaults): BUILD (build) - build tree holding bin/gnnprep;
# WORK (bench/work, git-ignored) - where the dataset is written and then
# deleted (KEEP=1 keeps it); NODES (20M) DEG (20) DIM (128) CLASSES (64)
# SEED (1) DTYPE (f32); NAME (synth-20m) - result file name; DD (1) - also
# time `dd ... conv=fsync` of as many bytes as the dataset into WORK, as the
# file system's reference sequential write rate (DD=0 skips it).
# The benchmark reports; it asserts nothing about time (STYLE.md).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
WORK=${WORK:-bench/work}
NODES=${NODES:-20M}
DEG=${DEG:-20}
DIM=${DIM:-128}
CLASSES=${CLASSES:-64}
SEED=${SEED:-1}
DTYPE=${DTYPE:-f32}
NAME=${NAME:-synth-20m}
KEEP=${KEEP:-0}
DD=${DD:-1}

BIN="$BUILD/bin/gnnprep"
[ -x "$BIN" ] || { echo "bench/synth.sh: $BIN not found; build first (make build, or set BUILD=)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench/synth.sh: /usr/bin/time is missing; apt-get install time" >&2; exit 2; }

mkdir -p "$WORK" bench/results
OUT="$WORK/$NAME"
LOG="$WORK/$NAME.log"
if [ -e "$OUT" ]; then
    echo "bench/synth.sh: $OUT exists (a previous run kept it?); remove it first" >&2
    exit 2
fi

# Room for the dataset: 8 B/node indptr + 4 B/edge indices + stride B/node
# features (+ small files). Refuse early rather than fill the disk.
nodes_n=$(echo "$NODES" | awk '{ n = $0 + 0; s = tolower(substr($0, length($0)));
    if (s == "k") n *= 1e3; else if (s == "m") n *= 1e6; else if (s == "g") n *= 1e9; printf "%d", n }')
esize=4
[ "$DTYPE" = f16 ] && esize=2
row=$((DIM * esize))
stride=$row
if [ "$row" -le 512 ]; then stride=1; while [ "$stride" -lt "$row" ]; do stride=$((stride * 2)); done
else stride=$(( (row + 511) / 512 * 512 )); fi
need=$(( nodes_n * (8 + 4 * DEG + stride + 4 + 4) ))
avail=$(( $(df -P -B1 "$WORK" | awk 'NR==2 {print $4}') ))
echo "disk: $(df -h "$WORK" | awk 'NR==2 {print $4 " free on " $1 " (" $6 ")"}'); the dataset needs about $(numfmt --to=iec "$need")"
if [ "$avail" -lt $((need + (2 << 30))) ]; then
    echo "bench/synth.sh: not enough free space in $WORK; free some or set WORK=" >&2
    exit 2
fi

cmd_synth=("$BIN" synth "$OUT" --nodes "$NODES" --avg-degree "$DEG" --feat-dim "$DIM" --classes "$CLASSES" --seed "$SEED")
[ "$DTYPE" = f32 ] || cmd_synth+=(--dtype "$DTYPE")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "running: /usr/bin/time -v ${cmd_synth[*]}"
/usr/bin/time -v -o "$LOG.time" "${cmd_synth[@]}" | tee "$LOG"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# gnnprep check (verifies sizes, checksums and every id), when it exists.
check_status="not run"
check_wall=""
check_rss=""
if "$BIN" --help | grep -q "gnnprep check"; then
    echo "running: /usr/bin/time -v $BIN check $OUT"
    if /usr/bin/time -v -o "$LOG.check.time" "$BIN" check "$OUT" >"$LOG.check" 2>&1; then
        check_status="passed (exit 0)"
    else
        check_status="FAILED (exit $?)"
    fi
    tail -3 "$LOG.check"
    check_wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$LOG.check.time")
    check_rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$LOG.check.time")
fi
du_bytes=$(du -sb "$OUT" | cut -f1)
if [ "$KEEP" != 1 ]; then
    rm -rf "$OUT"
fi

# The file system's own sequential write rate for the same volume.
dd_rate=""
dd_count=$(( (du_bytes + (4 << 20) - 1) / (4 << 20) ))
if [ "$DD" = 1 ]; then
    dd_rate=$(dd if=/dev/zero of="$WORK/dd.tmp" bs=4M count="$dd_count" conv=fsync 2>&1 | awk -F', ' '/copied/ {print $NF}')
    rm -f "$WORK/dd.tmp"
    echo "dd: $dd_rate"
fi

# ---- collect ----
kv() { tr ' ' '\n' <"$LOG" | awk -F= -v k="$1" '$1 == k {print $2; exit}'; }
tv() { awk -F': ' -v k="$1" 'index($0, k) {print $2; exit}' "$LOG.time"; }
wall=$(tv "Elapsed (wall clock)")
wall_s=$(echo "$wall" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
rss_kb=$(tv "Maximum resident set size")
user_s=$(tv "User time")
sys_s=$(tv "System time")
cpu_pct=$(tv "Percent of CPU")
edges=$(kv edges)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "none")
dirty=$(git status --porcelain 2>/dev/null | grep -qE '^( M|M |\?\?) (prep/synth.c|core/)' && echo " (working tree has uncommitted changes to prep/synth.c or core/)" || true)
disk_dev=$(df -P "$WORK" | awk 'NR==2 {print $1}')
disk_model=$(lsblk -dno MODEL,SIZE "/dev/$(lsblk -no PKNAME "$disk_dev" 2>/dev/null | head -1)" 2>/dev/null || true)
[ -n "$disk_model" ] || disk_model=$(lsblk -dno NAME,SIZE,ROTA "$disk_dev" 2>/dev/null | awk '{print $1 " " $2 ", rota=" $3}')
cpu_model=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)

rate=$(awk -v b="$du_bytes" -v s="$wall_s" 'BEGIN { printf "%.0f MB/s", b / s / 1e6 }')
md="bench/results/$NAME.md"
json="bench/results/$NAME.json"
{
    echo "# gnnprep synth: $NODES nodes, avg in-degree $DEG, dim $DIM ($DTYPE), $CLASSES classes"
    echo
    echo "Recorded $(date -u +%Y-%m-%dT%H:%M:%SZ) by \`bench/synth.sh\`; commit \`$commit\`$dirty."
    echo
    echo "## Machine"
    echo
    echo "- CPU: $cpu_model, \`nproc\` = $(nproc)"
    echo "- memory (\`free -g\`):"
    echo
    free -g | sed 's/^/      /'
    echo
    echo "- kernel: \`uname -r\` = $(uname -r)"
    echo "- disk: $disk_dev ${disk_model:+($disk_model)}, $(df -h "$WORK" | awk 'NR==2 {print $2 " total, " $4 " free after the run"}')"
    echo "- load average before / after the run: $load_before / $load_after. Other engineers build and"
    echo "  test on the same 2 cores, so wall times are noisy: treat them as an upper bound."
    echo
    echo "## Commands"
    echo
    echo '```'
    echo "/usr/bin/time -v ${cmd_synth[*]}"
    [ "$check_status" = "not run" ] || echo "/usr/bin/time -v $BIN check $OUT"
    echo '```'
    echo
    echo "## Results"
    echo
    echo "| what | value |"
    echo "| --- | --- |"
    echo "| wall time (incl. fsync of every file) | ${wall_s} s |"
    echo "| user / system CPU | ${user_s} s / ${sys_s} s (${cpu_pct} of one core) |"
    echo "| peak RSS | $((rss_kb / 1024)) MiB |"
    echo "| nodes / edges | $(kv nodes) / $edges |"
    echo "| mean in-degree | $(kv mean_in_degree) |"
    echo "| in-degree p50 / p90 / p99 / p99.9 / max | $(kv in_degree_p50) / $(kv in_degree_p90) / $(kv in_degree_p99) / $(kv in_degree_p999) / $(kv max_in_degree) |"
    echo "| max out-degree | $(kv max_out_degree) |"
    echo "| edge homophily (default 0.8) | $(kv edge_homophily) |"
    echo "| train / val / test | $(kv train) / $(kv val) / $(kv test) |"
    echo "| dataset size | $(numfmt --to=iec "$du_bytes") ($du_bytes bytes) |"
    echo "| write rate (dataset bytes / wall time) | $rate |"
    echo "| gnnprep check | $check_status${check_wall:+, wall $check_wall, peak RSS $((check_rss / 1024)) MiB} |"
    [ -z "$dd_rate" ] || echo "| reference: \`dd if=/dev/zero bs=4M count=$dd_count conv=fsync\` (same volume) | $dd_rate |"
    echo
    echo "## Reading the numbers"
    echo
    busy=$(kv writer_busy_s)
    idle=$(kv writer_wait_s)
    echo "- gnnprep's one writer thread (appends each block to indptr, indices and features, hashing"
    echo "  and counting degrees as it goes) was busy $busy s and waited $idle s for the $(kv threads) generator"
    if awk -v b="$busy" -v i="$idle" 'BEGIN { exit !(4 * i < b) }'; then
        echo "  threads: the writer paced this run, not generation. Of its busy time, $(kv writer_cpu_s) s was CPU"
        echo "  (mostly the kernel copying into the page cache) and the rest blocked in write(2)"
        echo "  (dirty-page throttling, i.e. writeback) or waiting for a core."
    else
        echo "  threads: generation paced this run."
    fi
    echo "- The process got $(awk -v u="$user_s" -v s="$sys_s" -v w="$wall_s" 'BEGIN { printf "%.2f", (u + s) / w }') cores on average out of $(nproc) (user+sys CPU / wall);"
    echo "  otherwise its threads waited, for I/O or for CPU held by other processes (see the load average)."
    if [ -n "$dd_rate" ]; then
        echo "- dd wrote the same volume at $dd_rate against gnnprep's $rate overall. dd ran right after the"
        echo "  dataset was deleted, into page-cache pages just freed; on this VM the kernel's copy into pages"
        echo "  touched for the first time has been seen to cost up to 10x more CPU than into reused ones, so"
        echo "  dd's figure is optimistic and write CPU varies from run to run."
    fi
    echo "- \`gnnprep check\` ran right after generation, while most of the dataset was still in the page"
    echo "  cache ($(free -g | awk '/^Mem:/ {print $2}') GiB of RAM), so its time is not a cold read from disk."
    echo
    echo "gnnprep's own summary:"
    echo
    echo '```'
    cat "$LOG"
    echo '```'
} >"$md"

{
    echo "{"
    echo "  \"benchmark\": \"gnnprep synth\","
    echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
    echo "  \"commit\": \"$commit\","
    echo "  \"command\": \"${cmd_synth[*]}\","
    echo "  \"machine\": {\"nproc\": $(nproc), \"mem_gib\": $(free -g | awk '/^Mem:/ {print $2}'), \"kernel\": \"$(uname -r)\", \"disk\": \"$disk_dev\", \"load_before\": \"$load_before\", \"load_after\": \"$load_after\"},"
    echo "  \"nodes\": $(kv nodes), \"edges\": $edges, \"feat_dim\": $DIM, \"dtype\": \"$DTYPE\", \"classes\": $CLASSES, \"seed\": $SEED,"
    echo "  \"wall_s\": $wall_s, \"user_s\": $user_s, \"sys_s\": $sys_s, \"peak_rss_kib\": $rss_kb,"
    echo "  \"mean_in_degree\": $(kv mean_in_degree), \"max_in_degree\": $(kv max_in_degree), \"max_out_degree\": $(kv max_out_degree),"
    echo "  \"in_degree_percentiles\": {\"p50\": $(kv in_degree_p50), \"p90\": $(kv in_degree_p90), \"p99\": $(kv in_degree_p99), \"p99.9\": $(kv in_degree_p999)},"
    echo "  \"edge_homophily\": $(kv edge_homophily), \"bytes\": $du_bytes,"
    echo "  \"writer_busy_s\": $(kv writer_busy_s), \"writer_wait_s\": $(kv writer_wait_s), \"writer_cpu_s\": $(kv writer_cpu_s), \"threads\": $(kv threads),"
    echo "  \"dd_reference\": \"$dd_rate\","
    echo "  \"check\": \"$check_status\""
    echo "}"
} >"$json"
rm -f "$LOG" "$LOG.time" "$LOG.check" "$LOG.check.time"
echo "wrote $md and $json"
