#!/usr/bin/env bash
# plot-metrics.sh - turns a `gnnlaunch --metrics FILE.jsonl` file into PNG
# charts with gnuplot (scripts/install-deps.sh --bench installs it):
#
#   OUT/epochs.png       loss, training and validation accuracy per epoch
#   OUT/utilisation.png  per-stage busy share of one core over time (each
#                        stage summed over ranks and threads), like the
#                        utilisation figures of the GNNDrive paper
#   OUT/epochs.dat, OUT/utilisation.dat  the numbers plotted
#
#   scripts/plot-metrics.sh run.jsonl [OUT]     # OUT defaults to run.jsonl's name without .jsonl
#
# The file's schema is docs/metrics.md. Exit 2 for a missing or empty file
# or one without epoch records, 1 if gnuplot fails.
set -euo pipefail

usage() { echo "usage: $0 METRICS.jsonl [OUT_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
in=$1
out=${2:-${in%.jsonl}}
[[ -s $in ]] || { echo "$0: $in: no such file, or empty" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found; run scripts/install-deps.sh --bench" >&2; exit 2; }
mkdir -p "$out"

# A JSON value by key from one flat-enough line (our writer's own format).
extract='
function val(line, key,    i, rest) {
    i = index(line, "\"" key "\":")
    if (!i) return "nan"
    rest = substr(line, i + length(key) + 3)
    sub(/[,}].*/, "", rest)
    gsub(/"/, "", rest)
    return rest == "null" ? "nan" : rest
}'

awk "$extract"'
/^\{"type":"epoch"/ { print val($0, "epoch"), val($0, "loss"), val($0, "train_acc"), val($0, "val_acc") }
' "$in" >"$out/epochs.dat"
[[ -s $out/epochs.dat ]] || { echo "$0: $in has no epoch records (see docs/metrics.md)" >&2; exit 2; }

# busy seconds per stage per sample time -> share of one core between samples
awk "$extract"'
/^\{"type":"process"/ {
    t = val($0, "t"); s = val($0, "stage"); busy[t, s] += val($0, "busy_s"); times[t] = 1
}
END {
    n = 0; for (t in times) ts[++n] = t + 0
    for (i = 2; i <= n; i++) { v = ts[i]; j = i - 1; while (j > 0 && ts[j] > v) { ts[j + 1] = ts[j]; j-- } ts[j + 1] = v }
    split("sampler extractor trainer releaser", st, " ")
    for (i = 2; i <= n; i++) {
        dt = ts[i] - ts[i - 1]; if (dt < 0.5) continue  # the last sample may follow the previous closely
        line = sprintf("%.3f", ts[i])
        for (k = 1; k <= 4; k++) {
            a = busy[sprintf("%.3f", ts[i - 1]), st[k]]; b = busy[sprintf("%.3f", ts[i]), st[k]]
            line = line sprintf(" %.4f", (b - a) / dt)
        }
        print line
    }
}' "$in" >"$out/utilisation.dat"

gnuplot <<GP || { echo "$0: gnuplot failed" >&2; exit 1; }
set terminal pngcairo size 900,500
set output "$out/epochs.png"
set title "Training ($in)"
set xlabel "epoch"
set ylabel "loss"
set y2label "accuracy"
set y2range [0:1]
set ytics nomirror
set y2tics
set key outside bottom center horizontal
plot "$out/epochs.dat" using 1:2 with linespoints title "loss", \
     "" using 1:3 axes x1y2 with linespoints title "train acc", \
     "" using 1:4 axes x1y2 with linespoints title "val acc"
set output "$out/utilisation.png"
set title "Stage utilisation ($in)"
set xlabel "seconds since start"
set ylabel "busy (cores)"
unset y2label
unset y2tics
set yrange [0:*]
stats "$out/utilisation.dat" nooutput
plot for [k=2:5] "$out/utilisation.dat" using 1:k with lines lw 2 \
     title word("sampler extractor trainer releaser", k - 1)
GP
echo "$out/epochs.png"
echo "$out/utilisation.png"
