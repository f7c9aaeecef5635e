#!/usr/bin/env bash
# The checks to run before every release (docs/reliability.md):
#   asan      the whole test suite built with ASan+UBSan (make asan)
#   tsan      the concurrent tests (ctest -L concurrent) built with TSan (make tsan)
#   valgrind  the demo under valgrind memcheck, every process traced: gnnprep
#             synth and check of a small dataset, then gnnlaunch --cpu
#             configs/demo.toml twice - once with io_uring, once with
#             SLUICE_NO_IO_URING=1 (pread: memcheck sees the data the kernel
#             writes) - with gnnstat --once asking the first run over ZeroMQ
#   fuzz      every libFuzzer target in tests/fuzz for --fuzz-seconds each
# Prints one line per part and a summary table; exits 1 if any part failed,
# 2 on bad usage. Logs go to PREFIX/release-check/.
#
#   scripts/release-check.sh [--prefix P] [--jobs N] [--fuzz-seconds S] [--only PARTS] [--skip PARTS]
#
#   --prefix P        build trees P (plain, for valgrind), P-asan, P-tsan, P-fuzz (default: build,
#                     i.e. the trees of make build / asan / tsan and scripts/fuzz.sh)
#   --jobs N          parallel build and test jobs (default: nproc)
#   --fuzz-seconds S  seconds per fuzz target (default 20)
#   --only / --skip   comma-separated parts: asan,tsan,valgrind,fuzz
#
# Needs clang and valgrind (scripts/install-deps.sh --release installs them).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"

prefix=build
jobs=$(nproc)
fuzz_secs=20
parts="asan,tsan,valgrind,fuzz"
skip=""
usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --prefix) prefix=${2:?}; shift 2 ;;
        --jobs) jobs=${2:?}; shift 2 ;;
        --fuzz-seconds) fuzz_secs=${2:?}; shift 2 ;;
        --only) parts=${2:?}; shift 2 ;;
        --skip) skip=${2:?}; shift 2 ;;
        -h|--help) usage ;;
        *) echo "release-check: unknown argument '$1'" >&2; usage ;;
    esac
done
[[ $jobs =~ ^[1-9][0-9]*$ && $fuzz_secs =~ ^[1-9][0-9]*$ ]] || { echo "release-check: --jobs and --fuzz-seconds take positive integers" >&2; exit 2; }
for p in ${parts//,/ } ${skip//,/ }; do
    [[ $p =~ ^(asan|tsan|valgrind|fuzz)$ ]] || { echo "release-check: unknown part '$p' (asan, tsan, valgrind, fuzz)" >&2; exit 2; }
done
want() { [[ ,$parts, == *,$1,* && ,$skip, != *,$1,* ]]; }

scripts/install-deps.sh --release || exit 1
for tool in clang valgrind; do
    command -v $tool >/dev/null || { echo "release-check: $tool is missing; run scripts/install-deps.sh --release" >&2; exit 1; }
done

case $prefix in /*) base=$prefix ;; *) base=$src/$prefix ;; esac
logs=$base/release-check
rm -rf "$logs"
mkdir -p "$logs"
names=() results=() secs=() notes=() logfiles=()
failed=0

# record NAME RESULT SECONDS NOTE LOG
record() {
    names+=("$1"); results+=("$2"); secs+=("$3"); notes+=("$4"); logfiles+=("$5")
    [[ $2 == PASS ]] || failed=1
    printf 'release-check: %-28s %s in %ss%s\n' "$1" "$2" "$3" "${4:+ ($4)}"
}

# part NAME LOG COMMAND...: runs COMMAND with output to LOG, records the result.
part() {
    local name=$1 log=$2
    shift 2
    echo "release-check: $name ..."
    local t0=$SECONDS
    if "$@" >"$log" 2>&1; then
        record "$name" PASS $((SECONDS - t0)) "" "$log"
    else
        record "$name" FAIL $((SECONDS - t0)) "$(grep -m1 -E 'tests failed|FAILED|ERROR|error' "$log" | cut -c1-40)" "$log"
    fi
}

# ---- (a) ASan+UBSan, whole suite; (b) TSan, concurrent tests ---------------------------
want asan && part "asan: whole suite" "$logs/asan.log" make --no-print-directory asan ASAN_BUILD="$prefix-asan" JOBS="$jobs"
want tsan && part "tsan: ctest -L concurrent" "$logs/tsan.log" make --no-print-directory tsan TSAN_BUILD="$prefix-tsan" JOBS="$jobs"

# ---- (c) valgrind: the demo, every process -----------------------------------------------
# Memcheck's verdict per process is its log's ERROR SUMMARY (leaks count as
# errors); a process with errors also exits 99, so a stage with errors makes
# gnnlaunch fail (exit 3). Suppressions: scripts/valgrind.supp (third-party
# libraries only; none are needed today).
vg_check_logs() { # DIR: every log names 0 errors
    local bad=0 f
    for f in "$1"/vg.*.log; do
        [[ -e $f ]] || { echo "no valgrind logs in $1"; return 1; }
        if ! grep -q 'ERROR SUMMARY: 0 errors' "$f"; then
            echo "== $f"; grep -E 'Command:|ERROR SUMMARY' "$f"; bad=1
        fi
    done
    return $bad
}
vg_launch() { # LOGDIR RUN-NAME EXTRA-ENV...: a two-epoch demo run under valgrind
    local dir=$1 name=$2
    shift 2
    mkdir -p "$dir"
    env XDG_RUNTIME_DIR="$vg_xdg" "$@" valgrind "${vg_opts[@]}" --log-file="$dir/vg.%p.log" \
        "$prefix/bin/gnnlaunch" --cpu configs/demo.toml --epochs 2 --run-name "$name" \
        --set "dataset.path=\"$vg_data\"" --set "train.checkpoint_dir=\"$vg_work/ck-$name\"" \
        --metrics "$vg_work/$name.jsonl" --trace "$vg_work/$name.trace.json"
}
vg_no_leftovers() { # RUN-NAME OUTPUT: no run directory and no segment of that run left
    local id
    id=$(grep -m1 -oE 'gnnlaunch: run [A-Za-z0-9_-]+:' "$2" | sed 's/gnnlaunch: run //; s/:$//')
    [[ -n $id ]] || { echo "no run id in $2"; return 1; }
    if compgen -G "/dev/shm/sluice.$id.*" >/dev/null || [[ -e $vg_xdg/sluice/$1 ]]; then
        echo "run $1 ($id) left segments or its run directory"; ls /dev/shm | grep -F "sluice.$id." ; return 1
    fi
}
valgrind_demo() {
    vg_work=$logs/valgrind
    vg_xdg=$vg_work/xdg
    vg_data=$vg_work/data
    mkdir -p "$vg_work" && mkdir -m 0700 "$vg_xdg" || return 1
    vg_opts=(--error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible
             --trace-children=yes --child-silent-after-fork=yes --suppressions="$src/scripts/valgrind.supp")
    echo "== build $prefix"
    make --no-print-directory build BUILD="$prefix" JOBS="$jobs" || return 1
    local rc=0
    echo "== gnnprep synth and check under valgrind"
    valgrind "${vg_opts[@]}" --log-file="$vg_work/prep/vg.%p.log" "$prefix/bin/gnnprep" synth "$vg_data" \
        --nodes 20000 --avg-degree 10 --feat-dim 32 --classes 8 --seed 1 2>&1 || rc=1
    valgrind "${vg_opts[@]}" --log-file="$vg_work/prep/vg.%p.log" "$prefix/bin/gnnprep" check "$vg_data" 2>&1 || rc=1

    echo "== gnnlaunch with io_uring, gnnstat --once beside it"
    vg_launch "$vg_work/uring" vg-uring >"$vg_work/uring.out" 2>&1 &
    local lp=$! i stat_ok=0
    mkdir -p "$vg_work/gnnstat"
    for i in $(seq 1 120); do
        sleep 1
        kill -0 $lp 2>/dev/null || break
        if XDG_RUNTIME_DIR=$vg_xdg valgrind "${vg_opts[@]}" --log-file="$vg_work/gnnstat/vg.%p.log" \
            "$prefix/bin/gnnstat" --once --interval 0.5 --timeout 20 vg-uring >"$vg_work/gnnstat.json" 2>"$vg_work/gnnstat.err"; then
            stat_ok=1
            break
        fi
        rm -f "$vg_work"/gnnstat/vg.*.log # a try before the launcher listened
    done
    wait $lp || { echo "gnnlaunch (io_uring) failed:"; tail -20 "$vg_work/uring.out"; rc=1; }
    [[ $stat_ok == 1 ]] || { echo "gnnstat --once never answered:"; cat "$vg_work/gnnstat.err"; rc=1; }
    grep -q 'extracting with io_uring' "$vg_work/uring.out" ||
        { echo "the io_uring run did not use io_uring:"; grep extract "$vg_work/uring.out"; rc=1; }
    vg_no_leftovers vg-uring "$vg_work/uring.out" || rc=1

    echo "== gnnlaunch with SLUICE_NO_IO_URING=1 (pread)"
    vg_launch "$vg_work/pread" vg-pread SLUICE_NO_IO_URING=1 >"$vg_work/pread.out" 2>&1 ||
        { echo "gnnlaunch (pread) failed:"; tail -20 "$vg_work/pread.out"; rc=1; }
    vg_no_leftovers vg-pread "$vg_work/pread.out" || rc=1

    for d in prep uring gnnstat pread; do
        vg_check_logs "$vg_work/$d" || rc=1
    done
    echo "== $(cat "$vg_work"/*/vg.*.log | grep -c 'ERROR SUMMARY') processes checked"
    grep -h 'ERROR SUMMARY' "$vg_work"/*/vg.*.log | sed 's/==[0-9]*== //' | sort | uniq -c
    return $rc
}
if want valgrind; then
    mkdir -p "$logs/valgrind/prep"
    part "valgrind: demo, all processes" "$logs/valgrind.log" valgrind_demo
    n=$(grep -h 'ERROR SUMMARY' "$logs"/valgrind/*/vg.*.log 2>/dev/null | wc -l)
    notes[${#notes[@]} - 1]="${notes[${#notes[@]} - 1]:-$n processes}"
fi

# ---- (d) libFuzzer targets ---------------------------------------------------------------------
if want fuzz; then
    for t in $(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//'); do
        part "fuzz: $t ${fuzz_secs}s" "$logs/$t.log" scripts/fuzz.sh run "$t" "$fuzz_secs" "$base-fuzz"
        runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$logs/$t.log" | grep -oE '[0-9]+$')
        [[ -n $runs ]] && notes[${#notes[@]} - 1]="${notes[${#notes[@]} - 1]:-$runs runs}"
    done
fi

# ---- summary --------------------------------------------------------------------------------------
echo
echo "release-check summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, prefix $prefix, jobs $jobs)"
printf '| %-30s | %-6s | %8s | %-40s |\n' part result seconds notes
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..32})" "--------" "----------" "$(printf -- '-%.0s' {1..42})"
for i in "${!names[@]}"; do
    printf '| %-30s | %-6s | %8s | %-40s |\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}" "${notes[$i]}"
done
echo "logs: $logs"
if [[ $failed != 0 ]]; then
    echo "release-check: FAILED (see the logs of the parts marked FAIL)"
    exit 1
fi
echo "release-check: all parts passed"
