#!/usr/bin/env python3
"""bench/report_cache_policy.py - the result file of bench/cache_policy.sh.

    bench/report_cache_policy.py RAW_DIR OUT.md COMMAND EPOCHS CAP FB_MB

Reads RAW_DIR (manifest, ID.jsonl metrics, ID.log, ID.cg.json, ID.load,
LABEL.sim from gnnprep cache-sim) and writes OUT.md: per dataset and
policy the measured epochs' time and misses, the whole run's misses beside
the replay's (Belady and the same policy on the traced rows), and the
issue 18 targets at the largest scale."""
import json
import os
import re
import sys


def epochs_of(run, rid):
    p = os.path.join(run, rid + ".jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(line) for line in open(p) if '"type":"epoch"' in line]


def run_reads(run, rid):
    """The whole run's rows read, from the extractor's last note."""
    p = os.path.join(run, rid + ".log")
    if not os.path.exists(p):
        return None
    m = None
    for line in open(p):
        x = re.search(r"gnn-extractor rank 0: \d+ batches, (\d+) rows: \d+ hits, \d+ shared, (\d+) read", line)
        if x:
            m = (int(x.group(1)), int(x.group(2)))
    return m


def sim_of(run, lbl):
    p = os.path.join(run, lbl + ".sim")
    head, rows = {}, []
    if not os.path.exists(p):
        return head, rows
    for line in open(p):
        line = line.strip()
        if line.startswith("policy="):
            rows.append(dict(x.split("=", 1) for x in line.split()))
        elif "=" in line:
            k, v = line.split("=", 1)
            head[k] = v
    return head, rows


def main():
    run, out, cmdline, epochs, cap, la_mb = sys.argv[1:7]
    epochs = int(epochs)
    sets, runs, fbs = [], [], {}
    for line in open(os.path.join(run, "manifest")):
        w = line.split()
        if w[0] == "run":
            runs.append((w[1], w[2], w[3]))
        elif w[0] == "fb":
            fbs[w[1]] = w[2]
        else:
            sets.append((w[0], w[1]))
    md = ["# Feature buffer cache policies under a memory cap (issue 18)\n"]
    md.append(f"- **Command**: `flock /tmp/sluice-bench.lock {cmdline}`")
    cpu = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = open("/proc/meminfo").readline().split()[1]
    md.append(f"- **Machine**: {os.uname().sysname} {os.uname().release}, {cpu}, {os.cpu_count()} CPUs, "
              f"{int(mem) / 2**20:.0f} GiB RAM (shared with other work); cap {cap} (cgroup); raw files in `{run}`")
    md.append("- **Feature buffer**: the same slots for every policy of a dataset: " +
              ", ".join(f"{k} {v} MiB" for k, v in fbs.items()) + " (the largest that the costliest policy, "
              f"lookahead with its hint log of at most {la_mb} MiB and 4 bytes a node, fits under the cap beside "
              "gnnlaunch's plan for arenas, topology and margin)")
    lb = open(os.path.join(run, "load.before")).read().strip()
    la = open(os.path.join(run, "load.after")).read().strip() if os.path.exists(os.path.join(run, "load.after")) else "?"
    per = []
    for lbl, rid, pol in runs:
        p = os.path.join(run, rid + ".load")
        if os.path.exists(p):
            ls = open(p).read().split("\n")
            per.append(f"{rid}: {ls[0]} / {ls[1] if len(ls) > 1 else '?'}")
    md.append(f"- **Load average** (1, 5, 15 min) before / after: the whole script {lb} / {la}; per run " +
              "; ".join(per) + ". Other helpers' builds share the machine: compare times as ratios within a dataset.")
    md.append(f"- **Measured**: epochs 2..{epochs - 1} of {epochs} (epoch 1 starts cold, the last also evaluates); "
              "*misses / epoch* = the extractor's reads in those epochs (`read_ops`, one O_DIRECT read per row "
              "missed); *run misses* = every row the extractor read in the whole run (its final note), the "
              "number the replay counts.\n")
    md.append("## Runs\n")
    md.append("| dataset | policy | epoch s | vs lru | misses / epoch | vs lru | hit rate | run misses | vs Belady "
              "(replay) | vs the same policy replayed | sampler busy s / epoch | extractor busy s / epoch | peak memory "
              "| OOM kills |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = {}
    sims = {lbl: sim_of(run, lbl) for lbl, _ in sets}
    targets = []
    for lbl, rid, pol in runs:
        ep = [e for e in epochs_of(run, rid) if 2 <= e["epoch"] <= epochs - 1]
        cgp = os.path.join(run, rid + ".cg.json")
        cg = json.load(open(cgp)) if os.path.exists(cgp) else {}
        if not ep:
            md.append(f"| {lbl} | {pol} | failed (see {rid}.log) | | | | | | | | | | | {cg.get('oom_kills')} |")
            continue
        n = len(ep)
        sec = sum(e["seconds"] for e in ep) / n
        miss = sum(e["read_ops"] for e in ep) / n
        hits = [e["hit_rate"] for e in ep if e.get("hit_rate") is not None]
        hit = sum(hits) / len(hits) if hits else float("nan")
        sb = sum(e["stages"]["sampler"]["busy_s"] for e in ep) / n
        xb = sum(e["stages"]["extractor"]["busy_s"] for e in ep) / n
        if pol == "lru":
            base[lbl] = (sec, miss)
        rs = run_reads(run, rid)
        head, rows = sims.get(lbl, ({}, []))
        opt = next((int(r["misses"]) for r in rows if r["policy"] == "belady"), None)
        name, _, win = pol.partition(":")
        same = next((int(r["misses"]) for r in rows if r["policy"] == name and r["window"] == (win or "0")), None)
        vs_opt = f"{rs[1] / opt:.3f}" if rs and opt else ""
        vs_same = f"{rs[1] / same:.3f}" if rs and same else ""
        t_rel = f"{sec / base[lbl][0]:.2f}" if lbl in base else ""
        m_rel = f"{miss / base[lbl][1]:.3f}" if lbl in base else ""
        peak = cg.get("peak_bytes") or 0
        md.append(f"| {lbl} | {pol} | {sec:.2f} | {t_rel} | {miss:,.0f} | {m_rel} | {hit:.3f} | "
                  f"{rs[1] if rs else 0:,} | {vs_opt} | {vs_same} | {sb:.2f} | {xb:.2f} | {peak / 2**20:,.0f} MiB | "
                  f"{cg.get('oom_kills')} |")
        if name == "lookahead" and rs and same and lbl in base:
            targets.append((lbl, pol, rs[1] / same, miss / base[lbl][1], sec / base[lbl][0]))
    md.append("\n*vs lru*: over the lru run's of the same dataset. *vs Belady (replay)*: the run's misses over the "
              "optimum's on the lru run's traced rows (same batches and seeds, so the same rows per batch; the "
              "order of batches between extractor threads differs a little). *vs the same policy replayed*: the "
              "run's misses over the replay's for the same policy and window: what the pipeline's timing (hints "
              "arriving late, out-of-order batches) costs. *sampler busy*: sampling, plus with lookahead sampling "
              "every batch a second time to announce it: the window's extra cost.\n")
    if targets:
        md.append("## Targets (issue 18)\n")
        md.append("| dataset | policy | run / replayed same window (<= 1.1) | misses vs lru (<= 0.85 at 4x) | "
                  "epoch time vs lru |")
        md.append("|---|---|---|---|---|")
        for lbl, pol, a, b, c in targets:
            md.append(f"| {lbl} | {pol} | {a:.3f} {'met' if a <= 1.1 else 'missed'} | {b:.3f} "
                      f"{'met' if b <= 0.85 else 'missed'} | {c:.2f} |")
        md.append("")
    md.append("## Replay of the traced rows (gnnprep cache-sim)\n")
    for lbl, ds in sets:
        head, rows = sims[lbl]
        cmdp = os.path.join(run, lbl + ".sim.cmd")
        if not rows:
            md.append(f"{lbl}: no replay (see {lbl}.sim.err)\n")
            continue
        md.append(f"**{lbl}**: `{open(cmdp).read().strip()}` - {head.get('batches')} batches (all epochs of the lru "
                  f"run), {int(head.get('accesses', 0)):,} row requests, {head.get('slots')} slots, hot set "
                  f"{head.get('hot')} rows\n")
        md.append("| policy | window | misses (whole trace) | miss rate | vs Belady |")
        md.append("|---|---|---|---|---|")
        for r in rows:
            md.append(f"| {r['policy']} | {r['window'] if r['window'] != '0' else ''} | {int(r['misses']):,} | "
                      f"{float(r['miss_rate']):.4f} | {float(r['vs_belady']):.3f} |")
        md.append("")
    open(out, "w").write("\n".join(md) + "\n")
    print(out)


if __name__ == "__main__":
    main()
