#!/usr/bin/python3
"""CPU anchor: time Debian's Faiss (python3-faiss) on the same data as simil.

Usage: /usr/bin/python3 bench/faiss_anchor.py --base B --queries Q --index DESC
           [-k K] [--nprobe N] [--threads T] [--gt GT.ivecs] [--repeat R]
Reads .fvecs, .npy and MNIST idx(.gz) files.  Prints one JSON object with the
index, train+add seconds, the median search seconds over R runs (after one
warm-up), QPS, and 1-recall@1, 1-recall@k and recall k@k against --gt when given.
"""
import argparse
import gzip
import json
import statistics
import time

import faiss
import numpy as np


def read_matrix(path):
    if path.endswith(".npy"):
        return np.load(path).astype("float32")
    if path.endswith(".fvecs") or path.endswith(".ivecs"):
        raw = np.fromfile(path, dtype="int32")
        dim = raw[0]
        rows = raw.reshape(-1, dim + 1)[:, 1:]
        return rows.view("float32") if path.endswith(".fvecs") else rows
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(
        dims[0], -1).astype("float32")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--nprobe", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--gt")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    if a.threads:
        faiss.omp_set_num_threads(a.threads)
    xb, xq = read_matrix(a.base), read_matrix(a.queries)
    t0 = time.perf_counter()
    index = faiss.index_factory(xb.shape[1], a.index)
    index.train(xb)
    index.add(xb)
    build = time.perf_counter() - t0
    if a.nprobe:
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", a.nprobe)
    index.search(xq, a.k)
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        _, labels = index.search(xq, a.k)
        times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)
    out = {"library": "faiss " + faiss.__version__, "index": a.index, "k": a.k,
           "nprobe": a.nprobe, "build_seconds": build, "seconds": seconds,
           "qps": len(xq) / seconds}
    if a.gt:
        gt = read_matrix(a.gt)
        # the names and id-based definitions of "simil search --json" without --data
        out["one_recall_at_1"] = float(np.mean(gt[:, 0] == labels[:, 0]))
        out["one_recall_at_k"] = float(np.mean([gt[i, 0] in labels[i] for i in range(len(xq))]))
        kk = min(a.k, gt.shape[1])
        out["recall_k_at_k"] = float(np.mean(
            [len(set(gt[i, :kk]) & set(labels[i, :kk])) / kk for i in range(len(xq))]))
        out["recall_by"] = "id"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
