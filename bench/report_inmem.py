#!/usr/bin/env python3
"""bench/report_inmem.py - the tables of bench/results/inmem-*.md from the
logs bench/inmem.sh leaves in OUT (default bench/work/inmem):

  python3 bench/report_inmem.py [OUT]

Per job and build: epoch seconds (first, steady = mean of the later ones),
whole-run wall seconds, test accuracy, per-stage busy seconds (first epoch
and steady mean); per job, the trainer against plain sgemm per layer and
the FLOP bound of an epoch (its 100 training batches' dense products at
the plain sgemm rate, from trainer-bench's sgemm_floor_ms)."""
import glob
import os
import re
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "bench/work/inmem"
STAGES = ["sampler", "extractor", "trainer", "releaser"]
TRAIN_BATCHES = 100  # training targets / batch size on inmem-2m


def parse_run(path):
    r = {"epochs": [], "busy": [], "wall": None, "acc": None, "load": None, "load_after": None}
    for line in open(path, errors="replace"):
        m = re.match(r"epoch (\d+)/(\d+) loss=\S+ .*seconds=([\d.]+) .*\| busy s: (.*?) \| wait", line)
        if m:
            r["epochs"].append(float(m.group(3)))
            busy = dict(re.findall(r"(\w+) ([\d.]+)", m.group(4)))
            r["busy"].append({k: float(busy.get(k, "nan")) for k in STAGES})
        m = re.match(r"test_acc=([\d.]+)", line)
        if m:
            r["acc"] = float(m.group(1))
        m = re.match(r"\+ wall_s=([\d.]+)", line)
        if m:
            r["wall"] = float(m.group(1))
        m = re.match(r"\+ load: (.*)", line)
        if m:
            r["load"] = m.group(1)
        m = re.match(r"\+ load after: (.*)", line)
        if m:
            r["load_after"] = m.group(1)
    return r


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def kv(line):
    return dict(re.findall(r"(\w+)=([-\w.]+)", line))


jobs = {"105": "[10,5], 5 epochs", "101010": "[10,10,10], 3 epochs"}
for job, title in jobs.items():
    runs = {}
    for label in ("base", "nohuge", "new"):
        for path in sorted(glob.glob(os.path.join(out, f"{label}-{job}-*.log"))):
            runs.setdefault(label, []).append(parse_run(path))
    if not runs:
        continue
    print(f"### {title}\n")
    print("| build | epochs (s) | first | steady | first / steady | whole run (s) | test_acc | load before / after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, rs in runs.items():
        for r in rs:
            e = r["epochs"]
            steady = mean(e[1:])
            print(f"| {label} | {' / '.join(f'{x:.2f}' for x in e)} | {e[0]:.2f} | {steady:.2f} | "
                  f"{e[0] / steady:.2f} | {r['wall']} | {r['acc']} | {r['load']} / {r['load_after']} |")
    print()
    print("Busy seconds per stage (first epoch; steady mean):\n")
    print("| build | " + " | ".join(STAGES) + " |")
    print("| --- |" + " --- |" * len(STAGES))
    for label, rs in runs.items():
        for r in rs:
            cells = []
            for s in STAGES:
                first = r["busy"][0][s]
                steady = mean([b[s] for b in r["busy"][1:]])
                cells.append(f"{first:.1f}; {steady:.2f}")
            print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    samp = []
    for label in ("base", "new"):
        p = os.path.join(out, f"sampler-{label}-{job}.log")
        if not os.path.exists(p):
            continue
        d = {}
        for ln in open(p):
            d.update(kv(ln))
        tc = None
        if os.path.exists(p + ".perf"):
            for ln in open(p + ".perf"):
                if "task-clock" in ln:
                    tc = float(ln.split(",")[0]) / 1e3
        eps = float(d.get("sampled_edges_per_s", "nan"))
        secs = float(d.get("seconds", "nan"))
        per_cpu = eps * secs / tc if tc else float("nan")
        samp.append(f"| {label} | {eps / 1e6:.2f} | {per_cpu / 1e6:.2f} |")
    if samp:
        print("Sampler alone (gnn-sampler --bench, 1 thread, batch 1000), million sampled edges per second of "
              "wall time and per CPU second:\n")
        print("| build | M edges/s | M edges per CPU s |")
        print("| --- | --- | --- |")
        print("\n".join(samp))
        print()
    for suffix, what in (("", "rows in small pages"), ("-huge", "rows in huge pages")):
        tb = os.path.join(out, f"trainer-bench-{job}{suffix}.log")
        if not os.path.exists(tb):
            continue
        lines = open(tb).read().splitlines()
        head = {}
        layers = []
        for ln in lines:
            d = kv(ln)
            if "layer" in d:
                layers.append(d)
            else:
                head.update(d)
        print(f"Trainer against plain sgemm (trainer-bench, new build, {what}; GFLOP/s of the dense products):\n")
        print("| layer | n_dst | in x out | fwd ms | fwd GFLOP/s | sgemm fwd | bwd ms | bwd GFLOP/s | sgemm bwd |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for d in layers:
            print(f"| {d['layer']} | {d['n_dst']} | {d['in']} x {d['out']} | {d['fwd_ms']} | {d['fwd_gflops']} | "
                  f"{d['sgemm_fwd_gflops']} | {d['bwd_ms']} | {d['bwd_gflops']} | {d['sgemm_bwd_gflops']} |")
        if "sgemm_floor_ms" in head:
            floor = float(head["sgemm_floor_ms"]) * TRAIN_BATCHES / 1000
            print(f"\nBatch: {head.get('batch_gflop')} GFLOP of dense products, {head.get('batch_ms')} ms "
                  f"({head.get('batch_gflops')} GFLOP/s; gather {head.get('gather_ms')} ms, CPU {head.get('cpu_ms')} "
                  f"ms of all threads). FLOP bound of an epoch ({TRAIN_BATCHES} training batches at the plain sgemm "
                  f"rate): {floor:.2f} s.")
            if "new" in runs:
                st = mean([mean(r["epochs"][1:]) for r in runs["new"]])
                tr = mean([mean([b["trainer"] for b in r["busy"][1:]]) for r in runs["new"]])
                print(f"New build: steady epoch {st:.2f} s = {st / floor:.2f} x the bound; trainer busy {tr:.2f} s "
                      f"= {tr / floor:.2f} x.")
        print()
