#!/usr/bin/env python3
"""kge_pyg.py - PyTorch Geometric's KGE models (torch_geometric.nn.kge
DistMult and ComplEx) trained on a Sluice link-prediction dataset
(docs/format.md, "Link-prediction datasets") as PyG's own example trains
them: model.loader (shuffled batches), model.loss (one random negative per
positive, heads corrupted in the first half of a batch, tails in the
second; DistMult's margin ranking loss, ComplEx's binary cross-entropy),
torch.optim.Adagrad. The evaluation is the one kge-bench prints (rank =
1 + candidates scoring higher + half those scoring the same, raw or
filtered by every split's triples, tails only), computed here in torch
from PyG's embeddings, so that the two systems are measured by one rule.

    python bench/kge_pyg.py DATASET --model distmult|complex --dim D --lr LR
                            --batch B --epochs E --seed S [--eval raw|filtered]

D is kge-bench's --dim: the floats of one embedding; PyG's ComplEx gets
hidden_channels = D / 2 (its real and imaginary tables), DistMult D.
Prints epoch lines and, last, the line kge-bench prints:
    test_mrr=... test_hits@1=... test_hits@3=... test_hits@10=... test_mean_rank=... epochs=... seconds=...
"""
import argparse
import os
import sys
import time
import tomllib

import numpy as np
import torch
from torch_geometric.nn.kge import ComplEx, DistMult


def load(path):
    with open(os.path.join(path, "dataset.toml"), "rb") as f:
        meta = tomllib.load(f)
    if meta.get("format") != "sluice-link-dataset":
        sys.exit(f"{path}: not a Sluice link-prediction dataset")
    splits = {}
    for s in ("train", "valid", "test"):
        t = meta[s]
        a = np.fromfile(os.path.join(path, t["file"]), dtype=np.uint32 if t["dtype"] == "u32" else np.uint64)
        splits[s] = torch.from_numpy(a.reshape(-1, 3).astype(np.int64))
    return meta["nodes"], meta["relations"], splits


def embeddings(model, kind):
    """Node and relation tables in kge-bench's layout ([real | imaginary])."""
    if kind == "distmult":
        return model.node_emb.weight, model.rel_emb.weight
    return (torch.cat([model.node_emb.weight, model.node_emb_im.weight], 1),
            torch.cat([model.rel_emb.weight, model.rel_emb_im.weight], 1))


@torch.no_grad()
def evaluate(model, kind, triples, known, nodes, block=256):
    node, rel = embeddings(model, kind)
    k = node.shape[1] // 2
    rr, hits1, hits3, hits10, mr = [], 0, 0, 0, 0.0
    for i in range(0, triples.shape[0], block):
        x = triples[i:i + block]
        h, r, t = node[x[:, 0]], rel[x[:, 1]], x[:, 2]
        if kind == "distmult":
            q = h * r
        else:
            q = torch.cat([h[:, :k] * r[:, :k] - h[:, k:] * r[:, k:], h[:, :k] * r[:, k:] + h[:, k:] * r[:, :k]], 1)
        scores = q @ node.T
        st = (q * node[t]).sum(1, keepdim=True)
        higher = (scores > st).float()
        same = (scores == st).float()
        same[torch.arange(x.shape[0]), t] = 0
        higher[torch.arange(x.shape[0]), t] = 0
        if known is not None:
            for j in range(x.shape[0]):
                others = known.get((int(x[j, 0]), int(x[j, 1])), ())
                for v in others:
                    if v != int(t[j]):
                        higher[j, v] = 0
                        same[j, v] = 0
        rank = 1 + higher.sum(1) + 0.5 * same.sum(1)
        rr.append(1.0 / rank)
        hits1 += int((rank <= 1).sum())
        hits3 += int((rank <= 3).sum())
        hits10 += int((rank <= 10).sum())
        mr += float(rank.sum())
    n = triples.shape[0]
    if n == 0:  # an empty split: no rank to average
        return float("nan"), float("nan"), float("nan"), float("nan"), float("nan")
    return float(torch.cat(rr).sum()) / n, hits1 / n, hits3 / n, hits10 / n, mr / n


def fmt(split, m):
    return (f"{split}_mrr={m[0]:.6f} {split}_hits@1={m[1]:.6f} {split}_hits@3={m[2]:.6f} "
            f"{split}_hits@10={m[3]:.6f} {split}_mean_rank={m[4]:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--model", choices=["distmult", "complex"], default="distmult")
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval", choices=["raw", "filtered"], default="filtered")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    nodes, rels, sp = load(a.dataset)
    if a.model == "complex":
        if a.dim % 2:
            sys.exit("--dim must be even for complex")
        model = ComplEx(nodes, rels, a.dim // 2)
    else:
        model = DistMult(nodes, rels, a.dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=a.lr)
    tr = sp["train"]
    loader = model.loader(head_index=tr[:, 0], rel_type=tr[:, 1], tail_index=tr[:, 2], batch_size=a.batch,
                          shuffle=True)
    known = None
    if a.eval == "filtered":
        known = {}
        for s in ("train", "valid", "test"):
            for h, r, t in sp[s].tolist():
                known.setdefault((h, r), []).append(t)
    print(f"kge_pyg: {a.dataset}: {nodes} nodes, {rels} relations, {tr.shape[0]} training triples; {a.model}, "
          f"dim {a.dim}, torch {torch.__version__}", flush=True)
    t0 = time.time()
    train_s = 0.0
    for ep in range(a.epochs):
        t1 = time.time()
        total, batches = 0.0, 0
        for h, r, t in loader:
            opt.zero_grad()
            loss = model.loss(h, r, t)
            loss.backward()
            opt.step()
            total += float(loss)
            batches += 1
        s = time.time() - t1
        train_s += s
        line = f"epoch {ep + 1}/{a.epochs} loss={total / batches:.6f} seconds={s:.3f} edges_per_s={tr.shape[0] / s:.0f}"
        if sp["valid"].shape[0]:
            line += " " + fmt("valid", evaluate(model, a.model, sp["valid"], known, nodes))
        print(line, flush=True)
    m = evaluate(model, a.model, sp["test"], known, nodes)
    print(f"{fmt('test', m)} epochs={a.epochs} seconds={time.time() - t0:.3f} train_seconds={train_s:.3f}", flush=True)


if __name__ == "__main__":
    main()
