#!/usr/bin/python3
"""Latency of exact k-NN with PyTorch (q @ xb.T, then topk) per batch size,
on the vectors bench_latency writes (--write-fvecs DIR), for the same run.

Usage on the GPU machine:
    python3 bench/torch_latency.py DIR [--k 10] [--metric ip|l2]
        [--batch 1,4,16,64,256,1024,10000] [--reps 200] [--csv FILE]

DIR holds base.fvecs and queries.fvecs (for cosine, bench_latency writes them
normalized, and the metric here is ip).  For fp16 and fp32, each call takes B
queries as a numpy array on the host and returns distances and ids on the
host: the same work a simil call does.  Calls are timed one by one on the host
clock after a warm-up; the number of calls per batch size is min(reps,
max(3, 20000 / B)).  Batches whose score matrix would pass 2 GiB are cut into
tiles of queries.  Prints p50 and p99 per batch size, and appends rows to the
CSV of bench_latency (system torch-fp16 / torch-fp32).
"""
import argparse
import math
import os
import time

import numpy as np
import torch

torch.backends.cuda.matmul.allow_tf32 = False


def read_fvecs(path):
    raw = np.fromfile(path, dtype=np.int32)
    dim = int(raw[0])
    return raw.reshape(-1, dim + 1)[:, 1:].view(np.float32)


def percentile(sorted_ms, p):
    i = max(0, min(len(sorted_ms) - 1, math.ceil(p / 100 * len(sorted_ms)) - 1))
    return sorted_ms[i]


def search(xb, norms, q_host, k, metric, dtype):
    """One call: host queries in, host distances and ids out."""
    q = torch.from_numpy(q_host).cuda().to(dtype)
    nb = xb.shape[0]
    tile = max(1, min(q.shape[0], (2 << 30) // (xb.element_size() * nb)))
    values, ids = [], []
    for i in range(0, q.shape[0], tile):
        s = q[i:i + tile] @ xb.T
        if metric == "l2":
            d = norms[None, :] - 2 * s
            v, ix = torch.topk(d, k, dim=1, largest=False)
            v = v + (q[i:i + tile].float() ** 2).sum(1, keepdim=True)
        else:
            v, ix = torch.topk(s, k, dim=1, largest=True)
        values.append(v)
        ids.append(ix)
    return torch.cat(values).float().cpu().numpy(), torch.cat(ids).cpu().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--metric", default="ip", choices=["ip", "l2"])
    ap.add_argument("--batch", default="1,4,16,64,256,1024,10000")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--csv")
    a = ap.parse_args()
    base = read_fvecs(os.path.join(a.dir, "base.fvecs"))
    queries = np.ascontiguousarray(read_fvecs(os.path.join(a.dir, "queries.fvecs")))
    device = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__} on {device}: base {base.shape}, queries {queries.shape}")
    csv = None
    if a.csv:
        fresh = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
        csv = open(a.csv, "a")
        if fresh:
            csv.write("system,device,index,params,k,batch,threads,mode,calls,p50_ms,p99_ms,qps\n")
    for dtype, name in ((torch.float16, "torch-fp16"), (torch.float32, "torch-fp32")):
        xb = torch.from_numpy(base).cuda().to(dtype)
        norms = (xb.float() ** 2).sum(1) if a.metric == "l2" else None
        for b in (int(x) for x in a.batch.split(",")):
            reps = min(a.reps, max(3, 20000 // b))
            nq = queries.shape[0]
            batches = [np.take(queries, np.arange(r * b, r * b + b) % nq, axis=0)
                       for r in range(reps)]
            for w in range(2):
                search(xb, norms, batches[w % reps], a.k, a.metric, dtype)
            ms = []
            for r in range(reps):
                t0 = time.perf_counter()
                search(xb, norms, batches[r], a.k, a.metric, dtype)
                ms.append(1e3 * (time.perf_counter() - t0))
            ms.sort()
            p50, p99 = percentile(ms, 50), percentile(ms, 99)
            print(f"  {name:10s} batch {b:6d}: p50 {p50:9.3f} ms  p99 {p99:9.3f} ms  "
                  f"{b / p50 * 1e3:11.0f} QPS  ({reps} calls)")
            if csv:
                csv.write(f'{name},"{device}","Flat",,{a.k},{b},1,call,{reps},'
                          f"{p50:.4f},{p99:.4f},{b / p50 * 1e3:.1f}\n")
                csv.flush()
        del xb, norms
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
