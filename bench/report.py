#!/usr/bin/env python3
"""bench/report.py - turns the raw files of bench/outofcore.sh and
bench/scaling.sh into their result files: NAME.md, NAME.json and PNG charts
(gnuplot) in RESULTS.

    python3 bench/report.py outofcore RUN_DIR RESULTS NAME
    python3 bench/report.py scaling RUN_DIR RESULTS NAME

RUN_DIR is what the script left under bench/work/: settings.json,
machine.json, manifest.jsonl and per run ID.{cmd,log,jsonl,samples,cg.json,
load} (plus ID.prof.* with perf). The --metrics files follow
docs/metrics.md; every figure comes from them, the cgroup's counters, the
disk's counters, fio's JSON and perf's output. How to read the results:
docs/benchmarks.md. The report judges only the targets it was asked to
check; it asserts nothing else.
"""
import json
import math
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ in the work tree

STAGES = ["sampler", "extractor", "trainer", "releaser"]
MIB = 1 << 20


# ---- reading ------------------------------------------------------------------------------

def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def read_text(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def read_jsonl(path):
    out = []
    for line in read_text(path).splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by a killed run
    return out


def read_samples(path):
    """The per-second sampler's table: list of dicts of floats (nan kept)."""
    lines = read_text(path).splitlines()
    if not lines:
        return []
    keys = lines[0].split()
    rows = []
    for line in lines[1:]:
        vals = line.split()
        if len(vals) != len(keys):
            continue
        row = {}
        for k, v in zip(keys, vals):
            try:
                row[k] = float(v)
            except ValueError:
                row[k] = float("nan")
        rows.append(row)
    return rows


def sample_at(samples, key, t):
    """The value of a cumulative counter at time t (the last sample at or
    before t, else the first one)."""
    best = None
    for s in samples:
        if s["t"] <= t + 0.05:
            best = s
        else:
            break
    if best is None:
        best = samples[0] if samples else None
    v = best.get(key, float("nan")) if best else float("nan")
    return v


def read_perf_stat(path):
    """perf stat -x, output: {event: value}."""
    ev = {}
    for line in read_text(path).splitlines():
        if not line or line.startswith("#"):
            continue
        f = line.split(",")
        if len(f) < 3:
            continue
        try:
            ev[f[2]] = float(f[0])
        except ValueError:
            pass
    return ev


def fnum(x, nd=1):
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "n/a"
    return f"{x:,.{nd}f}"


def fint(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.0f}"


def mean(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else float("nan")


def ratio(a, b):
    try:
        if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
            return float("nan")
        return a / b
    except TypeError:
        return float("nan")


# ---- one run ------------------------------------------------------------------------------

def analyse_run(run_dir, rid, threads, ranks=1):
    """Everything about one gnnlaunch run. threads: stage -> threads per rank."""
    r = {"id": rid}
    r["command"] = read_text(os.path.join(run_dir, rid + ".cmd")).strip()
    log = read_text(os.path.join(run_dir, rid + ".log"))
    r["log_tail"] = log.strip().splitlines()[-3:] if log.strip() else []
    r["epoch_lines"] = [l for l in log.splitlines() if re.match(r"^epoch \d+/\d+ ", l) or l.startswith("test_acc=")]
    m = re.search(r"feature buffer per rank: (\d+) slots x (\d+) B = ([\d.]+ \w+) \(node map ([\d.]+ \w+)\)", log)
    r["featbuf_line"] = m.group(0) if m else None
    m = re.search(r"batch arena per rank: .*", log)
    r["arena_line"] = m.group(0) if m else None
    m = re.search(r"(\d+) parameters", log)
    r["params"] = int(m.group(1)) if m else None
    m = re.search(r"(\d+) steps per epoch", log)
    r["steps_per_epoch"] = int(m.group(1)) if m else None
    load = read_text(os.path.join(run_dir, rid + ".load")).split("\n")
    r["load_before"], r["load_after"] = (load + ["", ""])[0].strip(), (load + ["", ""])[1].strip()
    r["cgroup"] = read_json(os.path.join(run_dir, rid + ".cg.json"), {}) or {}
    objs = read_jsonl(os.path.join(run_dir, rid + ".jsonl"))
    epochs = [o for o in objs if o.get("type") == "epoch"]
    final = next((o for o in objs if o.get("type") == "final"), None)
    r["final"] = final
    r["complete"] = bool(final and final.get("complete"))
    r["epochs"] = epochs
    r["n_epochs"] = len(epochs)
    E = epochs[-1]["epochs"] if epochs else 0
    if E >= 3:
        steady = [e for e in epochs if 2 <= e["epoch"] <= E - 1]
    elif E == 2:
        steady = [e for e in epochs if e["epoch"] == 2]
    else:
        steady = epochs[:]
    r["steady_epochs"] = [e["epoch"] for e in steady]
    samples = read_samples(os.path.join(run_dir, rid + ".samples"))
    r["samples"] = samples
    if not steady or not r["complete"]:
        r["ok"] = False
        fails = [l for l in log.splitlines() if l.startswith("gnnlaunch:") and ("failed" in l or "killed" in l
                                                                               or "exited with" in l)]
        r["failure"] = fails[-1] if fails else (r["log_tail"][-1] if r["log_tail"] else "no log")
        return r
    r["ok"] = True
    nthreads = {s: threads.get(s, 1) * ranks for s in STAGES}
    r["threads"] = nthreads
    r["epoch_s"] = mean([e["seconds"] for e in steady])
    r["window_s"] = sum(e["seconds"] for e in steady)
    r["rough"] = r["window_s"] < 8.0
    r["epoch_s_all"] = [e["seconds"] for e in epochs]
    r["epoch1_s"] = epochs[0]["seconds"]
    r["busy"] = {s: mean([e["stages"].get(s, {}).get("busy_s") for e in steady]) for s in STAGES}
    r["wait"] = {s: mean([e["stages"].get(s, {}).get("wait_s") for e in steady]) for s in STAGES}
    r["busy_thread"] = {s: r["busy"][s] / nthreads[s] for s in STAGES}
    r["wait_thread"] = {s: r["wait"][s] / nthreads[s] for s in STAGES}
    r["busiest"] = max(STAGES, key=lambda s: r["busy_thread"][s])
    r["overlap"] = ratio(r["epoch_s"], r["busy_thread"][r["busiest"]])
    r["overlap_raw"] = ratio(r["epoch_s"], r["busy"][r["busiest"]])
    r["read_bytes"] = mean([e.get("read_bytes") for e in steady])
    r["read_ops"] = mean([e.get("read_ops") for e in steady])
    r["hit_rate"] = mean([e.get("hit_rate") for e in steady])
    r["hit_rate_epoch1"] = epochs[0].get("hit_rate")
    r["reduce_s"] = mean([e.get("reduce_s") for e in steady])
    r["iops_epoch"] = ratio(r["read_ops"], r["epoch_s"])
    r["iops_busy"] = ratio(r["read_ops"], r["busy_thread"]["extractor"])
    r["test_acc"] = final.get("test_acc")
    r["wall_s"] = final.get("seconds")
    # cgroup and disk counters over the measured epochs
    if samples:
        t_end = {e["epoch"]: e["t"] for e in epochs}
        t_start = {e["epoch"]: (t_end.get(e["epoch"] - 1, 0.0)) for e in epochs}
        def per_epoch(key):
            vals = []
            for e in steady:
                a = sample_at(samples, key, t_start[e["epoch"]])
                b = sample_at(samples, key, t_end[e["epoch"]])
                vals.append(b - a)
            return mean(vals)
        r["majfaults"] = per_epoch("pgmajfault")
        r["disk_reads"] = per_epoch("disk_reads")
        r["disk_bytes"] = per_epoch("disk_sectors") * 512
        t0 = min(t_start[e["epoch"]] for e in steady)
        t1 = max(t_end[e["epoch"]] for e in steady)
        win = [s for s in samples if t0 <= s["t"] <= t1]
        for k in ("usage", "anon", "file", "shmem"):
            r["mem_" + k] = mean([s.get(k) for s in win])
    else:
        for k in ("majfaults", "disk_reads", "disk_bytes", "mem_usage", "mem_anon", "mem_file", "mem_shmem"):
            r[k] = float("nan")
    # perf in the last epoch
    prof = {}
    pids = read_text(os.path.join(run_dir, rid + ".prof.pids")).split("\n")
    for line in pids:
        f = line.split()
        if len(f) != 2:
            continue
        stage, pid = f
        st = read_perf_stat(os.path.join(run_dir, f"{rid}.prof.stat.{stage}.{pid}"))
        if st:
            p = prof.setdefault(stage, {"task_clock_ms": 0.0, "context_switches": 0.0, "page_faults": 0.0,
                                        "major_faults": 0.0})
            p["task_clock_ms"] += st.get("task-clock", 0.0)
            p["context_switches"] += st.get("context-switches", 0.0)
            p["page_faults"] += st.get("page-faults", 0.0)
            p["major_faults"] += st.get("major-faults", 0.0)
    for p in prof.values():
        p["window_s"] = None
    r["perf_stat"] = prof
    r["perf_top"] = [l.rstrip() for l in read_text(os.path.join(run_dir, rid + ".prof.perf.txt")).splitlines()
                     if l.strip()]
    return r


def perf_top_of(r, comm, n=8):
    out = []
    for l in r.get("perf_top", []):
        f = l.split()
        if len(f) >= 2 and f[1] == comm:
            out.append(l.strip())
        if len(out) >= n:
            break
    return out


def run_json(r):
    """What of a run goes into NAME.json (no raw samples)."""
    skip = {"samples", "epochs", "log_tail"}
    d = {k: v for k, v in r.items() if k not in skip}
    d["epochs"] = r.get("epochs", [])
    return clean(d)


def clean(x):
    if isinstance(x, float):
        return None if (math.isnan(x) or math.isinf(x)) else round(x, 6)
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


# ---- gnuplot ------------------------------------------------------------------------------

def gnuplot(script, run_dir, name):
    path = os.path.join(run_dir, name + ".gp")
    with open(path, "w") as f:
        f.write(script)
    res = subprocess.run(["gnuplot", path], capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(f"report.py: gnuplot failed on {path}:\n{res.stderr}\n")
        return False
    return True


def machine_md(mach, loads):
    d = mach.get("disk", {})
    lines = [
        f"- CPU: {mach.get('cpu_model', '?')}, {mach.get('cores', '?')} cores (`nproc`); "
        f"virtualization: {mach.get('virtualization', '?')}",
        f"- RAM: {mach.get('mem_total_bytes', 0) / (1 << 30):.1f} GiB, swap {mach.get('swap_total_bytes', 0) / (1 << 30):.1f} GiB",
        f"- disk: /dev/{d.get('device', '?')} {d.get('model', '')} {d.get('size', '')}, rotational={d.get('rotational', '?')}, "
        f"logical block {d.get('logical_block', '?')} B, scheduler `{d.get('scheduler', '?')}`, "
        f"nr_requests {d.get('nr_requests', '?')}; {d.get('filesystem', '?')} at {d.get('mount', '?')}",
        f"- kernel {mach.get('kernel', '?')}, {mach.get('os', '?')}",
        f"- commit `{mach.get('commit', '?')}`" + (" (working tree has uncommitted changes)" if mach.get("dirty") else "")
        + f"; build `{mach.get('build_dir', '?')}` ({mach.get('build_type', '?') or 'default build type'})",
        f"- tools: {mach.get('tools', {}).get('fio', '?')}, {mach.get('tools', {}).get('gnuplot', '?')}, "
        f"{mach.get('tools', {}).get('perf', '') or 'no perf'}, python {mach.get('tools', {}).get('python3', '?')}",
    ]
    if loads:
        lines.append(f"- load average (1, 5, 15 min) before / after each run: {loads}. Other work on the machine "
                     f"inflates times; compare runs with similar loads.")
    return lines


# ---- entry ------------------------------------------------------------------------------

def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("outofcore", "scaling"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    kind, run_dir, results, name = sys.argv[1:]
    os.makedirs(results, exist_ok=True)
    if kind == "outofcore":
        from report_outofcore import outofcore
        outofcore(run_dir, results, name)
    else:
        from report_scaling import scaling
        scaling(run_dir, results, name)


if __name__ == "__main__":
    main()
