"""Filtered search (Index.search(..., allow=)) and Index.range_search, against
numpy float64 brute force, on the CPU and (where there is one) the GPU."""
import numpy as np
import pytest

import simil
from helpers import DEVICES, assert_knn, distances


def data(n, nq, dim, seed):
    return (simil.generate("mix", n, dim, seed=seed), simil.generate("mix", nq, dim, seed=seed + 1))


def built(desc, xb, metric="l2", device="cpu", ids=None):
    index = simil.Index(xb.shape[1], desc, metric, device=device)
    index.train(xb)
    index.add(xb, ids)
    return index


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_flat_allow_ids_and_bitset(metric):
    xb, xq = data(2000, 30, 12, 3)
    index = built("Flat", xb, metric)
    rng = np.random.default_rng(1)
    mask = rng.random(2000) < 0.1
    ids = np.flatnonzero(mask)
    ref = distances(xq, xb[ids], metric)
    for allow in (ids, rng.permutation(ids), list(ids) + list(ids[:5]), mask):
        D, I = index.search(xq, 10, allow=allow)
        assert_knn(D, I, ref, ids, 10, metric, f"allow {type(allow).__name__}")
    # nothing allowed: every slot empty
    D, I = index.search(xq, 10, allow=[])
    assert np.all(I == -1)
    # into caller's arrays (out=): the same filter
    out = (np.empty((30, 10), np.float32), np.empty((30, 10), np.int64))
    assert index.search(xq, 10, out=out, allow=mask) is out
    assert_knn(out[0], out[1], ref, ids, 10, metric, "allow with out=")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("desc", ["IVF16,Flat", "IVF16,PQ6", "XFBQ", "IVF16,XFBQ"])
def test_approximate_allow(device, desc):
    """The allowed ones among what the full ranking of the scan finds."""
    xb, xq = data(3000, 10, 12, 5)
    index = built(desc, xb, device=device)
    mask = np.random.default_rng(2).random(3000) < 0.3
    params = {"nprobe": 4} if desc.startswith("IVF") else {}
    if "XFBQ" in desc:
        params["extra_distance"] = 1.0
    Dall, Iall = index.search(xq, 3000, **params)
    D, I = index.search(xq, 10, allow=mask, **params)
    for q in range(10):
        keep = [(d, i) for d, i in zip(Dall[q], Iall[q]) if i >= 0 and mask[i]][:10]
        assert [i for _, i in keep] == I[q][:len(keep)].tolist(), (desc, q)
        assert np.all(I[q][len(keep):] == -1)


def test_allow_errors():
    xb, xq = data(100, 2, 8, 7)
    index = built("Flat", xb)
    with pytest.raises(simil.InvalidArgumentError, match="bits"):
        index.search(xq, 3, allow=np.ones(99, dtype=bool))
    with pytest.raises(simil.InvalidArgumentError, match="negative"):
        index.search(xq, 3, allow=[-1, 4])
    with pytest.raises(TypeError):
        index.search(xq, 3, allow=[0.5])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_flat_range_search(device, metric):
    xb, xq = data(3000, 20, 10, 9)
    index = built("Flat", xb, metric, device)
    ref = distances(xq, xb, metric)
    # between the 300th and 301st neighbour of query 0 (several rounds of k)
    s = np.sort(ref[0]) if metric == "l2" else -np.sort(-ref[0])
    radius = float((s[299] + s[300]) / 2)
    lims, D, I = index.range_search(xq, radius)
    assert lims.dtype == np.int64 and lims.shape == (21,) and lims[0] == 0
    assert D.dtype == np.float32 and I.dtype == np.int64 and len(D) == len(I) == lims[-1]
    for q in range(20):
        inside = ref[q] < radius if metric == "l2" else ref[q] > radius
        near = np.abs(ref[q] - radius) <= 1e-4 * max(1.0, abs(radius))
        got = I[lims[q]:lims[q + 1]]
        assert len(set(got.tolist())) == len(got)
        assert set(np.flatnonzero(inside & ~near)) <= set(got.tolist()) <= set(
            np.flatnonzero(inside | near))
        np.testing.assert_allclose(D[lims[q]:lims[q + 1]], ref[q][got], rtol=1e-4, atol=1e-4)
    if device != "cpu":
        return  # filters are CPU only for now
    # with allowed ids: the allowed ones of the same
    mask = np.random.default_rng(3).random(3000) < 0.5
    lims2, D2, I2 = index.range_search(xq, radius, allow=mask)
    for q in range(20):
        want = [i for i in I[lims[q]:lims[q + 1]] if mask[i]]
        assert sorted(I2[lims2[q]:lims2[q + 1]].tolist()) == sorted(want)


def test_range_search_errors():
    xb, xq = data(100, 2, 8, 11)
    index = built("Flat", xb)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(simil.InvalidArgumentError, match="radius"):
            index.range_search(xq, bad)
    with pytest.raises(TypeError):
        index.range_search(xq, "1")
    lims, D, I = index.range_search(xq, 0.0)
    assert lims.tolist() == [0, 0, 0] and len(D) == 0 and len(I) == 0
