#!/usr/bin/env python3
"""Rebuild a Sluice model in PyTorch Geometric from a checkpoint and run it
on the whole graph of a Sluice dataset (docs/checkpoints.md, "In PyTorch
Geometric").

    python scripts/pyg_from_checkpoint.py DATASET CHECKPOINT [--compare PREDICT_DIR] [--tol 1e-4]

Prints the accuracy of each split. With --compare, the logits are compared
with those of `gnnlaunch --predict ... --set model.fanouts=[-1,...]` in
PREDICT_DIR (every neighbour: the same full-graph computation), and the
script exits 1 when they differ by more than --tol, or when a prediction
differs. Needs torch, torch_geometric and numpy (no safetensors package:
the file is read here).
"""
import argparse
import json
import struct
import sys

import numpy as np
import torch
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_checkpoint(path):
    """{name: np.ndarray}, {metadata}: safetensors is an 8-byte header length, a JSON header, the data."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        tensors[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return tensors, meta


def read_toml_sections(path):
    """dataset.toml's [section] key = value pairs (the few value kinds it uses)."""
    out, sec = {}, None
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            sec = out.setdefault(line[1:-1], {})
        elif "=" in line:
            k, v = (s.strip() for s in line.split("=", 1))
            (sec if sec is not None else out)[k] = json.loads(v) if v[0] in '"[' else (
                float(v) if "." in v or "e" in v else int(v))
    return out


def load_dataset(d):
    meta = read_toml_sections(f"{d}/dataset.toml")

    def arr(key):
        s = meta[key]
        dt = {"u32": np.uint32, "u64": np.uint64, "i32": np.int32, "i64": np.int64,
              "f32": np.float32, "f16": np.float16}[s["dtype"]]
        return np.fromfile(f"{d}/{s['file']}", dtype=dt), s

    indptr, _ = arr("indptr")
    indices, _ = arr("indices")
    fs = meta["features"]
    dt = {"f32": np.float32, "f16": np.float16}[fs["dtype"]]
    rows, cols = fs["shape"]
    stride = fs.get("row_stride", cols * np.dtype(dt).itemsize)
    raw = np.memmap(f"{d}/{fs['file']}", dtype=np.uint8, mode="r")
    x = np.ndarray((rows, cols), dtype=dt, buffer=raw, strides=(stride, np.dtype(dt).itemsize))
    labels, _ = arr("labels")
    splits = {}
    for k in ("train", "val", "test"):
        if k in meta:
            splits[k], _ = arr(k)
    # CSC: the in-neighbours of v are indices[indptr[v]:indptr[v+1]], so the
    # edges run indices[e] -> v; PyG's edge_index is [sources, targets]
    deg = np.diff(indptr.astype(np.int64))
    dst = np.repeat(np.arange(rows, dtype=np.int64), deg)
    edge_index = torch.from_numpy(np.stack([indices.astype(np.int64), dst]))
    return torch.from_numpy(np.array(x, dtype=np.float32)), edge_index, labels, splits


def build(tensors, meta):
    """The PyG layers of the checkpoint's model, weights copied in."""
    kind, L = meta["model.kind"], int(meta["model.layers"])
    heads, out_heads = int(meta["model.heads"]), int(meta["model.out_heads"]) or int(meta["model.heads"])
    layers = []
    for i in range(L):
        t = {k.split(".", 2)[2]: torch.from_numpy(v.copy()) for k, v in tensors.items()
             if k.startswith(f"layers.{i}.")}
        last = i == L - 1
        if kind == "sage":
            out_dim, in_dim = t["w_self"].shape
            conv = SAGEConv(in_dim, out_dim, aggr=meta["model.aggr"], root_weight=True)
            conv.lin_l.weight.data.copy_(t["w_neigh"])   # neighbours, with the bias
            conv.lin_l.bias.data.copy_(t["bias"])
            conv.lin_r.weight.data.copy_(t["w_self"])    # the node itself
        elif kind == "gcn":
            if meta["model.gcn_norm"] != "graph":
                print("note: model.gcn_norm = block normalised by sampled-block degrees; GCNConv uses the graph's",
                      file=sys.stderr)
            out_dim, in_dim = t["weight"].shape
            conv = GCNConv(in_dim, out_dim)
            conv.lin.weight.data.copy_(t["weight"])
            conv.bias.data.copy_(t["bias"])
        elif kind == "gat":
            h = out_heads if last else heads
            hd = t["attn_src"].shape[1]
            in_dim = t["weight"].shape[1]
            conv = GATConv(in_dim, hd, heads=h, concat=not last, add_self_loops=True)
            conv.lin.weight.data.copy_(t["weight"])
            conv.att_src.data.copy_(t["attn_src"].reshape(1, h, hd))
            conv.att_dst.data.copy_(t["attn_dst"].reshape(1, h, hd))
            # Sluice adds each head's bias before the mean of the last layer's heads
            conv.bias.data.copy_(t["bias"] if not last else t["bias"].reshape(h, hd).mean(0))
        else:
            raise SystemExit(f"model.kind = {kind}: no graph layers to rebuild (mlp is a plain Linear)")
        layers.append(conv)
    act = torch.nn.functional.elu if meta["model.activation"] == "elu" else torch.relu
    return layers, act


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("checkpoint")
    ap.add_argument("--compare", help="a gnnlaunch --predict output directory (every neighbour)")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    tensors, meta = read_checkpoint(a.checkpoint)
    if meta.get("format") != "sluice-checkpoint":
        raise SystemExit(f"{a.checkpoint}: not a Sluice checkpoint")
    x, edge_index, labels, splits = load_dataset(a.dataset)
    layers, act = build(tensors, meta)
    with torch.no_grad():
        h = x
        for i, conv in enumerate(layers):
            h = conv(h, edge_index)
            if i < len(layers) - 1:
                h = act(h)
    logits = h.numpy()
    pred = logits.argmax(1)
    for k, ids in splits.items():
        ids = ids.astype(np.int64)
        lab = labels[ids]
        keep = lab >= 0
        print(f"{k}_acc={(pred[ids][keep] == lab[keep]).mean():.4f}", end=" ")
    print(f"nodes={len(pred)} model={meta['model.kind']} layers={meta['model.layers']}")
    if a.compare:
        nodes = np.load(f"{a.compare}/nodes.npy")
        theirs = np.load(f"{a.compare}/logits.npy")
        diff = np.abs(logits[nodes] - theirs).max()
        same_pred = (pred[nodes] == np.load(f"{a.compare}/pred.npy")).mean()
        print(f"compare: max |logit difference| = {diff:.3g} (tolerance {a.tol}); predictions equal on "
              f"{same_pred:.4f} of the nodes")
        if not diff <= a.tol:
            sys.exit(1)


if __name__ == "__main__":
    main()
