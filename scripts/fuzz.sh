#!/usr/bin/env bash
# libFuzzer runs of Sluice's parsers (tests/fuzz). Builds a separate clang
# tree with ASan+UBSan and coverage, then:
#   scripts/fuzz.sh smoke [BUILD]           every target for $FUZZ_SMOKE_SECONDS (5) s each; the test suite runs this
#   scripts/fuzz.sh run TARGET SECONDS [BUILD]   one long run; prints libFuzzer's final stats
# Seeds come from tests/fuzz/seeds/<name>/; the growing corpus lives in the
# build tree, never in the source tree. Exit non-zero when a target fails.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-smoke}
case "$mode" in
    smoke) build=${2:-$src/build-fuzz} ;;
    run) target=${2:?usage: fuzz.sh run TARGET SECONDS}; secs=${3:?usage: fuzz.sh run TARGET SECONDS}; build=${4:-$src/build-fuzz} ;;
    *) echo "usage: fuzz.sh smoke [BUILD] | run TARGET SECONDS [BUILD]" >&2; exit 2 ;;
esac
command -v clang >/dev/null || { echo "fuzz.sh: clang is needed (scripts/install-deps.sh installs it)" >&2; exit 2; }

CC=clang cmake -S "$src" -B "$build" -G Ninja -DSLUICE_FUZZ=ON -DSLUICE_TESTS=OFF -DSLUICE_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=$(cd "$src/tests/fuzz" && ls fuzz_*.c | sed 's/\.c$//')
# shellcheck disable=SC2086
cmake --build "$build" --target $targets >/dev/null

run_one() { # name seconds
    local name=$1 secs=$2 seeds=$src/tests/fuzz/seeds/${1#fuzz_}
    local corpus=$build/corpus/$name
    mkdir -p "$corpus" "$build/crashes"
    [[ -d $seeds ]] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
    echo "fuzz: $name for ${secs}s"
    "$build/fuzz/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/crashes/$name-" "$corpus" 2>&1 | grep -E '^(#[0-9]+ +DONE|stat::|==[0-9]+==ERROR|SUMMARY|Done)' || true
    return "${PIPESTATUS[0]}"
}

if [[ $mode == smoke ]]; then
    rc=0
    for t in $targets; do run_one "$t" "${FUZZ_SMOKE_SECONDS:-5}" || rc=1; done
    exit $rc
fi
run_one "$target" "$secs"
