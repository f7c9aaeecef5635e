# shellcheck shell=bash
# bench/lib.sh - helpers shared by bench/outofcore.sh and bench/scaling.sh
# (sourced, not run): the machine's description, a memory cap on one
# training run through a cgroup, dropping the page cache, making the
# synthetic datasets once, and running gnnlaunch with a per-second sampler
# of the cgroup's memory and the disk's counters beside it.
#
# The memory cap (docs/benchmarks.md, "The memory cap"):
#   - cgroup v2 (/sys/fs/cgroup is cgroup2fs): a child /sys/fs/cgroup/
#     sluice-bench.PID.N with memory.max = cap and memory.swap.max = 0,
#     "+memory" written to the root's cgroup.subtree_control if missing;
#   - cgroup v1 with the memory controller at /sys/fs/cgroup/memory (hybrid
#     hosts, where the v2 hierarchy has no memory controller): a child of the
#     script's own memory cgroup with memory.limit_in_bytes = cap (and
#     memory.memsw.limit_in_bytes where swap is accounted);
#   - CAP_METHOD=external: no cgroup of our own; the caller already runs the
#     script under a cap (systemd-run --user --scope -p MemoryMax=..., a VM).
# Either way the page cache of the files a run reads is charged to the
# capped group, as the papers cap host memory. Each run gets a fresh
# cgroup (so its peak is its own); cg_remove kills what is left in it and
# removes it; the scripts call it from their EXIT trap.
#
# Every function prints errors on stderr and returns non-zero; callers run
# under `set -euo pipefail`.

LIB_PROG=${LIB_PROG:-bench}

lib_die() { echo "$LIB_PROG: $*" >&2; exit 2; }
lib_log() { echo "# $*" >&2; }

# Bytes from a size with an optional K/M/G/T suffix (powers of 1024).
lib_bytes() {
    local s=${1^^}
    s=${s%IB}
    s=${s%B}
    [[ $s =~ ^[0-9]+[KMGT]?$ ]] || { echo "$LIB_PROG: '$1' is not a size (e.g. 512M, 1G)" >&2; return 2; }
    numfmt --from=iec "$s"
}

lib_need_tools() { # tool...
    local t missing=()
    for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
    [[ ${#missing[@]} -eq 0 ]] ||
        lib_die "missing: ${missing[*]}; run scripts/install-deps.sh --bench (as root)"
}

lib_need_bins() { # BUILD prog...
    local b=$1 p
    shift
    for p in "$@"; do
        [[ -x $b/bin/$p ]] || lib_die "$b/bin/$p not found; build first (cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build $b), or set BUILD="
    done
}

# ---- the machine ------------------------------------------------------------------------

# The block device holding a path: prints "NAME" (e.g. vda, nvme0n1).
lib_disk_of() {
    local src dev parent
    src=$(df -P "$1" | awk 'NR == 2 { print $1 }')
    dev=$(basename "$(readlink -f "$src" 2>/dev/null || echo "$src")")
    parent=$(lsblk -no PKNAME "/dev/$dev" 2>/dev/null | head -1 || true)
    [[ -n $parent ]] && dev=$parent
    echo "$dev"
}

# A JSON object describing the machine, the build and the commit.
lib_machine_json() { # BUILD PATH_ON_DATA_DISK
    local build=$1 path=$2 dev
    dev=$(lib_disk_of "$path")
    python3 - "$build" "$path" "$dev" <<'PY'
import json, os, platform, subprocess, sys
build, path, dev = sys.argv[1:4]
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""
def read(p):
    try:
        with open(p) as f:
            return f.read().strip()
    except OSError:
        return ""
cpu = ""
for line in read("/proc/cpuinfo").splitlines():
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
mem_kib = 0
for line in read("/proc/meminfo").splitlines():
    if line.startswith("MemTotal:"):
        mem_kib = int(line.split()[1])
q = f"/sys/block/{dev}/queue"
btype = ""
for line in read(os.path.join(build, "CMakeCache.txt")).splitlines():
    if line.startswith("CMAKE_BUILD_TYPE:"):
        btype = line.split("=", 1)[1]
commit = sh("git rev-parse HEAD")
dirty = sh("git status --porcelain --untracked-files=no")
osr = dict(l.split("=", 1) for l in read("/etc/os-release").splitlines() if "=" in l)
m = {
    "cpu_model": cpu,
    "cores": os.cpu_count(),
    "mem_total_bytes": mem_kib * 1024,
    "kernel": platform.release(),
    "os": osr.get("PRETTY_NAME", "").strip('"'),
    "virtualization": sh("systemd-detect-virt 2>/dev/null") or "unknown",
    "disk": {
        "device": dev,
        "model": sh(f"lsblk -dno MODEL /dev/{dev} 2>/dev/null"),
        "size": sh(f"lsblk -dno SIZE /dev/{dev} 2>/dev/null"),
        "rotational": read(f"{q}/rotational"),
        "logical_block": read(f"{q}/logical_block_size"),
        "scheduler": read(f"{q}/scheduler"),
        "nr_requests": read(f"{q}/nr_requests"),
        "filesystem": sh(f"df -PT '{path}' | awk 'NR==2 {{print $2}}'"),
        "mount": sh(f"df -P '{path}' | awk 'NR==2 {{print $6}}'"),
    },
    "commit": commit,
    "commit_short": commit[:7],
    "dirty": bool(dirty),
    "build_dir": build,
    "build_type": btype,
    "tools": {
        "fio": sh("fio --version"),
        "gnuplot": sh("gnuplot --version"),
        "perf": sh("perf --version 2>/dev/null"),
        "python3": platform.python_version(),
    },
    "swap_total_bytes": sum(int(l.split()[1]) * 1024 for l in read("/proc/meminfo").splitlines() if l.startswith("SwapTotal:")),
}
print(json.dumps(m, indent=1))
PY
}

# ---- the page cache ---------------------------------------------------------------------

# Empties the page cache so that a run starts cold: as root, sync and
# drop_caches (the whole machine's); otherwise posix_fadvise(DONTNEED) on
# the given files (what a user can do to their own files).
lib_drop_caches() { # [file...]
    sync
    if [[ $(id -u) -eq 0 && -w /proc/sys/vm/drop_caches ]]; then
        echo 3 >/proc/sys/vm/drop_caches
    elif [[ $# -gt 0 ]]; then
        python3 - "$@" <<'PY'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
    fi
}

lib_drop_method() {
    if [[ $(id -u) -eq 0 && -w /proc/sys/vm/drop_caches ]]; then
        echo "sync; echo 3 > /proc/sys/vm/drop_caches"
    else
        echo "posix_fadvise(POSIX_FADV_DONTNEED) on the dataset's files (not root)"
    fi
}

# ---- the memory cap ---------------------------------------------------------------------

CG_MODE=""   # v2, v1 or external
CG_KIND=""   # the layout of the memory files read: v2, v1 or "" (none)
CG_PARENT="" # where run cgroups are made
CG=""        # the current run's cgroup, "" when none
CG_OBS=""    # external: the caller's cgroup, read (not written) by the sampler
CG_SEQ=0

# Picks how runs are capped. CAP_METHOD: auto (default), external.
lib_cg_detect() {
    local method=${CAP_METHOD:-auto} own
    local root=${CG_ROOT:-/sys/fs/cgroup}
    if [[ $method == external ]]; then
        CG_MODE=external
        # the caller's own v2 cgroup, when readable: memory is sampled from it
        own=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
        if [[ -f $root/cgroup.controllers && -r $root${own%/}/memory.current ]]; then
            CG_KIND=v2
            CG_OBS=$root${own%/}
        fi
        return 0
    fi
    [[ $method == auto ]] || lib_die "CAP_METHOD=$method: use auto or external"
    if [[ $(id -u) -ne 0 ]]; then
        lib_die "capping a run's memory with a cgroup needs root. Without root, run the whole script under a cap and say so:
    systemd-run --user --scope -p MemoryMax=CAP -p MemorySwapMax=0 $0 --cap-external [--cap CAP] ...
  (or in a VM with that much memory); see docs/benchmarks.md"
    fi
    if [[ -f $root/cgroup.controllers ]] && grep -qw memory "$root/cgroup.controllers"; then
        CG_MODE=v2
        CG_KIND=v2
        CG_PARENT=$root
        if ! grep -qw memory "$root/cgroup.subtree_control"; then
            echo +memory >"$root/cgroup.subtree_control" ||
                lib_die "cannot enable the memory controller in $root/cgroup.subtree_control"
        fi
    elif [[ -f $root/memory/memory.limit_in_bytes ]]; then
        CG_MODE=v1
        CG_KIND=v1
        own=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
        CG_PARENT=$root/memory${own%/}
        [[ -w $CG_PARENT ]] || CG_PARENT=$root/memory
    else
        lib_die "no cgroup memory controller under $root (neither cgroup v2 with 'memory' nor v1's memory/); run under a cap yourself and pass --cap-external (docs/benchmarks.md)"
    fi
}

lib_cg_describe() {
    case $CG_MODE in
    v2) echo "cgroup v2: a child of $CG_PARENT per run, memory.max = cap, memory.swap.max = 0; page cache and shared memory are charged to it" ;;
    v1) echo "cgroup v1 memory controller (this host's v2 hierarchy has no memory controller): a child of $CG_PARENT per run, memory.limit_in_bytes = cap; page cache and shared memory are charged to it" ;;
    external) echo "external: the script ran inside a cap set by the caller (CAP_METHOD=external / --cap-external); no cgroup of its own${CG_OBS:+ (memory sampled from $CG_OBS, shared by all runs)}" ;;
    esac
}

# Makes a fresh cgroup for one run with the cap, sets CG.
lib_cg_create() { # CAP_BYTES
    local cap=$1
    CG=""
    [[ $CG_MODE == external ]] && return 0
    CG_SEQ=$((CG_SEQ + 1))
    local cg=$CG_PARENT/sluice-bench.$$.$CG_SEQ
    mkdir "$cg" || lib_die "cannot create $cg"
    CG=$cg
    if [[ $CG_MODE == v2 ]]; then
        echo "$cap" >"$cg/memory.max"
        [[ -f $cg/memory.swap.max ]] && echo 0 >"$cg/memory.swap.max"
    else
        echo "$cap" >"$cg/memory.limit_in_bytes"
        [[ -f $cg/memory.memsw.limit_in_bytes ]] && { echo "$cap" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true; }
        [[ -f $cg/memory.swappiness ]] && { echo 0 >"$cg/memory.swappiness" 2>/dev/null || true; }
    fi
    return 0
}

# The file holding a quantity of the cgroup a run's memory is read from
# (its own, or the caller's with an external cap).
lib_cg_file() { # usage|peak|stat|events
    local d=${CG:-$CG_OBS}
    [[ -n $d ]] || return 0
    case $CG_KIND:$1 in
    v2:usage) echo "$d/memory.current" ;;
    v2:peak) echo "$d/memory.peak" ;;
    v2:stat) echo "$d/memory.stat" ;;
    v2:events) echo "$d/memory.events" ;;
    v1:usage) echo "$d/memory.usage_in_bytes" ;;
    v1:peak) echo "$d/memory.max_usage_in_bytes" ;;
    v1:stat) echo "$d/memory.stat" ;;
    v1:events) echo "$d/memory.oom_control" ;;
    esac
}

# Summary of the run's cgroup as JSON: peak, OOM kills, times the limit was hit.
lib_cg_summary() {
    if [[ -z $CG ]]; then
        echo '{"peak_bytes": null, "oom_kills": null, "limit_hits": null}'
        return 0
    fi
    local peak="" oom="" hits="" f
    f=$(lib_cg_file peak)
    [[ -r $f ]] && peak=$(cat "$f")
    f=$(lib_cg_file events)
    [[ -r $f ]] && oom=$(awk '$1 == "oom_kill" { print $2 }' "$f")
    if [[ $CG_KIND == v2 ]]; then
        [[ -r $f ]] && hits=$(awk '$1 == "max" { print $2 }' "$f")
    else
        [[ -r $CG/memory.failcnt ]] && hits=$(cat "$CG/memory.failcnt")
    fi
    echo "{\"peak_bytes\": ${peak:-null}, \"oom_kills\": ${oom:-null}, \"limit_hits\": ${hits:-null}}"
}

# Runs a command inside CG (or as is when there is none), in the foreground.
lib_cg_exec() { # cmd...
    if [[ -n $CG ]]; then
        sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@"
    else
        "$@"
    fi
}

# Kills whatever is left in CG (our own run's processes: TERM, then KILL
# after 3 s) and removes it. Safe to call twice and with no cgroup.
lib_cg_remove() {
    [[ -n $CG && -d $CG ]] || { CG=""; return 0; }
    local pids i
    pids=$(cat "$CG/cgroup.procs" 2>/dev/null || true)
    if [[ -n $pids ]]; then
        # shellcheck disable=SC2086 # one pid per word
        kill -TERM $pids 2>/dev/null || true
        for ((i = 0; i < 30; i++)); do
            [[ -z $(cat "$CG/cgroup.procs" 2>/dev/null) ]] && break
            sleep 0.1
        done
        pids=$(cat "$CG/cgroup.procs" 2>/dev/null || true)
        # shellcheck disable=SC2086
        [[ -n $pids ]] && { kill -KILL $pids 2>/dev/null || true; sleep 0.2; }
    fi
    for ((i = 0; i < 50; i++)); do
        rmdir "$CG" 2>/dev/null && break
        sleep 0.1
    done
    [[ -d $CG ]] && echo "$LIB_PROG: could not remove $CG; remove it with rmdir once its processes are gone" >&2
    CG=""
    return 0
}

# ---- sampling while a run goes ----------------------------------------------------------

# Writes one line a second until killed: t (s since $2), cgroup usage, anon,
# file, shmem, pgmajfault, and the disk's reads completed and sectors read
# (/proc/diskstats: whole device, every process on the machine).
lib_sampler() { # OUT T0 DISK
    local out=$1 t0=$2 disk=$3 usage anon file shmem maj k v rest name rd rs
    local fu fs
    fu=$(lib_cg_file usage)
    fs=$(lib_cg_file stat)
    echo "t usage anon file shmem pgmajfault disk_reads disk_sectors" >"$out"
    while :; do
        usage=nan anon=nan file=nan shmem=nan maj=nan
        if [[ -n $fu && -r $fu ]]; then
            read -r usage <"$fu" || usage=nan
            local cache=0
            while read -r k v; do
                case $CG_KIND:$k in
                v2:anon) anon=$v ;; v2:file) file=$v ;; v2:shmem) shmem=$v ;; v2:pgmajfault) maj=$v ;;
                v1:rss) anon=$v ;; v1:cache) cache=$v ;; v1:shmem) shmem=$v ;; v1:pgmajfault) maj=$v ;;
                esac
            done <"$fs"
            [[ $CG_KIND == v1 ]] && file=$((cache - shmem))
        fi
        rd=nan rs=nan
        while read -r _ _ name rest; do
            if [[ $name == "$disk" ]]; then
                read -r rd _ rs _ <<<"$rest"
                break
            fi
        done </proc/diskstats
        printf '%.2f %s %s %s %s %s %s %s\n' "$(awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { print a - b }')" \
            "$usage" "$anon" "$file" "$shmem" "$maj" "$rd" "$rs" >>"$out"
        sleep 1
    done
}

# ---- datasets ---------------------------------------------------------------------------

# Row stride of a dataset row (docs/format.md): rows of up to 512 B are
# padded to a power of two, longer rows to a multiple of 512 B.
lib_row_stride() { # DIM DTYPE
    local es=4 row s=1
    [[ $2 == f16 ]] && es=2
    row=$(($1 * es))
    if ((row <= 512)); then
        while ((s < row)); do s=$((s * 2)); done
        echo "$s"
    else
        echo $(((row + 511) / 512 * 512))
    fi
}

# Makes (once) a gnnprep synth dataset; prints its path. The name records
# everything that shapes it, so a changed setting makes a new one.
lib_dataset() { # WORK PREP NODES DIM DTYPE DEGREE NTRAIN NEVAL SEED
    local work=$1 prep=$2 n=$3 dim=$4 dt=$5 deg=$6 ntrain=$7 neval=$8 seed=$9
    local ds=$work/ooc-n$n-d$dim-$dt-deg$deg-tr$ntrain-ev$neval-s$seed
    if [[ ! -f $ds/dataset.toml ]]; then
        rm -rf "$ds"
        local tf vf
        tf=$(python3 -c "print(repr($ntrain / $n))")
        vf=$(python3 -c "print(repr($neval / $n))")
        local cmd=("$prep" synth "$ds" --nodes "$n" --avg-degree "$deg" --feat-dim "$dim" --classes 16
            --dtype "$dt" --train-frac "$tf" --val-frac "$vf" --test-frac "$vf" --seed "$seed")
        lib_log "making $ds: ${cmd[*]}"
        nice "${cmd[@]}" >"$ds.synth.log" 2>&1 || { cat "$ds.synth.log" >&2; lib_die "gnnprep synth failed"; }
        echo "${cmd[*]}" >"$ds.synth.cmd"
    fi
    echo "$ds"
}

# The smallest pipeline.feature_buffer_mb gnnlaunch accepts for a job (the
# extraction reserve), from its own refusal of a 1 MiB buffer; nothing is
# started. Prints MiB.
lib_fb_reserve_mb() { # GNNLAUNCH CFG set-args...
    local gl=$1 cfg=$2 out
    shift 2
    out=$("$gl" --cpu "$cfg" "$@" --set pipeline.feature_buffer_mb=1 2>&1 </dev/null || true)
    if [[ $out =~ at\ least\ ([0-9]+) ]]; then
        echo "${BASH_REMATCH[1]}"
    elif [[ $out == *"feature buffer per rank"* ]]; then
        echo 1 # a 1 MiB buffer was accepted (cannot happen: the run would have started)
    else
        echo "$out" >&2
        return 1
    fi
}

# Values of `key=value` lines.
lib_kv() { sed -n "s/^$1=//p" <<<"$2" | head -1; }

# Removes /dev/shm segments left by runs of ours (ids as gnnlaunch prints
# them, "<launcher pid>-<time>-<random>") whose launcher is gone: gnnlaunch
# removes its own on every exit it sees; this is for one killed hard.
# Prints the names it removed.
lib_shm_sweep() { # RUN_ID...
    local id f
    for id in "$@"; do
        [[ $id =~ ^[0-9]+-[0-9a-f]+-[0-9a-f]+$ ]] || continue
        kill -0 "${id%%-*}" 2>/dev/null && continue
        for f in /dev/shm/sluice."$id".*; do
            [[ -e $f ]] && { rm -f "$f"; echo "$f"; }
        done
    done
    return 0
}

# The run id gnnlaunch printed in a log ("gnnlaunch: run ID: ... started").
lib_run_id() { sed -n 's/^gnnlaunch: run \([0-9a-f-]*\): .* started.*/\1/p' "$1" | head -1; }
