"""bench/report_scaling.py - the result files of bench/scaling.sh: epoch time,
speedup, efficiency and all-reduce share by ranks, and the chart. Run
through bench/report.py."""
import json
import os
import time

from report import (STAGES, analyse_run, fnum, gnuplot, machine_md, ratio, read_json, read_jsonl, run_json)


def scaling(run_dir, results, name):
    st = read_json(os.path.join(run_dir, "settings.json"), {})
    mach = read_json(os.path.join(run_dir, "machine.json"), {})
    man = read_jsonl(os.path.join(run_dir, "manifest.jsonl"))
    threads = {"sampler": st.get("samplers", 2), "extractor": st.get("extractors", 2), "trainer": 1, "releaser": 1}
    rows = []
    for m in man:
        r = analyse_run(run_dir, m["id"], threads, m["ranks"])
        r["ranks"] = m["ranks"]
        ar = m.get("allreduce") or {}
        r["allreduce_us"] = ar.get("us_per_call")
        rows.append(r)
    base = next((r for r in rows if r["ranks"] == 1 and r["ok"]), None)
    for r in rows:
        if not r["ok"]:
            continue
        r["speedup"] = ratio(base["epoch_s"], r["epoch_s"]) if base else float("nan")
        r["efficiency"] = ratio(r["speedup"], r["ranks"])
        r["reduce_share"] = ratio(r["reduce_s"], r["epoch_s"])
        steps = r.get("steps_per_epoch")
        if r["allreduce_us"] is not None and steps:
            r["reduce_pure_s"] = steps * r["allreduce_us"] / 1e6
        else:
            r["reduce_pure_s"] = float("nan") if r["ranks"] > 1 else 0.0
        r["reduce_pure_share"] = ratio(r["reduce_pure_s"], r["epoch_s"])
        r["trainer_compute_s"] = r["busy"]["trainer"] / r["ranks"]
    loads = "; ".join(f"R={r['ranks']}: {r['load_before']} / {r['load_after']}" for r in rows)
    # chart
    charts = []
    dat = os.path.join(run_dir, "scaling.dat")
    with open(dat, "w") as f:
        f.write("# ranks epoch_s speedup efficiency reduce_share reduce_pure_share\n")
        for r in rows:
            if r["ok"]:
                f.write(f"{r['ranks']} {r['epoch_s']} {r['speedup']} {r['efficiency']} {r['reduce_share']} "
                        f"{r['reduce_pure_share']}\n")
    png = os.path.join(results, name + ".png")
    maxr = max([r["ranks"] for r in rows] + [1])
    if gnuplot(f"""set terminal pngcairo size 1200,450 noenhanced
set output "{png}"
set multiplot layout 1,2
set title "Epoch time and speedup by ranks ({st.get('dataset_label', '')})"
set xlabel "ranks"
set xtics (1, 2, 4, 8)
set ylabel "seconds per epoch"
set y2label "speedup"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:{maxr}]
set xrange [0.5:{maxr + 0.5}]
set key bottom right
plot "{dat}" using 1:2 with linespoints lw 2 pt 7 title "epoch s", \\
     "" using 1:3 axes x1y2 with linespoints lw 2 pt 5 title "speedup", \\
     "" using 1:1 axes x1y2 with lines dt 2 title "ideal"
set title "Share of the epoch in the gradient all-reduce"
set ylabel "% of epoch time"
unset y2label
unset y2tics
set yrange [0:*]
set key top left
plot "{dat}" using 1:(100 * $5) with linespoints lw 2 pt 7 title "reduce_s (measured)", \\
     "" using 1:(100 * $6) with linespoints lw 2 pt 5 title "sum alone (estimate)"
unset multiplot
""", run_dir, "scaling"):
        charts.append((png, "epoch time, speedup and all-reduce share by ranks"))

    L = []
    L.append(f"# Scaling with ranks: the same job at {', '.join(str(r['ranks']) for r in rows)} ranks "
             f"({time.strftime('%Y-%m-%d', time.gmtime())})")
    L.append("")
    L.append(f"Recorded {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} by `{st.get('command', 'bench/scaling.sh')}`"
             + (" (**quick mode: a smoke run**)" if st.get("quick") else "") + ".")
    L.append("")
    L.append(f"What: `gnnlaunch --cpu` with `pipeline.ranks = R` (data parallel: each rank samples, extracts and "
             f"trains its share of the training split with `train.batch_size` targets per batch, and the "
             f"trainers all-reduce the gradients every step through shared memory, ipc/allreduce.c). Speedup = "
             f"epoch time at 1 rank / at R; efficiency = speedup / R. How to read it: docs/benchmarks.md.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L += machine_md(mach, loads)
    L.append("")
    L.append("## Method")
    L.append("")
    L.append(f"- Dataset: {st.get('dataset_desc')}.")
    L.append(f"- Job: `model.kind = {st.get('model')}`, `model.fanouts = {st.get('fanouts')}`, `train.batch_size = "
             f"{st.get('batch')}` per rank, {st.get('epochs')} epochs (epoch 1 is the cold start; the means are over "
             f"the others but the last, which also evaluates), `pipeline.samplers = {st.get('samplers')}`, "
             f"`pipeline.extractors = {st.get('extractors')}` per rank, feature buffer {st.get('fb_desc')}.")
    L.append(f"- Memory: {st.get('cap_desc')}. Cold start: {st.get('drop_caches')} before each run.")
    L.append(f"- GPUs: {st.get('gpu_note')}")
    L.append("")
    L.append("## Results (means over the measured epochs)")
    L.append("")
    L.append("| ranks | epoch s | speedup | efficiency | all-reduce ms / epoch (reduce_s) | share | "
             "steps / epoch / rank | allreduce-bench us / call | sum alone ms / epoch (estimate) | share | trainer busy s / rank | "
             "busiest stage (per thread s) | overlap | hit rate |")
    L.append("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|")
    for r in rows:
        if not r["ok"]:
            L.append(f"| {r['ranks']} | **failed** | | | | | | | | | | | | |")
            continue
        L.append(f"| {r['ranks']} | {fnum(r['epoch_s'], 2)} | {fnum(r['speedup'], 2)} | {fnum(r['efficiency'], 2)} | "
                 f"{fnum(1000 * r['reduce_s'], 1)} | {fnum(100 * r['reduce_share'], 1)}% | {r.get('steps_per_epoch') or 'n/a'} | "
                 f"{fnum(r['allreduce_us'], 1) if r['allreduce_us'] is not None else 'n/a'} | "
                 f"{fnum(1000 * r['reduce_pure_s'], 2)} | {fnum(100 * r['reduce_pure_share'], 2)}% | "
                 f"{fnum(r['trainer_compute_s'], 2)} | {r['busiest']} ({fnum(r['busy_thread'][r['busiest']], 2)}) | "
                 f"{fnum(r['overlap'], 2)} | {fnum(r['hit_rate'], 3)} |")
    L.append("")
    L.append("**Where the all-reduce time comes from.** `reduce_s` in the epoch objects (docs/metrics.md) is the "
             "slowest rank's wall time inside `allreduce_sum` (stages/trainer_main.c, `step()`), which is the "
             "sum itself *plus* the wait for the slowest peer to arrive with its gradients. The metrics give no "
             "split of the two, so the table adds an estimate of the sum alone: `allreduce-bench` "
             "(bench/allreduce_bench.c) with the model's gradient size (parameters + 1 floats) and R processes, "
             "times the steps per epoch; the rest of `reduce_s` is waiting for peers (load imbalance, or ranks "
             "not scheduled when there are fewer cores than rank processes). What the trainer would need to "
             "report both directly is in docs/benchmarks.md (\"All-reduce time\").")
    L.append("")
    L.append("### Per-stage busy / wait (seconds per epoch, summed over ranks and threads)")
    L.append("")
    L.append("| ranks | " + " | ".join(f"{s} busy / wait" for s in STAGES) + " |")
    L.append("|--:|" + "--:|" * len(STAGES))
    for r in rows:
        if r["ok"]:
            L.append(f"| {r['ranks']} | " + " | ".join(f"{fnum(r['busy'][s], 2)} / {fnum(r['wait'][s], 2)}"
                                                        for s in STAGES) + " |")
    L.append("")
    cores = mach.get("cores") or 0
    procs = [(r["ranks"], r["ranks"] * 4) for r in rows]
    L.append(f"Each rank is 4 processes ({st.get('samplers')} sampler and {st.get('extractors')} extractor threads, "
             f"1 trainer thread, 1 releaser): " + ", ".join(f"R={a}: {b} processes" for a, b in procs)
             + f" on {cores} cores. Where rank processes outnumber cores, ranks wait for CPU, not for each other, "
             "and efficiency measures the machine more than the code.")
    L.append("")
    L.append("## Charts")
    L.append("")
    for c, what in charts:
        L.append(f"![{what}]({os.path.basename(c)})")
        L.append("")
    L.append("## Epoch lines")
    L.append("")
    for r in rows:
        L.append(f"R = {r['ranks']}:")
        L.append("")
        L.append("```")
        L += r["epoch_lines"] or ["(none)"] + r.get("log_tail", [])
        L.append("```")
        L.append("")
    L.append("## Commands")
    L.append("")
    L.append("```")
    L.append(st.get("command", ""))
    L.append("```")
    L.append("")
    L.append("which ran:")
    L.append("")
    L.append("```")
    if st.get("synth_cmd"):
        L.append(st["synth_cmd"])
    for m, r in zip(man, rows):
        L.append(r["command"] + ("   # in a cgroup with the cap" if st.get("capped") else ""))
        if m.get("allreduce_cmd"):
            L.append(m["allreduce_cmd"])
    for g in st.get("gpu_cmds", []):
        L.append(g)
    L.append("```")
    L.append("")
    L.append(f"Raw files: `{run_dir}`.")
    L.append("")
    md = os.path.join(results, name + ".md")
    with open(md, "w") as f:
        f.write("\n".join(L))
    out = {"benchmark": "scaling", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "settings": st,
           "machine": mach, "runs": [run_json(r) for r in rows], "charts": [os.path.basename(c) for c, _ in charts]}
    with open(os.path.join(results, name + ".json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {md}, {os.path.join(results, name + '.json')}" + "".join(f", {c}" for c, _ in charts))
    for r in rows:
        if r["ok"]:
            print(f"ranks={r['ranks']} epoch_s={r['epoch_s']:.2f} speedup={r['speedup']:.2f} "
                  f"efficiency={r['efficiency']:.2f} reduce_share={r['reduce_share']:.3f}")
        else:
            print(f"ranks={r['ranks']} failed")
