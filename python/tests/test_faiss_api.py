"""The names Faiss users know: d, ntotal, nprobe as the search default,
is_trained, metric_type, add_with_ids, reconstruct_n, pickling through the
file's bytes, the progress callback and the type stubs."""
import os
import pickle
import threading

import numpy as np
import pytest

import simil


def data(seed, n, d):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def ivf(seed=1, n=2000, d=16, nlist=16, description=None):
    xb = data(seed, n, d)
    index = simil.Index(d, description or f"IVF{nlist},Flat", device="cpu")
    index.train(xb)
    index.add(xb)
    return index, xb


def test_attributes():
    index, xb = ivf()
    assert index.d == index.dim == 16
    assert index.ntotal == len(index) == 2000
    assert index.is_trained is True
    assert index.metric_type == simil.METRIC_L2 == 1
    assert simil.Index(4, metric="ip").metric_type == simil.METRIC_INNER_PRODUCT == 0
    assert simil.Index(4, metric="cosine").metric_type == simil.METRIC_INNER_PRODUCT
    assert simil.Index(4, "IVF4,Flat").is_trained is False


def test_nprobe_is_the_search_default(tmp_path):
    index, xb = ivf()
    xq = data(2, 50, 16)
    assert index.nprobe == 1
    D1, I1 = index.search(xq, 10)
    D1x, I1x = index.search(xq, 10, nprobe=1)
    assert np.array_equal(I1, I1x)
    index.nprobe = 16  # all the lists: exact
    D16, I16 = index.search(xq, 10)
    Dx, Ix = index.search(xq, 10, nprobe=16)
    assert np.array_equal(I16, Ix)
    flat = simil.Index(16, device="cpu")
    flat.add(xb)
    Df, If = flat.search(xq, 10)
    assert np.array_equal(I16, If)
    assert not np.array_equal(I1, If)  # one list of 16 misses neighbours
    # an explicit nprobe still wins over the default
    assert np.array_equal(index.search(xq, 10, nprobe=1)[1], I1)
    # saved and loaded with the index
    index.save(tmp_path / "ivf.simil")
    assert simil.load(tmp_path / "ivf.simil", device="cpu").nprobe == 16
    index.nprobe = None
    assert index.nprobe == 1
    with pytest.raises(simil.InvalidArgumentError):
        index.nprobe = 0
    with pytest.raises(simil.InvalidArgumentError, match="no inverted lists"):
        flat.nprobe = 4
    assert flat.nprobe == 0


def test_add_with_ids_and_reconstruct_n():
    xb = data(3, 100, 8)
    index = simil.Index(8, device="cpu")
    index.add_with_ids(xb[:50], np.arange(50) + 1000)
    with pytest.raises(simil.InvalidArgumentError):
        index.add_with_ids(xb, None)
    index.add(xb[50:])  # ids 1050 .. 1099
    got = index.reconstruct_n(1010, 20)
    assert got.shape == (20, 8) and got.dtype == np.float32
    assert np.array_equal(got, xb[10:30])
    seq = simil.Index(8, device="cpu")
    seq.add(xb)
    assert np.array_equal(seq.reconstruct_n(), xb)
    assert np.array_equal(seq.reconstruct_n(95), xb[95:])
    assert seq.reconstruct_n(5, 0).shape == (0, 8)
    with pytest.raises(simil.InvalidArgumentError):
        seq.reconstruct_n(90, 20)  # ids 100 .. 109 are not there
    with pytest.raises(simil.InvalidArgumentError):
        seq.reconstruct_n(-1, 2)


@pytest.mark.parametrize("description", ["Flat", "IVF16,Flat", "IVF16,PQ4x4"])
def test_pickle_through_file_bytes(description):
    index, xb = ivf(description=description)
    if "IVF" in description:
        index.nprobe = 3
    xq = data(4, 20, 16)
    back = pickle.loads(pickle.dumps(index))
    assert back.description == index.description and back.ntotal == index.ntotal
    assert back.nprobe == index.nprobe and back.backend.startswith("cpu")
    D, I = index.search(xq, 5)
    D2, I2 = back.search(xq, 5)
    assert np.array_equal(I, I2) and np.array_equal(D, D2)
    raw = simil.serialize_index(index)
    assert isinstance(raw, bytes) and raw[:8] == b"SIMILIDX"
    again = simil.deserialize_index(bytearray(raw), device="cpu")
    assert np.array_equal(again.search(xq, 5)[1], I)


def test_deserialize_damaged_bytes():
    index, _ = ivf()
    raw = simil.serialize_index(index)
    with pytest.raises(simil.CorruptFileError):
        simil.deserialize_index(raw[: len(raw) // 2], device="cpu")


def test_progress_callback():
    seen = []
    simil.set_progress(lambda stage, done, total: seen.append((stage, done, total)))
    try:
        ivf(n=3000, nlist=32)
    finally:
        simil.set_progress(None)
    stages = {s for s, _, _ in seen}
    assert stages, "no progress was reported"
    for stage in stages:
        reports = [(d, t) for s, d, t in seen if s == stage]
        assert all(0 <= d <= t and t >= 1 for d, t in reports), (stage, reports)
        assert reports[-1][0] == reports[-1][1], f"{stage} never reached its total: {reports}"
    n = len(seen)
    ivf(n=500)
    assert len(seen) == n, "reports after set_progress(None)"
    with pytest.raises(TypeError):
        simil.set_progress(42)


def test_progress_callback_errors_do_not_stop_the_work(monkeypatch):
    hooked = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: hooked.append(u.exc_type))

    def boom(stage, done, total):
        raise RuntimeError("from the callback")

    simil.set_progress(boom)
    try:
        index, _ = ivf(n=1000)
    finally:
        simil.set_progress(None)
    assert index.ntotal == 1000
    assert RuntimeError in hooked


def test_progress_from_threads():
    lock, seen = threading.Lock(), []

    def note(stage, done, total):
        with lock:
            seen.append(threading.get_ident())

    simil.set_progress(note)
    try:
        threads = [threading.Thread(target=ivf, kwargs={"seed": s, "n": 1500}) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        simil.set_progress(None)
    assert {t.ident for t in threads} <= set(seen)


def test_type_stubs_are_installed():
    folder = os.path.dirname(simil.__file__)
    assert os.path.exists(os.path.join(folder, "py.typed"))
    stub = open(os.path.join(folder, "__init__.pyi")).read()
    for name in simil.__all__:
        assert name in stub, f"{name} has no stub"
