#!/usr/bin/env python3
"""bench/cora_pyg.py - the PyTorch Geometric side of bench/cora.sh.

Reads Cora from the project's own arrays (datasets/cora/*.npy.gz), makes
the graph the way `gnnprep import --undirected --dedupe --drop-self-loops`
does, and trains PyG's three example models on the full graph, one seed
at a time, printing one line per run:

    MODEL WEIGHT_DECAY SEED TEST_ACC

The models are those of issue 26 (and of PyG's examples): dropout on the
input, a first convolution, an activation, dropout, a second
convolution; Adam with the given weight decay; cross-entropy on the 140
training nodes; 200 epochs; test accuracy after the last epoch.

  gcn   GCNConv(F, 16), ReLU, GCNConv(16, C); dropout 0.5, lr 0.01
  sage  SAGEConv(F, 16) (mean), ReLU, SAGEConv(16, C); dropout 0.5, lr 0.01
  gat   GATConv(F, 8, heads=8, dropout=0.6), ELU,
        GATConv(64, C, heads=1, dropout=0.6); dropout 0.6, lr 0.005

usage: cora_pyg.py DATASET_DIR --models gcn,sage,gat --decays 5e-4,0 --seeds 0-9
"""
import argparse
import gzip
import io
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv, SAGEConv


def load(path, name):
    with gzip.open(os.path.join(path, name + ".npy.gz"), "rb") as f:
        return np.load(io.BytesIO(f.read()))


def cora(path):
    x = torch.from_numpy(load(path, "features")).float()
    y = torch.from_numpy(load(path, "labels")).long()
    e = load(path, "edges").astype(np.int64)
    src, dst = np.concatenate([e[0], e[1]]), np.concatenate([e[1], e[0]])  # both directions
    keep = src != dst  # no self loops
    pairs = np.unique(np.stack([src[keep], dst[keep]]), axis=1)  # no duplicates
    edge_index = torch.from_numpy(pairs)
    split = {s: torch.from_numpy(load(path, s)).long() for s in ("train", "val", "test")}
    return x, y, edge_index, split


class Net(torch.nn.Module):
    def __init__(self, kind, fin, classes):
        super().__init__()
        self.kind = kind
        if kind == "gcn":
            self.c1, self.c2, self.p = GCNConv(fin, 16), GCNConv(16, classes), 0.5
        elif kind == "sage":
            self.c1, self.c2, self.p = SAGEConv(fin, 16), SAGEConv(16, classes), 0.5
        elif kind == "gat":
            self.c1 = GATConv(fin, 8, heads=8, dropout=0.6)
            self.c2 = GATConv(64, classes, heads=1, dropout=0.6)
            self.p = 0.6
        else:
            raise ValueError(kind)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.p, training=self.training)
        x = self.c1(x, edge_index)
        x = F.elu(x) if self.kind == "gat" else F.relu(x)
        x = F.dropout(x, p=self.p, training=self.training)
        return self.c2(x, edge_index)


def run(kind, wd, seed, data):
    x, y, ei, split = data
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = Net(kind, x.shape[1], int(y.max()) + 1)
    lr = 0.005 if kind == "gat" else 0.01
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    for _ in range(200):
        model.train()
        opt.zero_grad()
        out = model(x, ei)
        F.cross_entropy(out[split["train"]], y[split["train"]]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(x, ei).argmax(dim=1)
    t = split["test"]
    return float((pred[t] == y[t]).float().mean())


def seeds(spec):
    if "-" in spec:
        a, b = spec.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in spec.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="datasets/cora: the gzipped arrays")
    ap.add_argument("--models", default="gcn,sage,gat")
    ap.add_argument("--decays", default="5e-4,0")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    data = cora(a.dataset)
    print(f"# torch {torch.__version__}, torch_geometric {__import__('torch_geometric').__version__}, "
          f"{data[2].shape[1]} edges", flush=True)
    for kind in a.models.split(","):
        for wd in a.decays.split(","):
            for s in seeds(a.seeds):
                print(f"{kind} {wd} {s} {run(kind, float(wd), s, data):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
