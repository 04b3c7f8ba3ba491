#!/usr/bin/python3
"""CPU anchor for filtered search: Faiss with an IDSelectorBitmap, the shapes
of `bench_range filter cpu N NQ K DESC [nprobe=P]`.

Usage: python3 bench/faiss_filter.py [--n N] [--nq NQ] [-k K] [--nprobe P]
           [--threads T] DESC [DESC ...]
Uniform random vectors of 128 dimensions (numpy's, seed 1: the same shapes as
bench_range's, not the same numbers; exhaustive and IVF-Flat times do not depend
on the values), L2.  IVF indexes train on the first 50,000.  For each index: the
median of 3 unfiltered searches (201 below 100 queries) after a warm-up, then
with a random 1%, 10% and 50% of the ids allowed (IDSelectorBitmap), QPS and
the unfiltered time over the filtered one.  Needs faiss-cpu (PyPI) or Debian's
python3-faiss (1.7.3, which has SearchParameters too).
"""
import argparse
import time

import faiss
import numpy as np


def median_seconds(search, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        search()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("descs", nargs="+", metavar="DESC")
    p.add_argument("--n", type=int, default=200000)
    p.add_argument("--nq", type=int, default=100)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--nprobe", type=int, default=16)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads > 0:
        faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(1)
    x = rng.random((args.n, 128), dtype=np.float32)
    q = rng.random((args.nq, 128), dtype=np.float32)
    reps = 3 if args.nq >= 100 else 201
    for desc in args.descs:
        index = faiss.index_factory(128, desc)
        index.train(x[:50000])
        index.add(x)
        ivf = faiss.try_extract_index_ivf(index) is not None

        def params(sel):
            if ivf:
                return faiss.SearchParametersIVF(sel=sel, nprobe=args.nprobe)
            return faiss.SearchParameters(sel=sel)

        plain = params(None)
        index.search(q, args.k, params=plain)
        tu = median_seconds(lambda: index.search(q, args.k, params=plain), reps)
        line = [f"Faiss {faiss.__version__} {desc} n={args.n} nq={args.nq}: "
                f"unfiltered {args.nq / tu:.0f} QPS"]
        for percent in (1, 10, 50):
            allowed = rng.random(args.n) < percent / 100
            bits = np.packbits(allowed, bitorder="little")
            sel = faiss.IDSelectorBitmap(args.n, faiss.swig_ptr(bits))
            filtered = params(sel)
            index.search(q, args.k, params=filtered)
            tf = median_seconds(lambda: index.search(q, args.k, params=filtered), reps)
            line.append(f"{percent}%: {args.nq / tf:.0f} QPS ({tu / tf:.2f}x)")
        print("; ".join(line), flush=True)


if __name__ == "__main__":
    main()
