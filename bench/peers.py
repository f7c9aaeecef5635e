#!/usr/bin/env python3
"""bench/peers.py - the PyTorch Geometric and DGL sides of bench/peers.sh.

Trains one job on a Sluice dataset directory (docs/format.md) with PyG
(NeighborLoader + SAGEConv/GCNConv) or DGL (NeighborSampler + DataLoader +
dglnn.SAGEConv/GraphConv), reading Sluice's files directly: the features
through numpy (np.fromfile into memory, or np.memmap) honouring the row
stride and dtype that dataset.toml records, the topology from indptr.bin /
indices.bin (CSC of in-neighbours) handed to the peer's own graph structure
(torch_sparse.SparseTensor for PyG, a DGL graph built from 'csc' for DGL).
Building that structure is part of the measured load time; nothing is
converted ahead of time.

The job matches Sluice's (docs/training.md): L layers in -> hidden -> ...
-> classes, ReLU then dropout between layers (training only), mean
cross-entropy, Adam(lr); an epoch is the whole training split in shuffled
batches, then (every epoch unless --eval-last) the validation split, and
the test split after the last epoch, all with the same sampled fanouts.

Prints one JSON object per line on stdout: {"type": "load", ...}, one
{"type": "epoch", ...} per epoch, and {"type": "final", ...}.

usage: peers.py --system pyg|dgl --dataset DIR [options]   (--help)
"""
import argparse
import json
import mmap
import os
import resource
import sys
import time
import tomllib
import warnings

T_START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPES = {"u32": np.uint32, "u64": np.uint64, "i32": np.int32, "i64": np.int64,
          "f32": np.float32, "f16": np.float16}


KEEP_ALIVE = []


def die(msg):
    print(f"peers.py: {msg}", file=sys.stderr)
    sys.exit(2)


def rss_peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def children_peak_bytes():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


# ---- the dataset, read as Sluice writes it --------------------------------------------------

class Dataset:
    def __init__(self, path, features, madvise="normal"):
        self.path = path
        self.madvise = madvise
        try:
            with open(os.path.join(path, "dataset.toml"), "rb") as f:
                self.meta = tomllib.load(f)
        except OSError as e:
            die(f"{path}/dataset.toml: {e.strerror}; pass a dataset made by gnnprep")
        m = self.meta
        if m.get("format") != "sluice-dataset" or m.get("version") != 1:
            die(f"{path}/dataset.toml: not a version 1 sluice-dataset")
        self.n = int(m["nodes"])
        self.e = int(m["edges"])
        self.f = int(m["feat_dim"])
        self.classes = int(m["classes"])
        self.mode = features

    def _file(self, name):
        t = self.meta[name]
        return os.path.join(self.path, t["file"]), DTYPES[t["dtype"]], t

    def array(self, name, mmap=False):
        p, dt, t = self._file(name)
        n = int(t["shape"][0])
        if mmap:
            return np.memmap(p, dtype=dt, mode="r", shape=(n,))
        a = np.fromfile(p, dtype=dt)
        if a.shape[0] != n:
            die(f"{p}: {a.shape[0]} items, dataset.toml says {n}")
        return a

    def features(self):
        """[N, F] features: in memory (a contiguous copy without the row
        padding) or memory-mapped (a strided view of the file, no copy)."""
        p, dt, t = self._file("features")
        stride = int(t["row_stride"])
        es = np.dtype(dt).itemsize
        if stride % es:
            die(f"{p}: row_stride {stride} is not a multiple of the element size {es}")
        cols = stride // es
        rows = self.n
        mm = np.memmap(p, dtype=dt, mode="r", shape=(rows, cols))
        view = mm[:, : self.f]
        if self.mode == "mmap" and self.madvise == "random":
            # no readahead: a fault reads the row's page, not 128 KiB around it
            mm._mmap.madvise(mmap.MADV_RANDOM)
        if self.mode == "mmap":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # read-only memmap: torch warns about writes
                return torch.from_numpy(view)
        if cols == self.f:
            a = np.fromfile(p, dtype=dt, count=rows * cols).reshape(rows, cols)
        else:
            a = np.ascontiguousarray(view)
        del mm
        return torch.from_numpy(a)

    def labels(self):
        # i32 as stored (4 bytes a node, not 8): batches widen their own
        # labels; memory-mapped with mapped features
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.from_numpy(self.array("labels", mmap=self.mode == "mmap"))

    def split(self, name):
        return torch.from_numpy(self.array(name).astype(np.int64))


# ---- PyG -------------------------------------------------------------------------------------

def pyg_setup(ds, args, x, y):
    import torch_geometric
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv
    from torch_geometric.utils import trim_to_layer
    import torch_sparse
    from torch_sparse import SparseTensor

    t0 = time.perf_counter()
    # indptr is u64: the same bits as int64 (E < 2^63). torch_sparse wants
    # int64 indices, so the u32 in-neighbour ids are widened (its cost is
    # part of the load).
    mm = args.features == "mmap"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        indptr = torch.from_numpy(ds.array("indptr", mmap=mm).view(np.int64))
    indices = torch.from_numpy(ds.array("indices", mmap=mm).astype(np.int64))
    # adj_t[v, u] = 1 for an edge u -> v: CSR of adj_t is the dataset's CSC.
    adj_t = SparseTensor(rowptr=indptr, col=indices, sparse_sizes=(ds.n, ds.n), is_sorted=True,
                         trust_data=True)
    data = Data(x=x, y=y, adj_t=adj_t)
    data.num_nodes = ds.n
    graph_s = time.perf_counter() - t0

    # trim_to_layer needs the per-hop counts (num_sampled_nodes), which
    # only pyg-lib's sampler returns; torch_sparse's does not.
    trim = args.trim if args.trim != "auto" else ("yes" if args.model in ("sage", "gat") else "no")
    if trim == "yes" and not torch_geometric.typing.WITH_PYG_LIB:
        trim = "no (unavailable: the torch_sparse sampler returns no per-hop counts)"

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            dims = [ds.f] + [args.hidden] * (args.layers - 1) + [ds.classes]
            last = args.layers - 1

            def conv(i):
                if args.model == "gat":  # hidden: heads concatenated; last: heads averaged
                    if i < last:
                        return GATConv(dims[i], dims[i + 1] // args.heads, heads=args.heads)
                    return GATConv(dims[i], dims[i + 1], heads=args.heads, concat=False)
                return {"sage": SAGEConv, "gcn": GCNConv}[args.model](dims[i], dims[i + 1])
            self.convs = torch.nn.ModuleList(conv(i) for i in range(args.layers))

        def forward(self, h, adj, nsn, nse):
            for i, c in enumerate(self.convs):
                if trim == "yes":
                    h, adj, _ = trim_to_layer(i, nsn, nse, h, adj)
                h = c(h, adj)
                if i < len(self.convs) - 1:
                    h = F.relu(h)
                    h = F.dropout(h, p=args.dropout, training=self.training)
            return h

    def loader(nodes, shuffle):
        kw = {}
        if args.workers > 0:
            kw = {"persistent_workers": True}
        return NeighborLoader(data, num_neighbors=args.fanouts, batch_size=args.batch, input_nodes=nodes,
                              shuffle=shuffle, num_workers=args.workers, **kw)

    def run_batch(model, b):
        b = b.to(args.device)
        nsn = getattr(b, "num_sampled_nodes", None) if trim == "yes" else None
        nse = getattr(b, "num_sampled_edges", None) if trim == "yes" else None
        out = model(b.x.float(), b.adj_t, nsn, nse)[: b.batch_size]
        return out, b.y[: b.batch_size].long()

    backend = "torch_sparse" if not torch_geometric.typing.WITH_PYG_LIB else "pyg_lib"
    info = {"torch_geometric": torch_geometric.__version__, "torch_sparse": torch_sparse.__version__,
            "sampler_backend": backend, "trim_to_layer": trim,
            "graph": "torch_sparse.SparseTensor(rowptr=indptr, col=indices) as data.adj_t"}
    return Net, loader, run_batch, graph_s, info


# ---- DGL -------------------------------------------------------------------------------------

def dgl_setup(ds, args, x, y):
    import dgl
    import dgl.nn as dglnn

    t0 = time.perf_counter()
    mm = args.features == "mmap"
    warnings.simplefilter("ignore", UserWarning)  # torch.from_numpy of read-only memmaps
    indptr = ds.array("indptr", mmap=mm)
    indices = ds.array("indices", mmap=mm)
    # int32 ids halve the topology's memory, but DGL 2.1.0 crashes when an
    # int32 graph is sampled in the main process (workers = 0: COOToCSR's
    # "thread_prefixsum[num_threads] == NNZ" check fails, or a segfault, on
    # the sampled blocks); in loader workers it trains. So int32 with
    # workers, int64 (DGL's default) without.
    if ds.e < 2**31 and ds.n < 2**31 and args.workers > 0:
        idtype = torch.int32
        ip = torch.from_numpy(indptr.astype(np.int32))
        ix = torch.from_numpy(np.asarray(indices).view(np.int32) if indices.dtype == np.uint32
                              else np.asarray(indices).astype(np.int32))
    else:
        idtype = torch.int64
        ip = torch.from_numpy(indptr.view(np.int64))
        ix = torch.from_numpy(np.asarray(indices).astype(np.int64))
    # ('csc', (indptr, indices, [])): the in-edges of v are indices[indptr[v]:indptr[v+1]] -> v
    g = dgl.graph(("csc", (ip, ix, torch.tensor([], dtype=idtype))), num_nodes=ds.n, idtype=idtype)
    # Only the CSC the sampler reads: DGL would otherwise materialise COO
    # and CSR beside it (three copies of the topology; out of core they do
    # not fit the cap).
    g = g.formats(["csc"])
    g.create_formats_()
    # DGL may share the tensors' memory (DLPack) without holding them: keep them alive.
    KEEP_ALIVE.extend([ip, ix, indptr, indices])
    g.ndata["feat"] = x
    g.ndata["label"] = y
    graph_s = time.perf_counter() - t0

    self_loops = args.model in ("gcn", "gat")  # Sluice adds each destination's self loop

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            dims = [ds.f] + [args.hidden] * (args.layers - 1) + [ds.classes]
            last = args.layers - 1

            def mk(i):
                if args.model == "sage":
                    return dglnn.SAGEConv(dims[i], dims[i + 1], "mean")
                if args.model == "gat":
                    d = dims[i + 1] // args.heads if i < last else dims[i + 1]
                    return dglnn.GATConv(dims[i], d, args.heads, allow_zero_in_degree=True)
                return dglnn.GraphConv(dims[i], dims[i + 1], norm="both", allow_zero_in_degree=True)
            self.convs = torch.nn.ModuleList(mk(i) for i in range(args.layers))

        def forward(self, blocks, h):
            for i, (c, b) in enumerate(zip(self.convs, blocks)):
                h = c(b, h)
                if args.model == "gat":  # [dst, heads, d]: concatenate, or average on the last layer
                    h = h.flatten(1) if i < len(self.convs) - 1 else h.mean(1)
                if i < len(self.convs) - 1:
                    h = F.relu(h)
                    h = F.dropout(h, p=args.dropout, training=self.training)
            return h

    def with_self_loops(b):
        # GCN as Sluice's "block" norm, and GAT: each destination also aggregates itself.
        src, dst = b.edges()
        ids = torch.arange(b.num_dst_nodes(), dtype=src.dtype)
        return dgl.create_block((torch.cat([src, ids]), torch.cat([dst, ids])),
                                num_src_nodes=b.num_src_nodes(), num_dst_nodes=b.num_dst_nodes(), idtype=src.dtype)

    # DGL's fanouts are per layer from the input side: the reverse of
    # Sluice's / PyG's order (first = the targets' neighbours).
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanouts)), prefetch_node_feats=["feat"],
                                              prefetch_labels=["label"])

    # --sample-only: the sampler alone, with no feature or label gathered
    bare = dgl.dataloading.NeighborSampler(list(reversed(args.fanouts)))

    def loader(nodes, shuffle, feats=True):
        kw = {}
        if args.workers > 0:
            kw = {"persistent_workers": True}
        return dgl.dataloading.DataLoader(g, nodes.to(idtype), sampler if feats else bare, batch_size=args.batch,
                                          shuffle=shuffle, drop_last=False, num_workers=args.workers, **kw)

    def run_batch(model, b):
        _, _, blocks = b
        x0, lab = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
        if self_loops:
            blocks = [with_self_loops(bl) for bl in blocks]
        blocks = [bl.to(args.device) for bl in blocks]
        return model(blocks, x0.to(args.device).float()), lab.to(args.device).long()

    info = {"dgl": dgl.__version__, "graph": f"dgl.graph(('csc', (indptr, indices, [])), idtype={idtype})",
            "init": "DGL defaults (xavier_uniform, relu gain for SAGEConv's linears; biases 0)"}
    try:
        import torchdata
        info["torchdata"] = torchdata.__version__
    except ImportError:
        pass
    return Net, loader, run_batch, graph_s, info


# ---- the job ---------------------------------------------------------------------------------

def sample_only(args, loader, train, graph_s):
    """The sampler alone (DGL): shuffled passes over the training split
    until args.sample_only seconds have passed (whole batches), counting
    the edges of every block as gnn-sampler --bench counts a batch's
    sampled edges (every layer's). Prints one {"type": "sampler"} line."""
    if args.system != "dgl":
        die("--sample-only: DGL only (PyG's NeighborLoader always gathers the features)")
    ld = loader(train, True, feats=False)
    batches = edges = passes = 0
    first = True
    w0, c0 = time.perf_counter(), time.process_time()
    while True:
        for _, _, blocks in ld:
            if first:  # the loader's start (the shuffle, workers) stays out of the rate, as in gnn-sampler
                w0, c0 = time.perf_counter(), time.process_time()
                first = False
                continue
            batches += 1
            edges += sum(int(b.num_edges()) for b in blocks)
            if time.perf_counter() - w0 >= args.sample_only:
                break
        else:
            passes += 1
            continue
        break
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(json.dumps({"type": "sampler", "system": args.system, "fanouts": args.fanouts, "batch": args.batch,
                      "threads": torch.get_num_threads(), "workers": args.workers, "graph_s": graph_s,
                      "batches": batches, "sampled_edges": edges, "seconds": wall, "cpu_s": cpu,
                      "sampled_edges_per_s": edges / wall, "sampled_edges_per_cpu_s": edges / cpu if cpu > 0 else 0,
                      "full_passes": passes}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=["pyg", "dgl"], required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", choices=["sage", "gcn", "gat"], default="sage")
    ap.add_argument("--heads", type=int, default=4, help="GAT heads (Sluice's model.heads; the last layer averages as many)")
    ap.add_argument("--fanouts", default="10,5", help="first = the targets' neighbours (PyG's order)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--features", choices=["mem", "mmap"], default="mem")
    ap.add_argument("--madvise", choices=["normal", "random"], default="normal",
                    help="mapped features: madvise(MADV_RANDOM) (no readahead) or the kernel's default")
    ap.add_argument("--eval-last", action="store_true", help="validate only after the last epoch")
    ap.add_argument("--trim", choices=["auto", "yes", "no"], default="auto",
                    help="PyG trim_to_layer (auto: SAGE yes, GCN no)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (PyG; the batches are moved to it)")
    ap.add_argument("--sample-only", type=float, default=0, metavar="S",
                    help="DGL: no training; sample shuffled passes over the training split for S seconds "
                         "(no features gathered) and print the sampled edges per second")
    args = ap.parse_args()
    args.fanouts = [int(v) for v in args.fanouts.split(",")]
    args.layers = len(args.fanouts)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    import_s = time.perf_counter() - T_START

    t0 = time.perf_counter()
    ds = Dataset(args.dataset, args.features, args.madvise)
    x = ds.features()
    y = ds.labels()
    splits = {s: ds.split(s) for s in ("train", "val", "test")}
    feat_s = time.perf_counter() - t0
    setup = pyg_setup if args.system == "pyg" else dgl_setup
    Net, loader, run_batch, graph_s, info = setup(ds, args, x, y)
    if args.sample_only > 0:
        sample_only(args, loader, splits["train"], graph_s)
        return
    t1 = time.perf_counter()
    train_loader = loader(splits["train"], True)
    val_loader = loader(splits["val"], False)
    test_loader = loader(splits["test"], False)
    dev = torch.device(args.device)
    model = Net().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    setup_s = time.perf_counter() - t1
    info.update({"torch": torch.__version__, "numpy": np.__version__, "threads": torch.get_num_threads(),
                 "python": sys.version.split()[0]})
    print(json.dumps({"type": "load", "import_s": import_s, "features_s": feat_s, "graph_s": graph_s,
                      "loader_s": setup_s, "since_start_s": time.perf_counter() - T_START,
                      "features": args.features, "madvise": args.madvise, "info": info}), flush=True)

    def evaluate(ld):
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for b in ld:
                out, lab = run_batch(model, b)
                keep = lab >= 0
                correct += int((out.argmax(dim=1)[keep] == lab[keep]).sum())
                total += int(keep.sum())
        return correct / total if total else float("nan")

    val_acc = float("nan")
    for ep in range(args.epochs):
        t_ep = time.perf_counter()
        model.train()
        loss_sum = 0.0
        n_lab = n_ok = steps = 0
        for b in train_loader:
            out, lab = run_batch(model, b)
            keep = lab >= 0
            loss = F.cross_entropy(out[keep], lab[keep])
            opt.zero_grad()
            loss.backward()
            opt.step()
            k = int(keep.sum())
            loss_sum += float(loss) * k
            n_lab += k
            n_ok += int((out.argmax(dim=1)[keep] == lab[keep]).sum())
            steps += 1
        train_s = time.perf_counter() - t_ep
        last = ep == args.epochs - 1
        if not args.eval_last or last:
            val_acc = evaluate(val_loader)
        rec = {"type": "epoch", "epoch": ep + 1, "steps": steps, "loss": loss_sum / max(n_lab, 1),
               "train_acc": n_ok / max(n_lab, 1), "val_acc": val_acc, "train_s": train_s}
        if last:
            rec["test_acc"] = evaluate(test_loader)
        rec["seconds"] = time.perf_counter() - t_ep
        rec["eval_s"] = rec["seconds"] - train_s
        rec["rss_peak_bytes"] = rss_peak_bytes()
        print(json.dumps(rec), flush=True)
        if last:
            test_acc = rec["test_acc"]
    print(json.dumps({"type": "final", "test_acc": test_acc, "val_acc": val_acc,
                      "whole_s": time.perf_counter() - T_START, "rss_peak_bytes": rss_peak_bytes(),
                      "children_rss_peak_bytes": children_peak_bytes()}), flush=True)


if __name__ == "__main__":
    main()
