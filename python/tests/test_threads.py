"""Python threads: concurrent searches agree, the GIL is released, and changes
made while others search are safe."""
import threading
import time

import numpy as np
import pytest

import simil
from helpers import DEVICES


def run_threads(count, target):
    errors = []

    def guarded(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("device", DEVICES)
def test_concurrent_searches_are_identical(device):
    seed, nb, nq, dim, k = 21, 4000, 300, 48, 10
    rng = np.random.default_rng(seed)
    xb = rng.random((nb, dim), dtype=np.float32)
    xq = rng.random((nq, dim), dtype=np.float32)
    index = simil.Index(dim, metric="l2", device=device)
    index.add(xb)
    D0, I0 = index.search(xq, k)
    barrier = threading.Barrier(4)
    results = [[] for _ in range(4)]

    def search(i):
        barrier.wait()
        for _ in range(5):
            results[i].append(index.search(xq, k))

    run_threads(4, search)
    for i, runs in enumerate(results):
        for D, I in runs:
            assert np.array_equal(I, I0), f"thread {i}, seed={seed} nb={nb} nq={nq} k={k}"
            assert np.array_equal(D, D0), f"thread {i}, seed={seed} nb={nb} nq={nq} k={k}"


def test_search_releases_the_gil():
    """While one thread is inside a long search, another Python thread runs."""
    rng = np.random.default_rng(22)
    xb = rng.random((20000, 64), dtype=np.float32)
    xq = rng.random((1500, 64), dtype=np.float32)
    index = simil.Index(64, device="cpu")
    index.add(xb)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        time.sleep(0.02)
        start = time.perf_counter()
        index.search(xq, 10, threads=1)
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    if end - start < 0.04:
        pytest.skip(f"the search took only {end - start:.3f} s: too short to tell")
    # With the GIL held for the whole call, the ticker could not run in its middle.
    middle = [t for t in ticks if start + 0.25 * (end - start) < t < end - 0.25 * (end - start)]
    assert len(middle) >= 3, f"{len(middle)} ticks during a {end - start:.3f} s search"


def test_add_and_remove_while_searching():
    seed, dim, batches, per_batch = 23, 16, 30, 200
    rng = np.random.default_rng(seed)
    x = rng.random((batches * per_batch, dim), dtype=np.float32)
    q = x[::97]
    index = simil.Index(dim, device="cpu")
    index.add(x[:per_batch])
    done = threading.Event()

    def work(i):
        if i == 0:
            for b in range(1, batches):
                index.add(x[b * per_batch:(b + 1) * per_batch])
                index.remove([b * per_batch])  # the first vector of each new batch
            done.set()
            return
        while not done.is_set():
            D, I = index.search(q, 5)
            assert ((I >= 0) & (I < batches * per_batch)).all()
            assert np.all(np.diff(D, axis=1) >= 0)

    run_threads(4, work)
    assert index.ntotal == batches * per_batch - (batches - 1)
    D, I = index.search(q, 1)
    removed = {b * per_batch for b in range(1, batches)}
    for row, qi in enumerate(range(0, batches * per_batch, 97)):
        if qi not in removed:
            assert I[row, 0] == qi, f"seed={seed} query {qi}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("description", ["Flat", "IVF16,Flat", "IVF16,PQ4", "XFBQ"])
def test_batched_searches_equal_lone_searches(device, description):
    """Python threads sending one or two queries at a time: their searches are
    combined (set_batching), and each gets the rows it gets alone."""
    seed, nb, nq, dim, k, threads = 24, 3000, 64, 16, 6, 8
    rng = np.random.default_rng(seed)
    xb = rng.random((nb, dim), dtype=np.float32)
    xq = rng.random((nq, dim), dtype=np.float32)
    index = simil.Index(dim, description, metric="l2", device=device)
    index.train(xb)
    index.add(xb)
    index.set_batching(False)
    lone = [index.search(xq[i:i + 1], k, nprobe=4) for i in range(nq)]
    D0 = np.concatenate([d for d, _ in lone])
    I0 = np.concatenate([i for _, i in lone])
    index.set_batching(True, max_wait_us=1000)
    barrier = threading.Barrier(threads)
    bad = []

    def search(t):
        barrier.wait()
        for r in range(4):
            i = t
            while i < nq:
                n = min(1 + (i + r) % 2, nq - i)
                D, I = index.search(xq[i:i + n], k, nprobe=4)
                if not (np.array_equal(D, D0[i:i + n]) and np.array_equal(I, I0[i:i + n])):
                    bad.append((t, i, n))
                i += n + threads - 1

    run_threads(threads, search)
    assert not bad, f"{description} on {device}, seed={seed}: rows differ from lone " \
                    f"searches at (thread, first query, count) {bad[:5]}"


def test_set_batching_arguments():
    index = simil.Index(8, device="cpu")
    index.set_batching(True, max_wait_us=100)
    index.set_batching(False)
    with pytest.raises(simil.InvalidArgumentError):
        index.set_batching(True, max_wait_us=-1)
    opq = simil.Index(8, "OPQ2,IVF4,PQ2", device="cpu")
    with pytest.raises(simil.UnsupportedError):
        opq.set_batching(True)
    opq.set_batching(False)
