"""bench/report_outofcore.py - the result files of bench/outofcore.sh: tables,
targets (with what a missed one is explained by) and charts, from the raw
files that bench/report.py's helpers read. Run through bench/report.py."""
import json
import os
import time

from report import (MIB, STAGES, analyse_run, clean, fint, fnum, gnuplot, machine_md, mean, perf_top_of,
                    ratio, read_json, read_jsonl, read_text, run_json)


def outofcore(run_dir, results, name):
    st = read_json(os.path.join(run_dir, "settings.json"), {})
    mach = read_json(os.path.join(run_dir, "machine.json"), {})
    sets = read_jsonl(os.path.join(run_dir, "manifest.jsonl"))
    threads = {"sampler": st.get("samplers", 2), "extractor": st.get("extractors", 2), "trainer": 1, "releaser": 1}
    cap = st.get("cap_bytes", 0)
    data = []
    for ds in sets:
        label = ds["label"]
        fio = read_json(os.path.join(run_dir, label + ".fio.json"), {})
        fio_mmap = read_json(os.path.join(run_dir, label + ".fio-mmap.json"), {})
        xb = dict(l.split("=", 1) for l in read_text(os.path.join(run_dir, label + ".xbench")).split() if "=" in l)
        ds["fio_iops"] = fio.get("jobs", [{}])[0].get("read", {}).get("iops", float("nan")) if fio else float("nan")
        ds["fio_lat_us"] = (fio.get("jobs", [{}])[0].get("read", {}).get("clat_ns", {}).get("mean", float("nan")) / 1000
                            if fio else float("nan"))
        ds["fio_mmap_iops"] = (fio_mmap.get("jobs", [{}])[0].get("read", {}).get("iops", float("nan"))
                               if fio_mmap else float("nan"))
        ds["xbench_iops"] = float(xb.get("iops", "nan"))
        ds["xbench_hit_rate"] = float(xb.get("hit_rate", "nan"))
        ds["runs_data"] = {}
        ds["io_depth"] = st.get("io_depth", 64)
        for rid in ds["runs"]:
            mode = rid.rsplit("-", 1)[1]
            r = analyse_run(run_dir, rid, threads)
            for ps in r.get("perf_stat", {}).values():
                ps["window_s"] = st.get("prof_secs")
            ds["runs_data"][mode] = r
        d, mm = ds["runs_data"].get("direct"), ds["runs_data"].get("mmap")
        ds["speedup"] = ratio(mm["epoch_s"], d["epoch_s"]) if d and mm and d["ok"] and mm["ok"] else float("nan")
        for r in ds["runs_data"].values():
            if r["ok"]:
                r["iops_vs_fio"] = ratio(r["iops_busy"], ds["fio_iops"])
                r["iops_epoch_vs_fio"] = ratio(r["iops_epoch"], ds["fio_iops"])
        data.append(ds)

    # ---- targets at 4x the cap ----
    targets = []
    for ds in data:
        try:
            sc = float(ds["scale"])
        except ValueError:
            continue
        if sc < 4:
            continue
        d, mm = ds["runs_data"].get("direct"), ds["runs_data"].get("mmap")
        if not d or not d.get("ok"):
            targets.append({"dataset": ds["label"], "target": "all", "met": False, "value": None,
                            "why": ["- The direct run did not complete: " + failure_text(d) if d else
                                    "- There is no direct run (MODES)."]})
            continue
        t1 = {"dataset": ds["label"], "target": "direct I/O >= 3x faster per epoch than mmap",
              "value": ds["speedup"], "threshold": 3.0, "met": ds["speedup"] >= 3.0}
        t2 = {"dataset": ds["label"], "target": "extractor >= 85% of fio's IOPS",
              "value": d["iops_vs_fio"], "threshold": 0.85, "met": d["iops_vs_fio"] >= 0.85}
        t3 = {"dataset": ds["label"], "target": "overlap efficiency <= 1.2",
              "value": d["overlap"], "threshold": 1.2, "met": d["overlap"] <= 1.2}
        if mm and mm.get("ok"):
            t1["why"] = [] if t1["met"] else why_speedup(ds, d, mm)
        else:
            t1["met"] = False
            t1["why"] = ["- The mmap run did not complete: " + failure_text(mm) if mm else "- There is no mmap run (MODES)."]
        t2["why"] = [] if t2["met"] else why_iops(ds, d, st)
        t3["why"] = [] if t3["met"] else why_overlap(ds, d, st)
        targets += [t1, t2, t3]

    # ---- charts ----
    charts = charts_outofcore(run_dir, results, name, data, cap)

    # ---- markdown ----
    loads = "; ".join(f"{r['id']}: {r['load_before']} / {r['load_after']}" for ds in data
                      for r in ds["runs_data"].values())
    L = []
    title = "Out-of-core training under a memory cap: direct I/O vs mmap"
    L.append(f"# {title} ({time.strftime('%Y-%m-%d', time.gmtime())})")
    L.append("")
    L.append(f"Recorded {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} by `{st.get('command', 'bench/outofcore.sh')}`"
             + (" (**quick mode: a smoke run, not the reference figures**)" if st.get("quick") else "") + ".")
    L.append("")
    L.append("What: GraphSAGE trained by `gnnlaunch --cpu` on synthetic datasets whose features are a given "
             "multiple of a memory cap, each run under that cap, once with `pipeline.io = \"direct\"` (io_uring, "
             "O_DIRECT reads of the missing rows into the feature buffer) and once with `pipeline.io = \"mmap\"` "
             "(rows copied out of a read-only mapping: the page cache does the caching, as PyG+ in the "
             "GNNDrive paper). fio on the same file gives the device's random-read IOPS. How to read this file: "
             "docs/benchmarks.md.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L += machine_md(mach, loads)
    L.append("")
    L.append("## Method")
    L.append("")
    L.append(f"- **Memory cap**: {st.get('cap')} ({st.get('cap_bytes'):,} bytes) per run. {st.get('cap_method')}.")
    L.append(f"- **Cold start**: before every run and every reference, {st.get('drop_caches')}.")
    L.append(f"- **Job**: `model.kind = {st.get('model')}`, `model.fanouts = {st.get('fanouts')}`, "
             f"`pipeline.samplers = {st.get('samplers')}`, `pipeline.extractors = {st.get('extractors')}`, "
             f"`pipeline.io_depth = {st.get('io_depth')}`, {st.get('train_batches')} training batches per epoch, "
             f"{st.get('eval_batches')} validation and {st.get('eval_batches')} test batch(es) after the last epoch "
             f"(`train.eval_every = 1000000`); {st.get('epochs')} epochs ({st.get('fit_epochs')} on the \"fit\" "
             f"datasets, whose epochs are short). Epoch 1 starts cold and the last one also evaluates (and is "
             f"the one perf profiles); the epochs between are the measured ones, averaged below.")
    L.append(f"- **Feature buffer**: direct runs {st.get('fb_frac')} x cap; mmap runs "
             + ("the least gnnlaunch accepts (the extraction reserve), so that the rest of the cap is page cache "
                "(`MMAP_FB=min`)" if st.get("mmap_fb") == "min" else "the same as direct (`MMAP_FB=same`)")
             + ". Per dataset in the table below.")
    L.append("- **Datasets**: `gnnprep synth` (power-law degrees, `--avg-degree "
             f"{st.get('degree')}`, seed {st.get('seed')}); scale = features.bin / cap. The graph's topology "
             "(indptr.bin read in, indices.bin mapped) is charged to the cap as well.")
    L.append("")
    L.append("| dataset | nodes | row | features.bin | x cap | topology | batch | feature buffer direct / mmap (MiB) | reserve (MiB) |")
    L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for ds in data:
        L.append(f"| {ds['label']} | {ds['nodes']:,} | {ds['dim']} x {ds['dtype']} ({ds['stride']} B) | "
                 f"{ds['feat_bytes'] / MIB:,.0f} MiB | {ds['feat_bytes'] / cap:.2f} | {ds['topo_bytes'] / MIB:,.0f} MiB | "
                 f"{ds['batch']} | {ds['fb_mb']} / {ds['mmap_fb_mb']} | {ds['reserve_mb']} |")
    L.append("")
    L.append("## Results (means over the measured epochs)")
    L.append("")
    L.append("| dataset | io | epoch s | epoch 1 s | mmap / direct | hit rate | MB read / epoch | reads / epoch | "
             "IOPS (epoch) | IOPS (extractor busy) | fio IOPS | extractor / fio | overlap | busiest stage | "
             "major faults / epoch | peak memory |")
    L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|")
    for ds in data:
        for mode, r in ds["runs_data"].items():
            if not r["ok"]:
                L.append(f"| {ds['label']} | {mode} | **failed** (see below) | | | | | | | | | | | | | |")
                continue
            pk = r["cgroup"].get("peak_bytes")
            L.append(
                f"| {ds['label']} | {mode} | {fnum(r['epoch_s'], 2)} | {fnum(r['epoch1_s'], 2)} | "
                f"{fnum(ds['speedup'], 2) if mode == 'direct' else ''} | {fnum(r['hit_rate'], 3)} | "
                f"{fnum(r['read_bytes'] / 1e6, 1)} | {fint(r['read_ops'])} | {fint(r['iops_epoch'])} | "
                f"{fint(r['iops_busy'])} | {fint(ds['fio_iops'])} | "
                f"{fnum(r['iops_vs_fio'], 2) if mode == 'direct' else '(rows, not reads)'} | "
                f"{fnum(r['overlap'], 2)}{' ~' if r['rough'] else ''} | {r['busiest']} | {fint(r['majfaults'])} | "
                f"{(fnum(pk / MIB, 0) + ' MiB') if pk else 'n/a'} |")
    L.append("")
    failed = [(ds, m, r) for ds in data for m, r in ds["runs_data"].items() if not r["ok"]]
    if failed:
        L.append("Failed runs:")
        L.append("")
        for ds, m, r in failed:
            L.append(f"- {ds['label']}, {m}: {failure_text(r)}")
        L.append("")
    L.append("Columns: *epoch s* is the slowest rank's epoch time (`seconds` of the epoch objects); *mmap / "
             "direct* the ratio of the two modes' epoch times (the gain of direct I/O); *hit rate* the feature "
             "buffer's; *MB read*, *reads* the extractor's (`read_bytes`, `read_ops`: O_DIRECT reads in direct "
             "mode, but **row copies out of the mapping in mmap mode** - the disk reads of mmap mode are its major "
             "faults); *IOPS (epoch)* = reads / epoch time; *IOPS (extractor busy)* = reads / the extractor's busy "
             "time per thread; *extractor / fio* uses the latter; *overlap* = epoch time / the busiest stage's "
             "busy time per thread (1.0: the slowest stage never waits); *major faults* = the cgroup's "
             "`pgmajfault` over the epoch (topology faults of the sampler included); *peak memory* = the cgroup's "
             "peak (page cache and shared memory included) against the cap. *~*: the measured epochs last less "
             "than 8 s in all, so their busy / wait seconds, which the launcher samples once a second, are rough.")
    L.append("")
    L.append("References per dataset (same file, page cache dropped first):")
    L.append("")
    L.append("| dataset | fio io_uring O_DIRECT IOPS (bs, depth x jobs) | fio mean latency | fio mmap reads/s (row, 1 x jobs, under the cap) | "
             "gnn-extractor --bench IOPS (engine alone) | engine / fio |")
    L.append("|---|--:|--:|--:|--:|--:|")
    for ds in data:
        L.append(f"| {ds['label']} | {fint(ds['fio_iops'])} ({ds['read_bytes']} B, {st.get('io_depth')} x "
                 f"{st.get('extractors')}) | {fnum(ds['fio_lat_us'], 0)} us | {fint(ds['fio_mmap_iops'])} | "
                 f"{fint(ds['xbench_iops'])} | {fnum(ratio(ds['xbench_iops'], ds['fio_iops']), 2)} |")
    L.append("")
    L.append("### Per-stage busy / wait (seconds per epoch, summed over a stage's threads)")
    L.append("")
    L.append("| dataset | io | threads s/x/t/r | " + " | ".join(f"{s} busy / wait" for s in STAGES)
             + " | busiest per thread | epoch |")
    L.append("|---|---|---|" + "--:|" * len(STAGES) + "--:|--:|")
    for ds in data:
        for mode, r in ds["runs_data"].items():
            if not r["ok"]:
                continue
            th = r["threads"]
            L.append(f"| {ds['label']} | {mode} | {th['sampler']}/{th['extractor']}/{th['trainer']}/{th['releaser']} | "
                     + " | ".join(f"{fnum(r['busy'][s], 2)} / {fnum(r['wait'][s], 2)}" for s in STAGES)
                     + f" | {r['busiest']} {fnum(r['busy_thread'][r['busiest']], 2)} | {fnum(r['epoch_s'], 2)} |")
    L.append("")
    L.append("### Memory in the cap and the disk (means over the measured epochs)")
    L.append("")
    L.append("| dataset | io | cgroup usage MiB | anon | page cache (files) | shared memory (buffer, arenas) | "
             "peak MiB | OOM kills | disk reads / epoch (whole device) | disk MB / epoch |")
    L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for ds in data:
        for mode, r in ds["runs_data"].items():
            if not r["ok"]:
                continue
            cg = r["cgroup"]
            L.append(f"| {ds['label']} | {mode} | {fnum(r['mem_usage'] / MIB, 0)} | {fnum(r['mem_anon'] / MIB, 0)} | "
                     f"{fnum(r['mem_file'] / MIB, 0)} | {fnum(r['mem_shmem'] / MIB, 0)} | "
                     f"{fnum((cg.get('peak_bytes') or float('nan')) / MIB, 0)} | "
                     f"{cg.get('oom_kills')} | {fint(r['disk_reads'])} | {fnum(r['disk_bytes'] / 1e6, 1)} |")
    L.append("")

    # targets
    L.append("## Targets (features at 4x the cap)")
    L.append("")
    if not targets:
        L.append("No dataset at 4x the cap in this run (SETS); nothing checked.")
    else:
        L.append("| dataset | target | measured | result |")
        L.append("|---|---|--:|---|")
        for t in targets:
            v = t.get("value")
            L.append(f"| {t['dataset']} | {t['target']} | {fnum(v, 2) if v is not None else 'n/a'} | "
                     f"{'**met**' if t['met'] else '**missed**'} |")
        L.append("")
        for t in targets:
            if t["met"]:
                continue
            L.append(f"### Missed: {t['target']} ({t['dataset']})")
            L.append("")
            for w in t.get("why", []):
                L.append(w)
            L.append("")
    if st.get("quick"):
        L.append("Quick mode: the cap, datasets and epochs are small; the targets are checked on its 4x dataset "
                 "all the same, but its epochs are short against the launcher's 1-second sampling of stage "
                 "counters, so busy / wait seconds are rough. The reference figures come from a full run.")
        L.append("")

    L.append("## Charts")
    L.append("")
    for c, what in charts:
        L.append(f"![{what}]({os.path.basename(c)})")
        L.append("")
    L.append("## Epoch lines")
    L.append("")
    for ds in data:
        for mode, r in ds["runs_data"].items():
            L.append(f"{ds['label']}, {mode}:")
            L.append("")
            L.append("```")
            L += r["epoch_lines"] or ["(none)"] + r.get("log_tail", [])
            L.append("```")
            L.append("")
    L.append("## Commands")
    L.append("")
    L.append("```")
    L.append(f"{st.get('command')}")
    L.append("```")
    L.append("")
    L.append("which ran, per dataset (paths under its WORK directory):")
    L.append("")
    L.append("```")
    for ds in data:
        L.append(f"# {ds['label']}")
        L.append(ds["synth_cmd"])
        L.append(ds["fio_cmd"])
        L.append(ds["fio_mmap_cmd"] + "   # in a cgroup with the cap")
        L.append(ds["xbench_cmd"])
        for mode, r in ds["runs_data"].items():
            L.append(r["command"] + "   # in a cgroup with the cap, page cache dropped first")
    L.append("```")
    L.append("")
    L.append("Each CONFIG holds only `[dataset] path = \"DATASET\"`; everything else is on the command line. "
             "\"In a cgroup with the cap\" is: `mkdir CG; echo CAP > CG/memory.max` (cgroup v2, and `echo 0 > "
             "CG/memory.swap.max`) or `> CG/memory.limit_in_bytes` (v1); `sh -c 'echo $$ > CG/cgroup.procs && exec "
             "gnnlaunch ...'`; then `rmdir CG` (bench/lib.sh). The page cache is dropped with "
             f"`{st.get('drop_caches')}` before each run and each fio.")
    L.append("")
    L.append(f"Raw files (metrics JSON lines, logs, per-second memory and disk samples, perf output): `{run_dir}`.")
    L.append("")
    md = os.path.join(results, name + ".md")
    with open(md, "w") as f:
        f.write("\n".join(L))
    out = {
        "benchmark": "outofcore",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": st,
        "machine": mach,
        "datasets": [clean({k: v for k, v in ds.items() if k != "runs_data"}) for ds in data],
        "runs": {ds["label"]: {m: run_json(r) for m, r in ds["runs_data"].items()} for ds in data},
        "targets": clean(targets),
        "charts": [os.path.basename(c) for c, _ in charts],
    }
    with open(os.path.join(results, name + ".json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {md}, {os.path.join(results, name + '.json')}" + "".join(f", {c}" for c, _ in charts))
    for t in targets:
        print(f"target {t['dataset']}: {t['target']}: {fnum(t.get('value'), 2) if t.get('value') is not None else 'n/a'}"
              f" -> {'met' if t['met'] else 'MISSED'}")


def failure_text(r):
    cg = r.get("cgroup", {}) or {}
    t = f"`{r.get('failure', '?')}`"
    if cg.get("oom_kills"):
        t += (f" The kernel OOM-killed {cg['oom_kills']} process(es) of the run's cgroup (peak "
              f"{fnum((cg.get('peak_bytes') or 0) / MIB, 0)} MiB): what cannot be reclaimed (the feature buffer and "
              f"arenas in shared memory, the processes' own memory) outgrew the cap; lower FB_FRAC or raise the cap.")
    return t


def stage_profile_lines(r, stage):
    out = []
    ps = r.get("perf_stat", {}).get(stage)
    if ps:
        cpus = ps["task_clock_ms"] / 1000.0
        out.append(f"  perf stat over the last epoch's profile window: gnn-{stage} used "
                   f"{ps['task_clock_ms']:.0f} ms of CPU, {ps['context_switches']:.0f} context switches, "
                   f"{ps['major_faults']:.0f} major faults.")
    top = perf_top_of(r, "gnn-" + stage)
    if top:
        out.append(f"  Top of `perf report --sort comm,dso,sym` for gnn-{stage} (flat, on-CPU samples):")
        out.append("")
        out.append("      " + "\n      ".join(top))
        out.append("")
    return out


def prof_cpu(r, stage, secs):
    ps = r.get("perf_stat", {}).get(stage)
    if not ps or not secs:
        return None
    return ps["task_clock_ms"] / 1000.0 / secs


def why_speedup(ds, d, mm):
    """Splits the gain into the device's part and the reads' part: when both
    runs are bound by their disk reads, mmap/direct epoch time =
    (direct's disk reads/s / mmap's disk reads/s) x (mmap's disk reads /
    direct's disk reads)."""
    w = []
    sp = ds["speedup"]
    depth = ds.get("io_depth", 64)
    x = mm["threads"]["extractor"]
    w.append(f"- Direct's epoch is {fnum(d['epoch_s'], 2)} s, mmap's {fnum(mm['epoch_s'], 2)} s: {fnum(sp, 2)}x. "
             f"Busiest stage: direct {d['busiest']} ({fnum(d['busy_thread'][d['busiest']], 2)} s per thread), "
             f"mmap {mm['busiest']} ({fnum(mm['busy_thread'][mm['busiest']], 2)} s per thread).")
    rd, rm = d["disk_reads"], mm["disk_reads"]
    rate_d, rate_m = ratio(rd, d["epoch_s"]), ratio(rm, mm["epoch_s"])
    w.append(f"- Disk reads per epoch (/proc/diskstats, the whole device): direct {fint(rd)} "
             f"({fnum(ratio(d['disk_bytes'], rd), 0)} B each), mmap {fint(rm)} ({fnum(ratio(mm['disk_bytes'], rm), 0)} B "
             f"each: 4 KiB page faults). Rates: direct {fint(rate_d)} reads/s, mmap {fint(rate_m)} reads/s. So the "
             f"gain = {fnum(ratio(rate_d, rate_m), 2)} (how much faster direct reads) x {fnum(ratio(rm, rd), 2)} (how "
             f"many more reads mmap needs) = {fnum(ratio(rate_d, rate_m) * ratio(rm, rd), 2)}.")
    dev = ratio(ds["fio_iops"], ds["fio_mmap_iops"])
    w.append(f"- The first factor is the device's: fio with io_uring at depth {depth} x {x} jobs gives "
             f"{fint(ds['fio_iops'])} IOPS, fio's mmap engine with one read at a time per job ({x} jobs, page "
             f"faults, under the same cap) {fint(ds['fio_mmap_iops'])} reads/s: {fnum(dev, 2)}x. A page fault is a "
             f"synchronous read, so mmap mode has at most {x} reads in flight (one per extractor thread) against "
             f"direct's {x} x {depth}; what that is worth depends on how much the device gains from depth. Here "
             f"fio's mean latency at depth is {fnum(ds['fio_lat_us'], 0)} us, and reads at depth 1 complete in "
             f"about {fnum(1e6 * x / ds['fio_mmap_iops'], 0) if ds['fio_mmap_iops'] else 'n/a'} us: a virtual disk "
             f"backed by the host's cache saturates at a few times its depth-1 rate. An NVMe SSD (~80 us at "
             f"depth 1, 500k+ IOPS at depth) would make this factor 10x or more.")
    w.append(f"- The second factor is memory: mmap's rows are cached in 4 KiB pages (a miss brings in "
             f"{4096 // max(1, ds['stride'])} rows, mostly unwanted), in what the cap leaves after the feature "
             f"buffer ({ds['mmap_fb_mb']} MiB), the topology and the processes; direct caches single rows in its "
             f"{ds['fb_mb']} MiB buffer. Hit rates: direct's buffer {fnum(d['hit_rate'], 3)}, mmap's buffer "
             f"{fnum(mm['hit_rate'], 3)} with {fint(mm['read_ops'])} row copies out of the mapping per epoch.")
    ps = mm.get("perf_stat", {}).get("extractor")
    if ps:
        w.append(f"- perf stat in the last epoch's {ps.get('window_s')} s profile window: major faults of mmap's "
                 f"extractor {fint(ps['major_faults'])}, of its sampler "
                 f"{fint(mm.get('perf_stat', {}).get('sampler', {}).get('major_faults'))} (topology pages that "
                 f"feature pages pushed out of the cap; direct's sampler: "
                 f"{fint(d.get('perf_stat', {}).get('sampler', {}).get('major_faults'))}).")
    w += stage_profile_lines(mm, "extractor")
    w.append("- What would raise the gain: fewer reads for direct (a larger share of the cap for the feature "
             "buffer - FB_FRAC - or a lookahead eviction policy instead of LRU) and, above all, a device that "
             "gains more from depth than this one (NVMe). What would not: a deeper io_depth or more extractor "
             "threads, while direct already reads at fio's rate.")
    return w


def why_iops(ds, d, st):
    w = []
    x = d["threads"]["extractor"]
    w.append(f"- The extractor made {fint(d['read_ops'])} reads / epoch; its {x} threads were busy "
             f"{fnum(d['busy_thread']['extractor'], 2)} s each of a {fnum(d['epoch_s'], 2)} s epoch and waited "
             f"{fnum(d['wait_thread']['extractor'], 2)} s each (queues, buffer room): {fint(d['iops_busy'])} IOPS "
             f"while busy, {fint(d['iops_epoch'])} over the epoch, against fio's {fint(ds['fio_iops'])} "
             f"({fnum(d['iops_vs_fio'], 2)}).")
    w.append(f"- The engine alone (`gnn-extractor --bench`, same threads and depth, cold buffer, random batches "
             f"of 16384 nodes) reached {fint(ds['xbench_iops'])} IOPS ({fnum(ratio(ds['xbench_iops'], ds['fio_iops']), 2)} "
             f"of fio): " + ("so the engine can keep the device busy; the loss is in how training feeds it - "
                             "batches of ~" + fint(d['read_ops'] / max(1, st.get('train_batches', 1))) +
                             " reads each, with gaps between batches (buffer acquire / release under one lock, "
                             "the copy into the slot, waiting for the next batch) in which fewer than "
                             f"{st.get('io_depth')} reads are in flight."
                             if ratio(ds['xbench_iops'], ds['fio_iops']) >= 0.85 else
                             "the engine itself is below fio on this device: see bench/results/extractor-fio-*.md."))
    if d["busiest"] != "extractor":
        w.append(f"- The extractor is not the bottleneck here ({d['busiest']} is): its IOPS while busy include "
                 f"stretches where the batch being extracted had few misses left.")
    cpu = prof_cpu(d, "extractor", st.get("prof_secs"))
    if cpu is not None:
        w.append(f"- CPU: the extractor process used {cpu:.2f} CPUs in the profile window (of "
                 f"{os.cpu_count()} cores, shared with the sampler, trainer and other work: load average "
                 f"{d.get('load_before')} before the run). An extractor short of CPU submits late.")
    w += stage_profile_lines(d, "extractor")
    w.append("- What would fix it: keep the ring full across batch boundaries (start the next batch's reads "
             "while the current one drains - the engine already refills per completion within a batch), more "
             "extractor threads when CPU is free, and a quiet machine for the measurement.")
    return w


def why_overlap(ds, d, st):
    w = []
    b = d["busiest"]
    w.append(f"- Epoch {fnum(d['epoch_s'], 2)} s; busiest stage {b}, busy {fnum(d['busy_thread'][b], 2)} s per thread: "
             f"overlap {fnum(d['overlap'], 2)} - the bottleneck stage stood idle "
             f"{fnum(d['epoch_s'] - d['busy_thread'][b], 2)} s per thread of the epoch.")
    w.append("- Per thread, busy / wait s: " + ", ".join(
        f"{s} {fnum(d['busy_thread'][s], 2)} / {fnum(d['wait_thread'][s], 2)}" for s in STAGES) + ".")
    if d["wait_thread"][b] > 0.1 * d["epoch_s"]:
        w.append(f"- The {b} waited {fnum(d['wait_thread'][b], 2)} s per thread: on its input queue (the stage "
                 f"before it is too slow in bursts), its output queue (the stage after it), or for feature-buffer "
                 f"room (extractor: rows still referenced by queued batches).")
    unacc = d["epoch_s"] - d["busy_thread"][b] - d["wait_thread"][b]
    if unacc > 0.1 * d["epoch_s"]:
        w.append(f"- {fnum(unacc, 2)} s per thread are neither busy nor waiting: time outside the stage's "
                 f"per-batch accounting (start-up, the epoch boundary, the launcher's 1-second sampling of "
                 f"the counters) or threads not runnable (CPU shared: load average {d.get('load_before')}).")
    cpu = {s: prof_cpu(d, s, st.get("prof_secs")) for s in STAGES}
    if any(v is not None for v in cpu.values()):
        w.append("- CPUs used in the profile window: " + ", ".join(
            f"{s} {v:.2f}" for s, v in cpu.items() if v is not None) + f" (of {os.cpu_count()}).")
    w += stage_profile_lines(d, b)
    w.append("- What would fix it: deeper queues (`pipeline.extract_queue`, `pipeline.train_queue`) and a feature "
             "buffer with room for the batches they hold, so that the slowest stage always finds work; on a "
             "2-core machine, fewer threads than stages compete for the cores.")
    return w


def charts_outofcore(run_dir, results, name, data, cap):
    charts = []
    # 1. epoch time per dataset, direct vs mmap
    dat = os.path.join(run_dir, "epoch.dat")
    with open(dat, "w") as f:
        f.write("# dataset direct_s mmap_s speedup\n")
        for ds in data:
            d = ds["runs_data"].get("direct", {})
            m = ds["runs_data"].get("mmap", {})
            f.write(f"{ds['label']} {d.get('epoch_s', float('nan')) if d.get('ok') else 'nan'} "
                    f"{m.get('epoch_s', float('nan')) if m.get('ok') else 'nan'} {ds['speedup']}\n")
    png = os.path.join(results, name + "-epoch.png")
    any_ok = any(r.get("ok") for ds in data for r in ds["runs_data"].values())
    ymax = max([r["epoch_s"] for ds in data for r in ds["runs_data"].values() if r.get("ok")] + [1.0]) * 1.15
    ok = any_ok and gnuplot(f"""set terminal pngcairo size 1000,500 noenhanced
set output "{png}"
set title "Epoch time under a {cap / MIB:.0f} MiB cap (mean of the measured epochs)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel "seconds per epoch"
set yrange [0:{ymax}]
set key top left
set xtics rotate by -20
plot "{dat}" using 2:xtic(1) title "direct (io_uring, O_DIRECT)", \\
     "" using 3 title "mmap (page cache)", \\
     "" using 0:($3 > $2 ? $3 : $2):(sprintf("%.2fx", $4)) with labels offset 0,1 notitle
""", run_dir, "epoch")
    if ok:
        charts.append((png, "epoch time, direct vs mmap"))
    # 2. per-thread busy seconds per stage, per run
    dat = os.path.join(run_dir, "stages.dat")
    with open(dat, "w") as f:
        f.write("# run " + " ".join(STAGES) + " epoch\n")
        for ds in data:
            for mode, r in ds["runs_data"].items():
                if not r.get("ok"):
                    continue
                f.write(f"{ds['label']}:{mode} " + " ".join(str(r["busy_thread"][s]) for s in STAGES)
                        + f" {r['epoch_s']}\n")
    png = os.path.join(results, name + "-stages.png")
    ok = any_ok and gnuplot(f"""set terminal pngcairo size 1200,550 noenhanced
set output "{png}"
set title "Busy seconds per stage thread per epoch (bars) and epoch time (points): overlap = point / tallest bar"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel "seconds"
set yrange [0:*]
set key top left
set xtics rotate by -25
plot "{dat}" using 2:xtic(1) title "sampler", "" using 3 title "extractor", "" using 4 title "trainer", \\
     "" using 5 title "releaser", "" using 0:6 with points pt 7 ps 1.5 lc rgb "black" title "epoch"
""", run_dir, "stages")
    if ok:
        charts.append((png, "per-stage busy time per thread and epoch time"))
    # 3. memory over time for the largest dataset's runs
    big = None
    for ds in data:
        try:
            sc = float(ds["scale"])
        except ValueError:
            sc = 0
        if big is None or sc > big[0]:
            big = (sc, ds)
    if big:
        ds = big[1]
        plots = []
        for mode, r in ds["runs_data"].items():
            if not r.get("samples"):
                continue
            dat = os.path.join(run_dir, f"memory-{mode}.dat")
            with open(dat, "w") as f:
                f.write("# t usage_MiB anon file shmem\n")
                for s in r["samples"]:
                    f.write(f"{s['t']} " + " ".join(str(s.get(k, float('nan')) / MIB)
                                                    for k in ("usage", "anon", "file", "shmem")) + "\n")
            plots.append((mode, dat))
        if plots:
            png = os.path.join(results, name + "-memory.png")
            gp = [f"set terminal pngcairo size 1200,{420 * len(plots)} noenhanced", f'set output "{png}"',
                  f"set multiplot layout {len(plots)},1", "set xlabel \"seconds since the run started\"",
                  "set ylabel \"MiB\"", "set yrange [0:*]", "set key outside right"]
            for mode, dat in plots:
                gp.append(f'set title "{ds["label"]}, {mode}: memory charged to the run\'s cgroup (cap {cap / MIB:.0f} MiB)"')
                gp.append(f'plot "{dat}" using 1:2 with lines lw 2 title "total", "" using 1:5 with lines title '
                          f'"shared memory", "" using 1:4 with lines title "page cache", "" using 1:3 with lines '
                          f'title "anon", {cap / MIB} with lines dt 2 lc rgb "red" title "cap"')
            gp.append("unset multiplot")
            if gnuplot("\n".join(gp) + "\n", run_dir, "memory"):
                charts.append((png, f"memory in the cap over time, {ds['label']}"))
    return charts
