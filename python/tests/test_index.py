"""simil.Index: exact search against numpy, ids, remove, reconstruct, files."""
import numpy as np
import pytest

import simil
from helpers import DEVICES, assert_knn, distances


def data(seed, n, dim, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.random((n, dim)).astype(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("dim", [1, 3, 40, 100])
def test_flat_search_matches_numpy(device, metric, dim):
    seed, nb, nq, k = 1000 + dim, 1500, 60, 10
    xb, xq = data(seed, nb, dim), data(seed + 1, nq, dim)
    if metric == "cosine":
        xb[17] = 0  # a zero vector stays zero: similarity 0 with everything
    index = simil.Index(dim, "Flat", metric=metric, device=device)
    index.add(xb)
    D, I = index.search(xq, k)
    context = f"seed={seed} nb={nb} nq={nq} dim={dim} k={k} metric={metric} device={device}"
    assert_knn(D, I, distances(xq, xb, metric), np.arange(nb), k, metric, context)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_k_beyond_ntotal_fills_empty_slots(device, metric):
    xb, xq = data(1, 7, 8), data(2, 3, 8)
    index = simil.Index(8, metric=metric, device=device)
    index.add(xb)
    D, I = index.search(xq, 12)
    assert_knn(D, I, distances(xq, xb, metric), np.arange(7), 12, metric, f"device={device}")


@pytest.mark.parametrize("device", DEVICES)
def test_empty_index_and_empty_batch(device):
    index = simil.Index(4, device=device)
    D, I = index.search(np.ones((2, 4), np.float32), 3)
    assert np.all(I == -1) and np.all(D == np.inf)
    index.add(np.empty((0, 4), np.float32))
    assert index.ntotal == 0
    D, I = index.search(np.empty((0, 4), np.float32), 3)
    assert D.shape == (0, 3) and I.shape == (0, 3)


def test_inputs_are_converted():
    xb = data(3, 200, 16)
    index = simil.Index(16, device="cpu")
    index.add(xb)
    D32, I32 = index.search(xb[:5], 4)
    for q in (xb[:5].astype(np.float64), xb[:5].tolist(), np.asfortranarray(xb[:5])):
        D, I = index.search(q, 4)
        assert np.array_equal(I, I32)
        np.testing.assert_allclose(D, D32, rtol=1e-6)
    D1, I1 = index.search(xb[3], 4)  # one 1-d query
    assert D1.shape == (1, 4) and np.array_equal(I1[0], I32[3])
    strided = np.repeat(xb[:5], 2, axis=0)[::2]  # not contiguous
    assert np.array_equal(index.search(strided, 4)[1], I32)


def test_uint8_vectors():
    rng = np.random.default_rng(4)
    xb = rng.integers(0, 256, (300, 12), dtype=np.uint8)
    xq = rng.integers(0, 256, (20, 12), dtype=np.uint8)
    index = simil.Index(12, device="cpu")
    index.add(xb)
    D, I = index.search(xq, 5)
    assert_knn(D, I, distances(xq, xb, "l2"), np.arange(300), 5, "l2", "uint8 seed=4")


def test_sequential_and_explicit_ids():
    dim = 6
    x = data(5, 20, dim)
    index = simil.Index(dim, device="cpu")
    index.add(x[:10])                                    # ids 0..9
    index.add(x[10:12], ids=np.array([100, 200], dtype=np.int32))
    index.add(x[12:15])                                  # 201, 202, 203
    index.add(x[15], ids=[50])                           # one 1-d vector
    expected = list(range(10)) + [100, 200, 201, 202, 203, 50]
    assert index.ntotal == len(index) == 16
    D, I = index.search(x[:16], 1)
    assert I[:, 0].tolist() == expected
    for row, id in enumerate(expected):
        assert np.array_equal(index.reconstruct(id), x[row]), f"id={id}"
    assert index.reconstruct(np.int64(201)).dtype == np.float32


def test_remove():
    dim = 5
    x = data(6, 30, dim)
    index = simil.Index(dim, device="cpu")
    index.add(x)
    index.add(x[:2], ids=[7, 7])  # three vectors with id 7: remove drops every copy
    assert index.remove([0, 5, 7, 999]) == 5
    assert index.remove(5) == 0
    assert index.ntotal == 27
    D, I = index.search(x, 27)
    assert not set(I.ravel().tolist()) & {0, 5, 7}
    assert set(I[0].tolist()) == set(range(30)) - {0, 5, 7}
    with pytest.raises(simil.InvalidArgumentError):
        index.reconstruct(5)
    assert index.remove([]) == 0


def test_reset_and_properties():
    index = simil.Index(9, "Flat", metric="cosine", device="cpu")
    index.add(data(7, 10, 9))
    assert (index.dim, index.metric, index.description) == (9, "cosine", "Flat")
    assert index.is_trained
    assert index.backend.startswith("cpu")
    assert "ntotal=10" in repr(index)
    index.train(data(8, 10, 9))  # Flat: a no-op
    index.reset()
    assert index.ntotal == 0 and index.dim == 9
    index.add(data(9, 3, 9))
    assert index.ntotal == 3


def test_cosine_reconstruct_is_normalized():
    x = data(10, 4, 8) * 7
    index = simil.Index(8, metric="cosine", device="cpu")
    index.add(x)
    np.testing.assert_allclose(np.linalg.norm(index.reconstruct(2)), 1.0, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_save_load_round_trip(tmp_path, device):
    dim = 24
    xb, xq = data(11, 500, dim), data(12, 20, dim)
    index = simil.Index(dim, metric="ip", device=device)
    index.add(xb, ids=np.arange(500) * 3 + 1)
    D, I = index.search(xq, 7)
    path = tmp_path / "flat.simil"
    index.save(path)
    for loaded in (simil.load(path, device=device), simil.load(str(path), device="cpu")):
        assert isinstance(loaded, simil.Index)
        assert (loaded.dim, loaded.ntotal, loaded.metric, loaded.description) == \
            (dim, 500, "ip", "Flat")
        D2, I2 = loaded.search(xq, 7)
        assert np.array_equal(I2, I)
        np.testing.assert_allclose(D2, D, rtol=1e-5, atol=1e-5)
        assert np.array_equal(loaded.reconstruct(1498), xb[499])
    index.save(path)  # replacing an existing file
    assert simil.load(path).ntotal == 500
