"""simil.load of Faiss index files: the same neighbours as Faiss's own search.

Faiss writes the files here (Debian's python3-faiss); the tests skip where
faiss does not import.  Flat and IVF-Flat: ids equal except at ties, distances
within 1e-4 of the row's scale; IVF-PQ: distances within 1e-3, ids equal except
at ties within that.  Types simil does not read raise UnsupportedError naming
the Faiss type code; damaged files raise CorruptFileError.
"""
import numpy as np
import pytest

import simil
from helpers import DEVICES

faiss = pytest.importorskip("faiss")

K, NPROBE = 10, 4


def clustered(seed, n, d, centers=20):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centers, d)).astype(np.float32) * 3
    return (c[rng.integers(0, centers, n)] + rng.standard_normal((n, d))).astype(np.float32)


def assert_same(D, I, Dref, Iref, tol, context):
    """Distances within tol x the row's largest |distance|; ids equal except
    where the reference has a near tie at that rank (or at the last rank)."""
    assert D.shape == Dref.shape and I.shape == Iref.shape, context
    for q in range(D.shape[0]):
        valid = Iref[q] >= 0
        assert np.array_equal(I[q][~valid], Iref[q][~valid]), context
        scale = max(np.abs(Dref[q][valid]).max(initial=0.0), 1e-6)
        np.testing.assert_allclose(D[q][valid], Dref[q][valid], rtol=0, atol=tol * scale,
                                   err_msg=f"{context} query {q}")
        for r in np.nonzero(valid & (I[q] != Iref[q]))[0]:
            near = [abs(Dref[q][r] - Dref[q][s]) <= tol * scale
                    for s in (r - 1, r + 1) if 0 <= s < K]
            assert r == K - 1 or any(near), f"{context} query {q} rank {r}: {I[q]} vs {Iref[q]}"


def faiss_search(index, xq):
    try:
        faiss.extract_index_ivf(index).nprobe = NPROBE
    except (RuntimeError, AttributeError):
        pass
    return index.search(xq, K)


def ivf(d, nlist, metric, encoding, xt):
    quantizer = faiss.IndexFlatIP(d) if metric == faiss.METRIC_INNER_PRODUCT else faiss.IndexFlatL2(d)
    if encoding == "flat":
        index = faiss.IndexIVFFlat(quantizer, d, nlist, metric)
    else:
        index = faiss.IndexIVFPQ(quantizer, d, nlist, 8, 8, metric)
    index.train(xt)
    index.referenced_objects = [quantizer]
    return index


def build(kind, metric, xb):
    d = xb.shape[1]
    fm = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    if kind == "flat":
        index = faiss.IndexFlatL2(d) if metric == "l2" else faiss.IndexFlatIP(d)
        index.add(xb)
    elif kind == "idmap_flat":
        index = faiss.IndexIDMap2(faiss.IndexFlatL2(d) if metric == "l2" else faiss.IndexFlatIP(d))
        index.add_with_ids(xb, np.arange(len(xb), dtype=np.int64)[::-1] * 3 + 17)
    elif kind == "ivf_flat":
        index = ivf(d, 16, fm, "flat", xb)
        index.add_with_ids(xb, np.arange(len(xb), dtype=np.int64) * 5 + 2)
    else:
        index = ivf(d, 16, fm, "pq", xb)
        index.add(xb)
    return index


CASES = [  # kind, simil description, tolerance
    ("flat", "Flat", 1e-4),
    ("idmap_flat", "Flat", 1e-4),
    ("ivf_flat", "IVF16,Flat", 1e-4),
    ("ivf_pq", "IVF16,PQ8x8", 1e-3),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("kind,description,tol", CASES)
def test_load_faiss_file(tmp_path, device, metric, kind, description, tol):
    seed, n, nq, d = 11, 3000, 30, 32
    xb = clustered(seed, n, d)
    xq = clustered(seed + 1, nq, d) + 0.1 * np.random.default_rng(seed + 2).standard_normal((nq, d)).astype(np.float32)
    path = tmp_path / f"{kind}.faiss"
    faiss.write_index(build(kind, metric, xb), str(path))
    Dref, Iref = faiss_search(faiss.read_index(str(path)), xq)
    index = simil.load(path, device=device)
    assert index.description == description and index.metric == metric
    assert index.ntotal == n and index.dim == d
    D, I = index.search(xq, K, nprobe=NPROBE)
    assert_same(D, I, Dref, Iref, tol,
                f"seed={seed} n={n} nq={nq} d={d} kind={kind} metric={metric} device={device}")


def test_unsupported_type_names_its_code(tmp_path):
    path = tmp_path / "hnswpq.faiss"
    xb = np.random.default_rng(0).random((300, 16), dtype=np.float32)
    index = faiss.IndexHNSWPQ(16, 4, 8)
    index.train(xb)
    index.add(xb[:20])
    faiss.write_index(index, str(path))
    with pytest.raises(simil.UnsupportedError, match="'IHNp' \\(IndexHNSWPQ\\)"):
        simil.load(path, device="cpu")


def test_hnsw_flat_loads_as_exact_flat(tmp_path):
    """IndexHNSWFlat loads as Flat over its vectors: exact, as Faiss's IndexFlat."""
    rng = np.random.default_rng(3)
    xb, xq = rng.random((500, 16), dtype=np.float32), rng.random((20, 16), dtype=np.float32)
    index = faiss.IndexHNSWFlat(16, 8)
    index.add(xb)
    path = tmp_path / "hnsw.faiss"
    faiss.write_index(index, str(path))
    flat = faiss.IndexFlatL2(16)
    flat.add(xb)
    Dref, Iref = flat.search(xq, K)
    loaded = simil.load(path, device="cpu")
    assert loaded.description == "Flat" and loaded.ntotal == 500
    D, I = loaded.search(xq, K)
    assert_same(D, I, Dref, Iref, 1e-4, "seed=3 n=500 nq=20 d=16 IndexHNSWFlat")


def test_truncated_faiss_file(tmp_path):
    xb = np.random.default_rng(1).random((50, 8), dtype=np.float32)
    good = tmp_path / "flat.faiss"
    faiss.write_index(build("idmap_flat", "l2", xb), str(good))
    data = good.read_bytes()
    bad = tmp_path / "cut.faiss"
    for cut in range(4, len(data), 7):
        bad.write_bytes(data[:cut])
        with pytest.raises(simil.CorruptFileError):
            simil.load(bad, device="cpu")


@pytest.mark.parametrize("description", ["Flat", "IVF16,Flat", "IVF16,PQ8x8"])
def test_save_faiss_reads_back_in_faiss(tmp_path, description):
    seed, n, nq, d = 21, 3000, 30, 32
    xb, xq = clustered(seed, n, d), clustered(seed + 1, nq, d)
    ids = np.arange(n, dtype=np.int64) * 7 + 3
    index = simil.Index(d, description, metric="l2", device="cpu")
    index.train(xb)
    index.add(xb, ids=ids)
    path = tmp_path / "from_simil.faiss"
    index.save_faiss(path)
    D, I = index.search(xq, K, nprobe=NPROBE)
    Dref, Iref = faiss_search(faiss.read_index(str(path)), xq)
    assert_same(D, I, Dref, Iref, 1e-3 if "PQ" in description else 1e-4,
                f"seed={seed} n={n} nq={nq} d={d} description={description}")


def test_save_faiss_refuses_what_faiss_cannot_hold(tmp_path):
    index = simil.Index(16, "IVF4,PQ4,Refine", device="cpu")
    with pytest.raises(simil.UnsupportedError):
        index.save_faiss(tmp_path / "refine.faiss")
    assert not (tmp_path / "refine.faiss").exists()
