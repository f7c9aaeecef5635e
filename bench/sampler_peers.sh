#!/usr/bin/env bash
# bench/sampler_peers.sh - issue 27 item 3: Sluice's neighbour sampler
# alone against DGL's on the same graph, fanouts and batch size. Sluice:
# `gnn-sampler --bench DATA --threads 1 --topology memory` (the in-memory
# run's topology: indices.bin read whole at start); DGL:
# `bench/peers.py --system dgl --sample-only S` (dgl.dataloading
# .NeighborSampler + DataLoader, 0 workers, no features gathered, torch
# threads as THREADS says), the topology built from the same indptr.bin /
# indices.bin. Both count a batch's sampled edges over all layers and leave
# the first batch (the shuffle, the start) out of the rate. Runs alternate,
# REPS of each per fanout, each under the benchmark lock; the page cache is
# left warm (the graph is read before the clock starts in both). Prints a
# table of sampled edges per second of wall time and per CPU second.
# Asserts nothing about time (STYLE.md).
#
#   bench/sampler_peers.sh
#
# Environment (defaults): DATA (/work/bench-data/inmem-2m, as bench/inmem.sh),
# BUILD (build), DGL_VENV (/work/bench-data/venvs/dgl: bench/peers.sh makes
# it), FANOUTS ("10,5 10,10,10"), BATCH (1000), SECONDS_EACH (8), REPS (3),
# THREADS (1: torch threads for DGL, sampler threads for Sluice), OUT
# (bench/work/sampler-peers), LOCK (/tmp/sluice-bench.lock; "" = none, when
# the caller holds it).
set -euo pipefail
cd "$(dirname "$0")/.."
LIB_PROG=sampler_peers.sh
source bench/lib.sh

DATA=${DATA:-/work/bench-data/inmem-2m}
BUILD=${BUILD:-build}
DGL_VENV=${DGL_VENV:-/work/bench-data/venvs/dgl}
FANOUTS=${FANOUTS:-10,5 10,10,10}
BATCH=${BATCH:-1000}
SECONDS_EACH=${SECONDS_EACH:-8}
REPS=${REPS:-3}
THREADS=${THREADS:-1}
OUT=${OUT:-bench/work/sampler-peers}
LOCK=${LOCK-/tmp/sluice-bench.lock}

lib_need_tools jq flock
lib_need_bins "$BUILD" gnn-sampler
[[ -f $DATA/dataset.toml ]] || lib_die "DATA=$DATA: no dataset.toml; make it as bench/inmem.sh says"
[[ -x $DGL_VENV/bin/python ]] && "$DGL_VENV/bin/python" -c "import dgl" 2>/dev/null ||
    lib_die "DGL_VENV=$DGL_VENV has no dgl; run bench/peers.sh --systems dgl once to make it"
mkdir -p "$OUT"

locked() { if [[ -n $LOCK ]]; then flock "$LOCK" "$@"; else "$@"; fi; }

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -r); data $DATA"
rows=()
for fan in $FANOUTS; do
    for ((r = 1; r <= REPS; r++)); do
        log=$OUT/sluice-$fan-$r.log
        echo "+ load: $(cut -d' ' -f1-3 /proc/loadavg)" >"$log"
        locked "$BUILD/bin/gnn-sampler" --bench "$DATA" --fanouts "$fan" --batch-size "$BATCH" --threads "$THREADS" \
            --seconds "$SECONDS_EACH" --seed "$r" --topology memory >>"$log" 2>&1 || lib_die "gnn-sampler failed: $log"
        eps=$(sed -n 's/^sampled_edges_per_s=//p' "$log")
        # gnn-sampler prints wall rates only; its threads are busy throughout, so CPU s = threads x seconds
        rows+=("$fan|sluice|$r|$eps|$(awk -v e="$eps" -v t="$THREADS" 'BEGIN { printf "%.0f", e / t }')|$(cut -d' ' -f3- <<<"$(head -1 "$log")")")
        log=$OUT/dgl-$fan-$r.jsonl
        echo "+ load: $(cut -d' ' -f1-3 /proc/loadavg)" >"$log.load"
        locked "$DGL_VENV/bin/python" bench/peers.py --system dgl --dataset "$DATA" --fanouts "$fan" --batch "$BATCH" \
            --threads "$THREADS" --seed "$r" --sample-only "$SECONDS_EACH" >"$log" 2>"$OUT/dgl-$fan-$r.err" ||
            lib_die "peers.py --sample-only failed: $OUT/dgl-$fan-$r.err"
        j=$(grep '"type": "sampler"' "$log")
        rows+=("$fan|dgl|$r|$(jq -r '.sampled_edges_per_s | floor' <<<"$j")|$(jq -r '.sampled_edges_per_cpu_s | floor' <<<"$j")|$(cut -d' ' -f3- <<<"$(head -1 "$log.load")")")
    done
done
echo
echo "| fanouts | system | rep | M sampled edges/s | M edges per CPU s (Sluice: per thread, a lower bound) | load before |"
echo "| --- | --- | --- | --- | --- | --- |"
for row in "${rows[@]}"; do
    IFS='|' read -r fan sys r eps epc load <<<"$row"
    awk -v f="$fan" -v s="$sys" -v r="$r" -v e="$eps" -v c="$epc" -v l="$load" \
        'BEGIN { printf "| [%s] | %s | %s | %.2f | %.2f | %s |\n", f, s, r, e / 1e6, c / 1e6, l }'
done
echo
echo "| fanouts | Sluice / DGL, median of M sampled edges/s |"
echo "| --- | --- |"
for fan in $FANOUTS; do
    med() { printf '%s\n' "${rows[@]}" | awk -F'|' -v f="$fan" -v s="$1" '$1 == f && $2 == s { print $4 }' | sort -n |
        awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
    awk -v f="$fan" -v a="$(med sluice)" -v b="$(med dgl)" 'BEGIN { printf "| [%s] | %.2f x (%.2f vs %.2f M) |\n", f, a / b, a / 1e6, b / 1e6 }'
done
