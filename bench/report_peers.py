#!/usr/bin/env python3
"""bench/report_peers.py - turns a bench/peers.sh run directory into
RESULTS/NAME.md and RESULTS/NAME.json.

usage: report_peers.py RUN_DIR[,RUN_DIR...] RESULTS_DIR NAME

Several run directories (comma-separated, e.g. the in-memory and the
out-of-core jobs, run one after the other under the benchmark lock) make
one result file: each group keeps its own run's settings and commands.

Per run (RUN/ID.*, listed in RUN/manifest.jsonl): Sluice's epoch lines and
final line from its stdout (docs/training.md, "Epoch lines"), or the peer's
JSON lines (bench/peers.py); the cgroup's peak memory (ID.cg.json), the
whole run's wall time (ID.wall), the load average before and after
(ID.load) and the command (ID.cmd). Per group of runs (one job on one
dataset), the ratios of the peers' steady-state times to Sluice's.

Steady state = the mean over epochs 2.. of the training time of an epoch
(`train_s`: Sluice's epoch line field, the peers' time in their training
loop), which is what a PyG script times; `seconds` (training plus that
epoch's validation, and the test pass on the last) is reported beside it.
"""
import json
import os
import re
import sys

EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+) (.*)$")
KV_RE = re.compile(r"(\w+)=([^ |]+)")

TARGETS = {  # group prefix -> (what, minimum ratio of the faster peer's steady train_s to Sluice's)
    "inmem-sage-10-5": ("in memory, GraphSAGE [10,5], 2M x 128: Sluice >= 3x faster than the faster peer", 3.0),
    "ooc-sage-10-5": ("out of core, features 4x the cap: Sluice >= 10x faster than the faster memory-mapped peer", 10.0),
}
ACC_POINTS = 0.5


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def parse_sluice(text):
    epochs, final = [], {}
    for line in text.splitlines():
        m = EPOCH_RE.match(line)
        if m:
            kv = dict(KV_RE.findall(m.group(3).split("|")[0]))
            epochs.append({"epoch": int(m.group(1)), "loss": num(kv.get("loss")),
                           "train_acc": num(kv.get("train_acc")), "val_acc": num(kv.get("val_acc")),
                           "seconds": num(kv.get("seconds")), "train_s": num(kv.get("train_s")),
                           "eval_s": num(kv.get("eval_s")), "line": line})
        elif line.startswith("test_acc="):
            final = {k: num(v) for k, v in KV_RE.findall(line)}
    return epochs, final, {}


def parse_peer(text):
    epochs, final, load = [], {}, {}
    for line in text.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        t = o.get("type")
        if t == "epoch":
            epochs.append(o)
        elif t == "final":
            final = o
        elif t == "load":
            load = o
    return epochs, final, load


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(v, d=2):
    return "-" if v is None else f"{v:.{d}f}"


def gib(b):
    return "-" if b is None else f"{b / 2**30:.2f} GiB"


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: report_peers.py RUN_DIR[,RUN_DIR...] RESULTS_DIR NAME")
    run_dirs, results, name = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    all_settings = []
    runs = []
    for d in run_dirs:
        st = json.loads(read(os.path.join(d, "settings.json"), "{}"))
        st.setdefault("run_dir", d)
        all_settings.append(st)
        for l in read(os.path.join(d, "manifest.jsonl")).splitlines():
            if l.strip():
                r = json.loads(l)
                r["run_dir"] = d
                r["settings"] = st
                runs.append(r)
    settings = all_settings[0] if all_settings else {}
    machine = json.loads(read(os.path.join(run_dirs[0], "machine.json"), "{}"))
    for r in runs:
        rid = r["id"]
        run = r["run_dir"]
        out = read(os.path.join(run, rid + ".log"))
        if r["system"] == "sluice":
            ep, fin, load = parse_sluice(out)
            both = read(os.path.join(run, rid + ".err")) + "\n" + out
            plan = [l for l in both.splitlines() if "plan:" in l]
            r["sluice_plan"] = plan[:2]
        else:
            ep, fin, load = parse_peer(out)
        r["epochs_detail"] = ep
        r["final"] = fin
        r["load"] = load
        r["command"] = read(os.path.join(run, rid + ".cmd")).strip()
        r["wall_s"] = num(read(os.path.join(run, rid + ".wall")).strip())
        r["loadavg"] = read(os.path.join(run, rid + ".load")).split("\n")[:2]
        try:
            r["cgroup"] = json.loads(read(os.path.join(run, rid + ".cg.json"), "{}"))
        except ValueError:
            r["cgroup"] = {}
        st = [e.get("train_s") for e in ep[1:]] if len(ep) > 1 else [e.get("train_s") for e in ep]
        se = [e.get("seconds") for e in ep[1:]] if len(ep) > 1 else [e.get("seconds") for e in ep]
        r["steady_train_s"] = mean(st)
        r["steady_epoch_s"] = mean(se)
        r["test_acc"] = fin.get("test_acc")
        r["peak_bytes"] = r["cgroup"].get("peak_bytes")
        if r["system"] != "sluice":
            rss = [fin.get("rss_peak_bytes"), fin.get("children_rss_peak_bytes")]
            r["rss_peak_bytes"] = rss[0]
            r["workers_rss_peak_bytes"] = rss[1]

    groups = {}
    for r in runs:
        groups.setdefault(r["group"], []).append(r)
    comparisons = []
    for g, rs in groups.items():
        sl = next((r for r in rs if r["system"] == "sluice"), None)
        for r in rs:
            if r is sl or sl is None:
                continue
            c = {"group": g, "peer": r["system"]}
            if r["rc"] != 0 or sl["rc"] != 0:
                c["failed"] = f"{r['system'] if r['rc'] else 'sluice'} exited with status {r['rc'] or sl['rc']}"
                comparisons.append(c)
                continue
            if sl["steady_train_s"] and r["steady_train_s"]:
                c["steady_train_ratio"] = r["steady_train_s"] / sl["steady_train_s"]
            if sl["steady_epoch_s"] and r["steady_epoch_s"]:
                c["steady_epoch_ratio"] = r["steady_epoch_s"] / sl["steady_epoch_s"]
            if sl["wall_s"] and r["wall_s"]:
                c["wall_ratio"] = r["wall_s"] / sl["wall_s"]
            if sl["test_acc"] is not None and r["test_acc"] is not None:
                c["acc_diff_points"] = 100 * (sl["test_acc"] - r["test_acc"])
                c["acc_within"] = abs(c["acc_diff_points"]) <= ACC_POINTS
            comparisons.append(c)
    targets = []
    for g, rs in groups.items():
        for prefix, (what, need) in TARGETS.items():
            if not g.startswith(prefix):
                continue
            cs = [c for c in comparisons if c["group"] == g and "steady_train_ratio" in c]
            if not cs:
                continue
            worst = min(cs, key=lambda c: c["steady_train_ratio"])
            targets.append({"group": g, "target": what, "need": need, "ratio": worst["steady_train_ratio"],
                            "faster_peer": worst["peer"], "met": worst["steady_train_ratio"] >= need})

    os.makedirs(results, exist_ok=True)
    doc = {"name": name, "settings": all_settings, "machine": machine, "runs": runs, "comparisons": comparisons,
           "targets": targets}
    def clean(o):  # NaN (an empty split's accuracy) is not JSON: null
        if isinstance(o, float) and o != o:
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, list):
            return [clean(v) for v in o]
        return o
    with open(os.path.join(results, name + ".json"), "w") as f:
        json.dump(clean(doc), f, indent=1)

    L = []
    L.append(f"# Sluice beside PyTorch Geometric and DGL ({name})")
    L.append("")
    made = "; ".join(f"`{st.get('command', 'bench/peers.sh')}` (job `{st.get('job')}`, raw files in `{st.get('run_dir')}`)"
                     for st in all_settings)
    L.append(f"Made by {made}, one after the other; the same numbers in `{name}.json`. How to read it: "
             "docs/benchmarks.md.")
    L.append("")
    L.append(f"- machine: {machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores, "
             f"{(machine.get('mem_total_bytes') or 0) / 2**30:.1f} GiB, {machine.get('os', '?')}, kernel "
             f"{machine.get('kernel', '?')}, {machine.get('virtualization', '?')}; disk "
             f"{machine.get('disk', {}).get('device', '?')} ({machine.get('disk', {}).get('model', '')}, "
             f"{machine.get('disk', {}).get('filesystem', '')}); shared with other work (load averages per run below)")
    L.append(f"- Sluice: commit {machine.get('commit_short', '?')}{' (dirty tree)' if machine.get('dirty') else ''}, "
             f"build `{machine.get('build_dir')}` ({machine.get('build_type')}), `gnnlaunch --cpu`")
    vers = {}
    for r in runs:
        info = (r.get("load") or {}).get("info") or {}
        if info:
            vers.setdefault(r["system"], info)
    for s, info in vers.items():
        keep = {k: v for k, v in info.items() if k not in ("graph", "init")}
        L.append(f"- {s}: " + ", ".join(f"{k} {v}" for k, v in keep.items()) + f"; graph: `{info.get('graph')}`"
                 + (f"; init: {info['init']}" if "init" in info else ""))
    L.append("- loader workers: per group below (PYG_WORKERS, DGL_WORKERS; in memory each peer's best of 0, 1, 2 "
             "from `--job tune`)")
    L.append(f"- job: hidden {settings.get('hidden')}, batch {settings.get('batch')}, Adam lr {settings.get('lr')}, "
             f"dropout {settings.get('dropout')} (after ReLU on hidden layers), mean cross-entropy; fanouts per "
             "group; the training split in shuffled batches each epoch")
    L.append(f"- out-of-core cap: {settings.get('cap')} ({settings.get('cap_method')}); caches dropped with "
             f"`{settings.get('drop_caches')}` where a group says so; training batches per epoch out of core: "
             f"{settings.get('ooc_steps')} (the same view of the dataset for every system)")
    L.append("")
    if targets:
        L.append("## Targets (issue 20; measured, not asserted)")
        L.append("")
        L.append("| group | target | measured (faster peer / Sluice, steady training epoch) | met |")
        L.append("|---|---|---|---|")
        for t in targets:
            L.append(f"| {t['group']} | {t['target']} | {t['ratio']:.2f}x ({t['faster_peer']}) | "
                     f"{'yes' if t['met'] else 'NO'} |")
        L.append("")
    L.append("## Ratios (peer / Sluice: above 1 = Sluice faster) and accuracy")
    L.append("")
    L.append("| group | peer | steady training epoch | steady epoch with eval | whole run | test accuracy, Sluice - peer (points) |")
    L.append("|---|---|---|---|---|---|")
    for c in comparisons:
        acc = "-"
        if "acc_diff_points" in c:
            acc = f"{c['acc_diff_points']:+.2f}" + ("" if c["acc_within"] else f" (beyond {ACC_POINTS})")
        if "failed" in c:
            L.append(f"| {c['group']} | {c['peer']} | - | - | - | {c['failed']} (below) |")
            continue
        L.append(f"| {c['group']} | {c['peer']} | {fmt(c.get('steady_train_ratio'))}x | "
                 f"{fmt(c.get('steady_epoch_ratio'))}x | {fmt(c.get('wall_ratio'))}x | {acc} |")
    L.append("")
    for g, rs in groups.items():
        r0 = rs[0]
        L.append(f"## {g}")
        L.append("")
        st = r0["settings"]
        L.append(f"Dataset `{r0['dataset']}`, {r0['model']} {r0['fanouts']}, {r0['epochs']} epochs, regime "
                 f"{r0['regime']}{' (caches dropped before each run)' if r0['drop_caches'] else ''}"
                 f"{' under a cap of ' + str(st.get('cap')) if r0['regime'] == 'ooc' else ''}, validation "
                 f"{'every epoch' if r0['eval'] == 'every' else 'after the last epoch'}, seed {r0['seed']}; "
                 f"loader workers PyG {st.get('pyg_workers')}, DGL {st.get('dgl_workers')}; "
                 f"`{st.get('command')}`.")
        L.append("")
        L.append("| system | training s per epoch | epoch s (with eval) | steady training s | steady epoch s | "
                 "test acc | peak memory (cgroup) | load: import / features / graph s | whole run s | load avg before -> after | exit |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            ep = r["epochs_detail"]
            ld = r.get("load") or {}
            lds = "-"
            if ld:
                lds = f"{ld.get('import_s', 0):.1f} / {ld.get('features_s', 0):.1f} / {ld.get('graph_s', 0):.1f}"
            la = " -> ".join(x.strip() for x in r["loadavg"] if x.strip())
            L.append(f"| {r['system']} | {' / '.join(fmt(e.get('train_s')) for e in ep) or '-'} | "
                     f"{' / '.join(fmt(e.get('seconds')) for e in ep) or '-'} | {fmt(r['steady_train_s'])} | "
                     f"{fmt(r['steady_epoch_s'])} | {fmt(r['test_acc'], 4)} | {gib(r['peak_bytes'])} | {lds} | "
                     f"{fmt(r['wall_s'], 1)} | {la} | {r['rc']} |")
        L.append("")
        for r in rs:
            if r.get("sluice_plan"):
                L.append(f"Sluice's {r['sluice_plan'][0].strip()}")
                L.append("")
        L.append("First-epoch losses: " + ", ".join(
            f"{r['system']} {fmt((r['epochs_detail'][0] if r['epochs_detail'] else {}).get('loss'), 4)}" for r in rs))
        L.append("")
        L.append("Commands:")
        L.append("")
        for r in rs:
            L.append(f"    {r['command']}")
        for r in rs:
            if r["rc"] != 0:
                oom = (r.get("cgroup") or {}).get("oom_kills")
                L.append("")
                L.append(f"{r['system']} exited with status {r['rc']}"
                         + (f": killed by the out-of-memory killer ({oom} OOM kill in its cgroup)" if oom else "")
                         + f"; its stderr is `{r['run_dir']}/{r['id']}.err`.")
        L.append("")
    with open(os.path.join(results, name + ".md"), "w") as f:
        f.write("\n".join(L))
    print(f"wrote {os.path.join(results, name + '.md')} and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
