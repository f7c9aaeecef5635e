#!/usr/bin/env python3
"""report_kge.py - the table of bench/kge.sh from its run logs:
    bench/report_kge.py WORK OUT.md SEEDS COMMON DATASETS MODELS
(SEEDS, DATASETS and MODELS space-separated, COMMON the flags both sides
got). Reads WORK/runs/DATASET-MODEL-{sluice,pyg,marius}-SEED.log and
WORK/DATASET/dataset.toml; writes OUT.md and prints it."""
import os, re, statistics, subprocess, sys, tomllib
work, out, seeds, common = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4]
datasets, models = sys.argv[5].split(), sys.argv[6].split()
def last(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith("test_mrr=")]
    return dict(kv.split("=") for kv in lines[-1].split())
def eps(path):
    v = []
    with open(path) as f:
        for l in f:
            m = re.search(r"edges_per_s=(\d+)", l)
            if l.startswith("epoch ") and m:
                v.append(float(m.group(1)))
    return statistics.median(v[1:] or v)
def ms(v):
    return f"{statistics.mean(v):.4f}" + (f" ± {statistics.stdev(v):.4f}" if len(v) > 1 else "")
rows = []
for ds in datasets:
    with open(f"{work}/{ds}/dataset.toml", "rb") as f:
        meta = tomllib.load(f)
    for model in models:
        r = {}
        for sysname in ("sluice", "pyg", "marius"):
            runs = [f"{work}/runs/{ds}-{model}-{sysname}-{s}.log" for s in seeds]
            r[sysname] = ([float(last(p)["test_mrr"]) for p in runs], [float(last(p)["test_hits@10"]) for p in runs],
                          statistics.median(eps(p) for p in runs))
        d = statistics.mean(r["sluice"][0]) - statistics.mean(r["pyg"][0])
        rows.append((ds, model, meta.get("planted_mrr"), r, d))
uname = subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with open(out, "w") as f:
    f.write(f"# Link prediction in memory beside PyG's KGE models\n\n")
    f.write(f"Command: `SEEDS=\"{' '.join(seeds)}\" DATASETS=\"{' '.join(datasets)}\" MODELS=\"{' '.join(models)}\" "
            f"bench/kge.sh` (commit {commit}); common flags `{common}`.\n")
    f.write(f"Machine: {cpu}, {os.cpu_count()} CPUs, {uname}; one thread on each side.\n\n")
    f.write("Same training on both sides (PyG's): one random negative per positive, heads corrupted in the first "
            "half of a batch, tails in the second; DistMult with the margin ranking loss (margin 1), ComplEx with "
            "the logistic loss; Adagrad; xavier initialisation. Test MRR and Hits@10: tails ranked among all "
            "nodes, filtered, one rule for both (rank = 1 + higher + ties/2). `Marius` is Sluice with softmax over "
            "100 negatives shared by chunks of 100, both sides, half drawn by degree. Mean ± standard deviation "
            f"over seeds {', '.join(seeds)}; edges/s is the median epoch's training triples per second.\n\n")
    f.write("| dataset | model | Sluice MRR | PyG MRR | difference | Sluice Hits@10 | PyG Hits@10 | Sluice edges/s | PyG edges/s | Marius-style MRR | planted MRR |\n")
    f.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
    for ds, model, planted, r, d in rows:
        f.write(f"| {ds} | {model} | {ms(r['sluice'][0])} | {ms(r['pyg'][0])} | {d:+.4f} | {ms(r['sluice'][1])} | "
                f"{ms(r['pyg'][1])} | {r['sluice'][2]:.0f} | {r['pyg'][2]:.0f} | {ms(r['marius'][0])} | "
                f"{planted if planted is not None else '-'} |\n")
print(open(out).read())
