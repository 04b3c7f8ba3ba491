"""simil.generate against the formulas of docs/datasets.md; simil.read and simil.write."""
import struct

import numpy as np
import pytest

import simil
from helpers import mix, uniform


@pytest.mark.parametrize("n,dim,seed,first", [(6, 7, 1, 0), (4, 128, 2, 0), (5, 3, 11, 999),
                                              (3, 96, 2**64 - 1, 10**9)])
def test_uniform_is_bit_exact(n, dim, seed, first):
    x = simil.generate("uniform", n, dim, seed, first=first)
    assert x.shape == (n, dim) and x.dtype == np.float32
    expected = uniform(n, dim, seed, first)
    assert np.array_equal(x, expected), f"n={n} dim={dim} seed={seed} first={first}"
    assert x.min() > 0 and x.max() < 1


@pytest.mark.parametrize("n,dim,seed,first", [(6, 7, 11, 0), (4, 96, 12, 0), (5, 33, 13, 12345)])
def test_mix_follows_the_formula(n, dim, seed, first):
    x = simil.generate("mix", n, dim, seed, first=first)
    # numpy's float32 log and cos may differ from libm's logf and cosf by an ulp.
    np.testing.assert_allclose(x, mix(n, dim, seed, first), rtol=1e-5, atol=1e-5,
                               err_msg=f"n={n} dim={dim} seed={seed} first={first}")


@pytest.mark.parametrize("kind", ["uniform", "mix"])
def test_pieces_make_the_whole(kind):
    whole = simil.generate(kind, 50, 20, 5)
    parts = [simil.generate(kind, 20, 20, 5, first=0), simil.generate(kind, 30, 20, 5, first=20)]
    assert np.array_equal(np.vstack(parts), whole)


def test_generate_errors():
    with pytest.raises(simil.InvalidArgumentError):
        simil.generate("gaussian", 2, 2, 1)
    with pytest.raises(simil.InvalidArgumentError):
        simil.generate("uniform", 2, 2, -1)
    with pytest.raises(simil.InvalidArgumentError):
        simil.generate("uniform", -2, 2, 1)
    assert simil.generate("uniform", 0, 4, 1).shape == (0, 4)


ARRAYS = {
    "float32": np.random.default_rng(1).standard_normal((9, 13)).astype(np.float32),
    "uint8": np.random.default_rng(2).integers(0, 256, (7, 5)).astype(np.uint8),
    "int32": np.random.default_rng(3).integers(-2**31, 2**31, (4, 6)).astype(np.int32),
    "int64": np.random.default_rng(4).integers(-2**62, 2**62, (3, 2)).astype(np.int64),
}


@pytest.mark.parametrize("name,suffix", [("float32", ".fvecs"), ("uint8", ".bvecs"),
                                         ("int32", ".ivecs"), ("float32", ".npy"),
                                         ("uint8", ".npy"), ("int32", ".npy"), ("int64", ".npy")])
def test_write_read_round_trip(tmp_path, name, suffix):
    a = ARRAYS[name]
    path = tmp_path / ("data" + suffix)
    simil.write(path, a)
    back = simil.read(path)
    assert back.dtype == a.dtype and np.array_equal(back, a), f"{name} {suffix}"
    assert np.array_equal(simil.read(str(path), first=1, count=2), a[1:3])
    assert np.array_equal(simil.read(path, first=2), a[2:])
    assert simil.read(path, first=len(a), count=0).shape == (0, a.shape[1])
    if suffix == ".npy":
        assert np.array_equal(np.load(path), a)


def test_fvecs_layout(tmp_path):
    a = ARRAYS["float32"]
    path = tmp_path / "x.fvecs"
    simil.write(path, a)
    raw = path.read_bytes()
    row = 4 + 4 * a.shape[1]
    assert len(raw) == row * a.shape[0]
    for i in range(a.shape[0]):
        assert struct.unpack_from("<i", raw, i * row)[0] == a.shape[1]
        assert np.array_equal(np.frombuffer(raw, "<f4", a.shape[1], i * row + 4), a[i])


def test_numpy_files_and_conversions(tmp_path):
    a = np.random.default_rng(5).standard_normal((6, 4))
    np.save(tmp_path / "f64.npy", a)
    np.save(tmp_path / "row.npy", a[0].astype(np.float32))
    assert np.array_equal(simil.read(tmp_path / "f64.npy"), a.astype(np.float32))
    assert np.array_equal(simil.read(tmp_path / "row.npy"), a[:1].astype(np.float32))
    simil.write(tmp_path / "w.fvecs", a)  # float64 is written as float32
    assert np.array_equal(simil.read(tmp_path / "w.fvecs"), a.astype(np.float32))
    simil.write(tmp_path / "v.npy", a[0].astype(np.float32))  # 1-d: one row
    assert simil.read(tmp_path / "v.npy").shape == (1, 4)
    big = np.random.default_rng(6).random((2000, 300), dtype=np.float32)
    simil.write(tmp_path / "big.npy", big)
    back = simil.read(tmp_path / "big.npy")
    del big
    assert back.flags.c_contiguous and back.shape == (2000, 300) and float(back.sum()) > 0


def test_file_errors(tmp_path):
    with pytest.raises(simil.FileError):
        simil.read(tmp_path / "missing.fvecs")
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(simil.CorruptFileError):
        simil.read(tmp_path / "bad.npy")
    simil.write(tmp_path / "good.fvecs", ARRAYS["float32"])
    with pytest.raises(simil.InvalidArgumentError):
        simil.read(tmp_path / "good.fvecs", first=5, count=100)  # beyond the 9 rows
    with pytest.raises(simil.Error):
        simil.write(tmp_path / "u.fvecs", ARRAYS["uint8"])  # .fvecs needs float32
    with pytest.raises(TypeError):
        simil.write(tmp_path / "b.npy", np.zeros((2, 2), bool))
