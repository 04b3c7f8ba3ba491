"""Reference implementations the tests compare simil against, in numpy float64."""
import numpy as np

import simil

# Every test that takes a device runs on the CPU, and on GPU 0 where there is one.
DEVICES = ["cpu"] + (["gpu"] if simil.gpu_count() > 0 else [])


def normalized(x):
    """Rows scaled to unit L2 norm; zero rows stay zero (as simil does for cosine)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def distances(xq, xb, metric):
    """nq x nb float64 distances (l2, squared) or similarities (ip, cosine)."""
    xq = np.asarray(xq, dtype=np.float64)
    xb = np.asarray(xb, dtype=np.float64)
    if metric == "cosine":
        xq, xb = normalized(xq), normalized(xb)
    if metric == "l2":
        return ((xq[:, None, :] - xb[None, :, :]) ** 2).sum(axis=2)
    return xq @ xb.T


def assert_knn(D, I, ref, ids, k, metric, context):
    """Check simil's (D, I) against the reference distances ref (nq x nb) of the
    vectors with these ids: the k best distances agree within 1e-4 (relative to
    the distances' scale), each returned distance is the true distance of its
    id, ids equal the reference's except between near-ties, and the slots
    beyond nb are empty."""
    nq, nb = ref.shape
    assert D.shape == (nq, k) and I.shape == (nq, k), context
    assert D.dtype == np.float32 and I.dtype == np.int64, context
    sign = 1.0 if metric == "l2" else -1.0
    kk = min(k, nb)
    order = np.lexsort((np.broadcast_to(ids, ref.shape), sign * ref), axis=1)[:, :kk]
    ref_sorted = np.take_along_axis(ref, order, axis=1)
    tol = 1e-4 * max(np.abs(ref).max(), 1e-30)
    np.testing.assert_allclose(D[:, :kk], ref_sorted, rtol=1e-4, atol=tol,
                               err_msg=f"k best distances, {context}")
    column = {int(v): c for c, v in enumerate(ids)}
    assert len(column) == nb, "helpers.assert_knn needs distinct ids"
    unknown = [int(v) for v in I[:, :kk].ravel() if int(v) not in column]
    assert not unknown, f"ids not in the index: {unknown[:10]}, {context}"
    cols = np.vectorize(column.__getitem__, otypes=[np.int64])(I[:, :kk])
    true_d = np.take_along_axis(ref, cols, axis=1)
    np.testing.assert_allclose(D[:, :kk], true_d, rtol=1e-4, atol=tol,
                               err_msg=f"returned distance vs the id's true distance, {context}")
    for row in I[:, :kk]:
        assert len(set(row.tolist())) == kk, f"an id twice in one row {row}, {context}"
    differ = I[:, :kk] != ids[order]
    near_tie = np.abs(true_d - ref_sorted) <= tol
    assert np.all(~differ | near_tie), (
        f"{int((differ & ~near_tie).sum())} ids differ from the reference beyond ties, {context}")
    if k > nb:
        empty = np.inf if metric == "l2" else -np.inf
        assert np.all(I[:, nb:] == -1), context
        assert np.all(D[:, nb:] == empty), context


# ---- the generators of docs/datasets.md, in numpy uint64 / float32 ----

M64 = np.uint64


def sm64(x):
    x = np.asarray(x, dtype=M64)
    with np.errstate(over="ignore"):
        x = x + M64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> M64(30))) * M64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> M64(27))) * M64(0x94D049BB133111EB)
    return x ^ (x >> M64(31))


def u01(h):
    # (float)((h >> 40) + 0.5) / 16777216.0f: the sum is a double, rounded to float.
    return ((h >> M64(40)).astype(np.float64) + 0.5).astype(np.float32) / np.float32(16777216.0)


def gauss(s):
    s = np.asarray(s, dtype=M64)
    a = u01(sm64(s))
    b = u01(sm64(s ^ M64(0x5555555555555555)))
    return (np.sqrt(np.float32(-2.0) * np.log(a)) * np.cos(np.float32(6.2831853) * b)).astype(
        np.float32)


def row_col(first, n, dim):
    i = np.arange(first, first + n, dtype=M64)[:, None]
    j = np.arange(dim, dtype=M64)[None, :]
    return i, j


def uniform(n, dim, seed, first=0):
    i, j = row_col(first, n, dim)
    with np.errstate(over="ignore"):
        return u01(sm64(M64(seed) * M64(0x100000001B3) + i * M64(dim) + j))


def mix(n, dim, seed, first=0):
    i, j = row_col(first, n, dim)
    with np.errstate(over="ignore"):
        c = sm64(M64(seed) ^ (i * M64(0x632BE59BD9B4E019))) % M64(1024)
        center = gauss(M64(0xABCDEF) + c * M64(dim) + j)
        noise = gauss(M64(seed) * M64(0x100000001B3) + i * M64(dim) + j + M64(7))
    return (center + np.float32(0.5) * noise).astype(np.float32)
