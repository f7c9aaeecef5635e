#!/usr/bin/env bash
# gpu-check.sh - checks Sluice on a GPU machine in one command, within 8
# minutes, and writes what it found to a report (docs/gpu.md, "Checking a
# GPU machine").
#
#   scripts/gpu-check.sh [--debs DIR] [--report FILE] [--build DIR] [--prefix DIR]
#                        [--jobs N] [--budget SECONDS] [--no-gpu-ok] [--no-build]
#                        [--no-bench]
#
# For a bare machine: it needs bash, coreutils, nvcc, CMake, ninja and a C
# compiler; the libraries (ZeroMQ, liburing, cmocka, OpenBLAS, ...) and
# pkg-config may be missing: --debs DIR takes a folder of .deb files
# (scripts/gpu-debs.sh fetches them on a Debian 12 machine), unpacked with
# dpkg-deb -x into a prefix (never into /) that the build then uses,
# through pkg-config and an RPATH: nothing is installed.
#
# Steps, each under `timeout`, the time left shared out so that the whole
# run ends within --budget seconds (default 480):
#   tools       where nvcc, CMake, ninja, compute-sanitizer, nvidia-smi are
#               (nvcc, CMake, ninja or a C compiler missing: stop here)
#   nccl        NCCL's header and library (the toolkit, NCCL_ROOT, a pip
#               wheel's nvidia/nccl) and its version
#   nvidia-smi  the GPUs, driver and CUDA version (no GPU: stop here and
#               say so, unless --no-gpu-ok)
#   debs        unpack --debs into the prefix
#   configure   cmake -DSLUICE_CUDA=ON -DSLUICE_WERROR=ON (Ninja)
#   build       cmake --build (--no-build stops after configure)
#   ctest-gpu   ctest -L gpu
#   memcheck    compute-sanitizer --tool memcheck over the kernel tests
#   racecheck   compute-sanitizer --tool racecheck over the kernel tests
#               (build/tests/test_gpu_kernels*)
#   bench       QUICK=1 bench/gpu.sh BUILD_DIR, the GPU benchmark's smoke
#               run (the full one is a command of its own: docs/gpu.md);
#               --no-bench skips it, for a command that runs the full
#               benchmark next
# The build is in --build (default build-gpu), the prefix in --prefix
# (default BUILD/deps). Each step's whole output is in
# BUILD/gpu-check-logs/<step>.log; the
# report (default bench/results/gpu-check-<date>-<gpu>.md) has the
# machine, the versions, a table of steps and each step's last lines.
#
# Exit status: 0 every step passed or was skipped for a stated reason; 1 a
# step failed or timed out, or there is no GPU (without --no-gpu-ok); 2
# bad arguments.
set -uo pipefail

prog=gpu-check
die() { echo "$prog: $*" >&2; exit 2; }
usage() { sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//'; }

args="$*"
root=$(cd "$(dirname "$0")/.." && pwd)
debs="" report="" build="$root/build-gpu" prefix="" jobs=$(nproc) budget=480 no_gpu_ok=0 no_build=0 no_bench=0
while (($#)); do
    case "$1" in
        --debs) debs=${2:?--debs needs a folder of .deb files}; shift 2 ;;
        --report) report=${2:?--report needs a file name}; shift 2 ;;
        --build) build=${2:?--build needs a folder}; shift 2 ;;
        --prefix) prefix=${2:?--prefix needs a folder}; shift 2 ;;
        --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
        --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
        --no-gpu-ok) no_gpu_ok=1; shift ;;
        --no-build) no_build=1; shift ;;
        --no-bench) no_bench=1; shift ;;
        -h | --help) sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive number, not '$jobs'"
[[ $budget =~ ^[1-9][0-9]*$ ]] || die "--budget needs seconds, not '$budget'"
if [[ -n $debs ]]; then
    [[ -d $debs ]] || die "--debs $debs: no such folder (scripts/gpu-debs.sh makes one)"
    compgen -G "$debs/*.deb" >/dev/null || die "--debs $debs: no .deb files in it (scripts/gpu-debs.sh fetches them)"
    debs=$(cd "$debs" && pwd)
fi
mkdir -p "$build" || die "--build $build: cannot create it"
build=$(cd "$build" && pwd)
prefix=${prefix:-$build/deps}
[[ $prefix == / ]] && die "--prefix /: the .deb files are never unpacked into /"
mkdir -p "$prefix" || die "--prefix $prefix: cannot create it"
prefix=$(cd "$prefix" && pwd)
logs=$build/gpu-check-logs
rm -rf "$logs"
mkdir -p "$logs"
cd "$root" || exit 2

t_start=$(date +%s)
deadline=$((t_start + budget))
steps=() results=() secs=()

# Runs a step: step NAME CAP COMMAND...; COMMAND under timeout for CAP
# seconds or what is left of the budget, its output to the terminal and
# to the step's log. Returns the command's status (124: timed out).
step() {
    local name=$1 cap=$2
    shift 2
    local left=$((deadline - $(date +%s)))
    local t=$((cap < left ? cap : left))
    if ((t < 5)); then
        skip "$name" "out of time (--budget $budget s)"
        return 1
    fi
    echo "== $name (at most $t s): $*"
    local t0 rc
    t0=$(date +%s)
    timeout -k 5 "$t" "$@" 2>&1 | tee "$logs/$name.log"
    rc=${PIPESTATUS[0]}
    steps+=("$name")
    secs+=($(($(date +%s) - t0)))
    case $rc in
        0) results+=("ok") ;;
        124 | 137) results+=("timed out after $t s") ;;
        *) results+=("failed (exit status $rc)") ;;
    esac
    return "$rc"
}
skip() {
    echo "== $1: skipped: $2"
    echo "skipped: $2" >"$logs/$1.log"
    steps+=("$1")
    results+=("skipped: $2")
    secs+=(0)
}
note() { # records a step that ran in this shell
    steps+=("$1")
    results+=("$2")
    secs+=("$3")
}

# ---- the report ---------------------------------------------------------------------------------
gpu_name="" have_gpu=0 nvcc_bin="" nccl_root="" nccl_version="not looked for"
# Writes the report and prints where; its status: 0 when nothing failed.
write_report() {
    local total failed=0 r slug commit i
    total=$(($(date +%s) - t_start))
    slug=$(echo "${gpu_name:-no gpu}" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$//')
    report=${report:-$root/bench/results/gpu-check-$(date +%F)-$slug.md}
    mkdir -p "$(dirname "$report")" || die "--report $report: cannot create its folder"
    for r in "${results[@]}"; do
        [[ $r == ok || $r == skipped:* || $r == "not found: the build goes on without NCCL" ]] || failed=$((failed + 1))
    done
    ((have_gpu || no_gpu_ok)) || failed=$((failed + 1))
    commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
    [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]] && commit="$commit (with local changes)"
    {
        echo "# GPU check: ${gpu_name:-no GPU}, $(date +%F)"
        echo
        echo "Command: \`scripts/gpu-check.sh $args\` at commit $commit; build in $build${debs:+, libraries from $debs}."
        echo "Finished in $total s of the $budget s budget; $failed problem(s)."
        echo
        echo "- host: $(hostname), $(uname -sr), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
        echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores;" \
            "memory $(awk '/MemTotal/{printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
        echo "- GPU: $( ((have_gpu)) && timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
            --format=csv,noheader 2>/dev/null | paste -sd ';' || echo none)"
        echo "- CUDA: nvcc $([[ -n $nvcc_bin ]] && "$nvcc_bin" --version | grep -m1 -o 'release [^,]*' | cut -d' ' -f2 ||
            echo 'not found'); NCCL $nccl_version${nccl_root:+ ($nccl_root)}"
        if [[ -s $logs/found.log ]]; then
            echo "- libraries: $(paste -sd ';' "$logs/found.log" | sed 's/;/; /g')"
        fi
        echo
        echo "| step | result | seconds |"
        echo "|---|---|--:|"
        for i in "${!steps[@]}"; do
            echo "| ${steps[$i]} | ${results[$i]} | ${secs[$i]} |"
        done
        for i in "${!steps[@]}"; do
            [[ -s $logs/${steps[$i]}.log ]] || continue
            echo
            echo "## ${steps[$i]}: ${results[$i]}"
            echo
            echo '```'
            tail -n 60 "$logs/${steps[$i]}.log" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g'
            echo '```'
        done
    } >"$report"
    echo "$prog: report in $report ($failed problem(s), $total s)"
    ((failed == 0))
}

# ---- tools ----------------------------------------------------------------------------------
t0=$(date +%s)
if ! command -v nvcc >/dev/null; then
    for d in "${CUDA_HOME:-}" /usr/local/cuda; do
        [[ -n $d && -x $d/bin/nvcc ]] && { export PATH="$d/bin:$PATH"; break; }
    done
fi
nvcc_bin=$(command -v nvcc || true)
cuda_home=${nvcc_bin:+$(dirname "$(dirname "$nvcc_bin")")}
sanitizer=$(command -v compute-sanitizer || true)
for c in "$cuda_home/bin/compute-sanitizer" "$cuda_home/compute-sanitizer/compute-sanitizer"; do
    [[ -z $sanitizer && -n $cuda_home && -x $c ]] && sanitizer=$c
done
version_of() { "$@" 2>/dev/null | grep -m1 -Eo '[0-9]+\.[0-9]+(\.[0-9]+)?' || echo "?"; }
{
    echo "nvcc: ${nvcc_bin:-not found} ($([[ -n $nvcc_bin ]] && "$nvcc_bin" --version | grep -m1 -o 'release [^,]*' || echo -))"
    echo "cmake: $(command -v cmake || echo 'not found') ($(version_of cmake --version))"
    echo "ninja: $(command -v ninja || echo 'not found') ($(version_of ninja --version))"
    echo "cc: $(command -v cc || echo 'not found') ($(cc --version 2>/dev/null | head -1))"
    echo "pkg-config: $(command -v pkg-config || echo 'not found (the .deb folder brings one)')"
    echo "compute-sanitizer: ${sanitizer:-not found} ($([[ -n $sanitizer ]] && version_of "$sanitizer" --version || echo -))"
    echo "nvidia-smi: $(command -v nvidia-smi || echo 'not found')"
    echo "/dev/nvidia*: $(ls /dev/nvidia* 2>/dev/null | tr '\n' ' ' || true)"
} | tee "$logs/tools.log"
missing=()
[[ -n $nvcc_bin ]] || missing+=(nvcc)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja)
command -v cc >/dev/null || command -v gcc >/dev/null || missing+=("a C compiler")
if ((${#missing[@]})); then
    note tools "failed: ${missing[*]} not found" $(($(date +%s) - t0))
    echo "$prog: ${missing[*]} not found; this script needs nvcc, CMake, ninja and a C compiler" >&2
    write_report
    exit 1
fi
note tools ok $(($(date +%s) - t0))

# ---- NCCL -----------------------------------------------------------------------------------
t0=$(date +%s)
for d in "${NCCL_ROOT:-}" "${NCCL_HOME:-}" "$cuda_home" "$cuda_home/targets/x86_64-linux" /usr /usr/local; do
    [[ -n $d && -f $d/include/nccl.h ]] && { nccl_root=$d; break; }
done
if [[ -z $nccl_root ]] && command -v python3 >/dev/null; then # NVIDIA's wheel, beside PyTorch
    d=$(timeout 30 python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    [[ -n $d && -f $d/include/nccl.h ]] && nccl_root=$d
fi
if [[ -n $nccl_root ]]; then
    nccl_version=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' \
        "$nccl_root/include/nccl.h")
    echo "nccl: $nccl_version in $nccl_root" | tee "$logs/nccl.log"
    note nccl ok $(($(date +%s) - t0))
else
    nccl_version="not found"
    echo "nccl: not found (NCCL_ROOT, the toolkit, /usr, python3's nvidia.nccl); runs of more than one GPU need it" |
        tee "$logs/nccl.log"
    note nccl "not found: the build goes on without NCCL" $(($(date +%s) - t0))
fi

# ---- the GPU --------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
    if step nvidia-smi 30 bash -c 'nvidia-smi && nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv'; then
        gpu_name=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
        [[ -n $gpu_name ]] && have_gpu=1
    fi
else
    skip nvidia-smi "nvidia-smi is not installed"
fi
if ((!have_gpu && !no_gpu_ok)); then
    echo "$prog: no GPU on this machine (nvidia-smi: $(command -v nvidia-smi >/dev/null &&
        tail -n 1 "$logs/nvidia-smi.log" || echo 'not installed')); this script checks a GPU machine," \
        "and --no-gpu-ok checks the build alone" >&2
    write_report
    exit 1
fi

# ---- the .deb folder --------------------------------------------------------------------------
cmake_extra=()
if [[ -n $debs ]]; then
    unpack() { # debs prefix
        local f n=0
        command -v dpkg-deb >/dev/null || { echo "dpkg-deb is not installed: cannot unpack .deb files" >&2; return 1; }
        for f in "$1"/*.deb; do
            dpkg-deb -x "$f" "$2" || { echo "cannot unpack $f" >&2; return 1; }
            n=$((n + 1))
        done
        # pkg-config files name /usr: point them into the prefix, and drop
        # what only static linking needs (other -dev packages)
        find "$2" -name '*.pc' -type f -print0 | xargs -0 -r sed -i -E \
            -e "s#=/usr(/|\$)#=$2/usr\\1#" -e "s#-I/usr/#-I$2/usr/#g" -e "s#-L/usr/#-L$2/usr/#g" \
            -e '/^Requires.private:/d'
        echo "unpacked $n .deb files into $2"
    }
    export -f unpack
    if step debs 60 bash -c 'unpack "$1" "$2"' _ "$debs" "$prefix"; then
        arch_lib=$prefix/usr/lib/x86_64-linux-gnu
        libdirs="$arch_lib:$prefix/lib/x86_64-linux-gnu:$arch_lib/openblas-pthread" # the .so files' folders
        export PKG_CONFIG_PATH="$arch_lib/pkgconfig:$arch_lib/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
        export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
        if ! command -v pkg-config >/dev/null && [[ -x $prefix/usr/bin/pkgconf ]]; then
            # the unpacked pkgconf, with its library beside it (for it alone)
            printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$arch_lib" "$prefix/usr/bin/pkgconf" >"$prefix/pkg-config"
            chmod +x "$prefix/pkg-config"
            export PKG_CONFIG="$prefix/pkg-config"
        fi
        if ! command -v protoc-c >/dev/null && [[ -x $prefix/usr/bin/protoc-c ]]; then
            # the unpacked protoc-c (a build tool), with its C++ libraries beside it
            printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$arch_lib" "$prefix/usr/bin/protoc-c" >"$prefix/protoc-c"
            chmod +x "$prefix/protoc-c"
            cmake_extra+=("-DSLUICE_PROTOC_C=$prefix/protoc-c")
        fi
        # the libraries' own dependencies (libzmq -> libsodium, ...) are
        # found through the programs' RPATH (DT_RPATH applies to them too),
        # so nothing needs LD_LIBRARY_PATH, which would also reach CMake
        cmake_extra+=("-DCMAKE_BUILD_RPATH=${libdirs//:/;}"
            "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath-link,$libdirs"
            "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath-link,$libdirs")
    fi
else
    skip debs "no --debs: the libraries must be installed"
fi

# ---- configure and build ------------------------------------------------------------------------
[[ -n $nccl_root ]] && cmake_extra+=("-DNCCL_ROOT=$nccl_root")
built=0
if step configure 90 cmake -S "$root" -B "$build" -G Ninja -DSLUICE_CUDA=ON -DSLUICE_WERROR=ON "${cmake_extra[@]}"; then
    if [[ -f $build/CMakeCache.txt ]]; then # where each library was found
        grep -E '^pkgcfg_lib_[A-Z]+_[a-z0-9_]+:FILEPATH=' "$build/CMakeCache.txt" |
            sed -E 's/^pkgcfg_lib_([A-Z]+)_[^=]*=/\1: /' >"$logs/found.log" || true
    fi
    if ((no_build)); then
        skip build "--no-build"
    elif step build 300 cmake --build "$build" -j "$jobs"; then
        built=1
    fi
fi

# ---- on the GPU ---------------------------------------------------------------------------------
gpu_steps=(ctest-gpu memcheck racecheck bench)
if ((!have_gpu)); then
    for s in "${gpu_steps[@]}"; do skip "$s" "no GPU"; done
elif ((!built)); then
    for s in "${gpu_steps[@]}"; do skip "$s" "the build did not finish"; done
else
    step ctest-gpu 150 bash -c 'cd "$1" && ctest -L gpu --output-on-failure' _ "$build"
    kernels=()
    for f in "$build"/tests/test_gpu_kernels*; do
        [[ -f $f && -x $f ]] && kernels+=("$f")
    done
    sanitize() { # tool test...
        local tool=$1 rc=0 t
        shift
        for t in "$@"; do
            echo "-- compute-sanitizer --tool $tool $t"
            "$SANITIZER" --tool "$tool" --error-exitcode 99 "$t" || rc=1
        done
        return $rc
    }
    export -f sanitize
    export SANITIZER=$sanitizer
    for tool in memcheck racecheck; do
        if [[ -z $sanitizer ]]; then
            skip "$tool" "compute-sanitizer not found"
        elif ((${#kernels[@]} == 0)); then
            skip "$tool" "no kernel tests (tests/test_gpu_kernels*) in this tree"
        else
            step "$tool" 90 bash -c 'sanitize "$@"' _ "$tool" "${kernels[@]}"
        fi
    done
    if ((no_bench)); then
        skip bench "--no-bench"
    elif [[ -x $root/bench/gpu.sh ]]; then
        step bench 120 env QUICK=1 "$root/bench/gpu.sh" "$build"
    else
        skip bench "bench/gpu.sh (the GPU benchmark) is not in this tree yet"
    fi
fi

# ---- done -------------------------------------------------------------------------------------
write_report
