"""Errors: the exception classes, their status names, and the library's messages."""
import os

import numpy as np
import pytest

import simil
from simil import _core

CLASSES = [
    (simil.InvalidArgumentError, "SIMIL_ERR_INVALID_ARGUMENT", ValueError),
    (simil.OutOfMemoryError, "SIMIL_ERR_OUT_OF_MEMORY", MemoryError),
    (simil.UnsupportedError, "SIMIL_ERR_UNSUPPORTED", simil.Error),
    (simil.NoDeviceError, "SIMIL_ERR_NO_DEVICE", simil.Error),
    (simil.FileError, "SIMIL_ERR_IO", OSError),
    (simil.CorruptFileError, "SIMIL_ERR_CORRUPT", simil.Error),
    (simil.NotTrainedError, "SIMIL_ERR_NOT_TRAINED", simil.Error),
    (simil.DeviceError, "SIMIL_ERR_DEVICE", simil.Error),
    (simil.InternalError, "SIMIL_ERR_INTERNAL", simil.Error),
]


@pytest.mark.parametrize("cls,status,builtin", CLASSES)
def test_classes_match_the_library(cls, status, builtin):
    assert issubclass(cls, simil.Error) and issubclass(cls, builtin)
    assert cls.status == status
    assert _core.status_name(cls.code) == status  # codes agree with status.h
    e = cls("a message")
    assert str(e) == "a message"


def flat(dim=8, n=10):
    index = simil.Index(dim, device="cpu")
    index.add(np.random.default_rng(0).random((n, dim), dtype=np.float32))
    return index


def test_k_zero():
    with pytest.raises(simil.InvalidArgumentError) as info:
        flat().search(np.zeros((2, 8), np.float32), 0)
    assert info.value.status == "SIMIL_ERR_INVALID_ARGUMENT" and info.value.code == -1
    assert "k=0" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(simil.InvalidArgumentError, match="k=-3"):
        flat().search(np.zeros((2, 8), np.float32), -3)


def test_wrong_dimension():
    index = simil.Index(784, device="cpu")
    with pytest.raises(simil.InvalidArgumentError) as info:
        index.search(np.zeros((3, 783), np.float32), 5)
    assert str(info.value) == "queries have 783 columns, the index has dimension 784"
    assert info.value.status == "SIMIL_ERR_INVALID_ARGUMENT"
    with pytest.raises(simil.InvalidArgumentError, match="784"):
        index.search(np.zeros(783, np.float32), 5)
    with pytest.raises(simil.InvalidArgumentError, match="vectors have 10 columns"):
        index.add(np.zeros((2, 10), np.float32))
    with pytest.raises(simil.InvalidArgumentError, match="1-d or 2-d"):
        index.add(np.zeros((2, 2, 196), np.float32))


def test_the_c_layer_checks_shapes_too():
    core = simil.Index(4, device="cpu")._core
    with pytest.raises(simil.InvalidArgumentError, match="queries have 3 columns"):
        core.search(np.zeros((1, 3), np.float32), 1)
    with pytest.raises(simil.InvalidArgumentError, match="2-d"):
        core.add(np.zeros(4, np.float32))
    with pytest.raises(TypeError):  # no lossy cast behind the caller's back
        core.add(np.zeros((1, 4), np.float64))
    with pytest.raises(simil.InvalidArgumentError, match="2 ids were given for 1 vectors"):
        core.add(np.zeros((1, 4), np.float32), np.array([1, 2]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad):
    index = flat()
    x = np.ones((5, 8), np.float32)
    x[3, 2] = bad
    with pytest.raises(simil.InvalidArgumentError):
        index.add(x)
    assert index.ntotal == 10  # nothing was added


def test_bad_arguments():
    with pytest.raises(simil.InvalidArgumentError, match="unknown metric 'manhattan'"):
        simil.Index(8, metric="manhattan")
    with pytest.raises(simil.InvalidArgumentError, match="unknown device"):
        simil.Index(8, device="tpu")
    with pytest.raises(simil.InvalidArgumentError, match="dimension 0"):
        simil.Index(0)
    index = flat()
    with pytest.raises(simil.InvalidArgumentError, match="3 ids were given for 2 vectors"):
        index.add(np.zeros((2, 8)), ids=[1, 2, 3])
    with pytest.raises(simil.InvalidArgumentError, match=r"ids\[0\]=-4 is out of range"):
        index.add(np.zeros((1, 8)), ids=[-4])
    with pytest.raises(TypeError):
        index.add(np.zeros((1, 8)), ids=[1.5])
    with pytest.raises(TypeError):
        index.add(np.array([["a"] * 8]))
    with pytest.raises(simil.InvalidArgumentError, match="nprobe"):
        index.search(np.zeros(8), 1, nprobe=0)
    with pytest.raises(simil.InvalidArgumentError):
        index.reconstruct(12345)
    with pytest.raises(TypeError):
        simil.Index(8, device=0)


def test_no_device():
    n = simil.gpu_count()
    if n == 0:
        with pytest.raises(simil.NoDeviceError) as info:
            simil.Index(8, device="gpu")
        assert info.value.status == "SIMIL_ERR_NO_DEVICE"
        with pytest.raises(simil.NoDeviceError):
            simil.kmeans(np.zeros((10, 2), np.float32), 2, device="gpu")
    with pytest.raises(simil.NoDeviceError):
        simil.Index(8, device=f"gpu:{n}")


def test_missing_file():
    with pytest.raises(simil.FileError) as info:
        simil.load("/nonexistent/dir/index.simil")
    assert isinstance(info.value, OSError)
    assert info.value.status == "SIMIL_ERR_IO"
    assert "/nonexistent/dir/index.simil" in str(info.value)
    with pytest.raises(simil.FileError):
        flat().save("/nonexistent/dir/index.simil")


def test_corrupt_files(tmp_path):
    path = tmp_path / "good.simil"
    flat(n=200).save(path)
    good = path.read_bytes()
    cases = {
        "truncated": good[: len(good) // 2],
        "header only": good[:16],
        "flipped byte": good[: len(good) // 2] + bytes([good[len(good) // 2] ^ 0x40])
        + good[len(good) // 2 + 1:],
        "not an index": b"hello, this is not an index file\n" * 4,
        "empty": b"",
    }
    for name, content in cases.items():
        bad = tmp_path / "bad.simil"
        bad.write_bytes(content)
        with pytest.raises(simil.CorruptFileError) as info:
            simil.load(bad)
        assert info.value.status == "SIMIL_ERR_CORRUPT", name
    assert simil.load(path).ntotal == 200


def test_messages_are_per_call():
    with pytest.raises(simil.InvalidArgumentError, match="k=0"):
        flat().search(np.zeros(8), 0)
    with pytest.raises(simil.FileError) as info:
        simil.read(os.path.join("/nonexistent", "x.fvecs"))
    assert "k=0" not in str(info.value)


def _python_words(message):
    """No option of the command line, no C function name."""
    return "--" not in message and "simil_" not in message


def test_errors_speak_python():
    xb = np.random.default_rng(4).random((300, 8), dtype=np.float32)
    index = simil.Index(8, "IVF4,Flat", device="cpu")
    index.train(xb)
    index.add(xb)
    with pytest.raises(simil.InvalidArgumentError) as info:
        index.train(xb)
    assert "reset the index" in str(info.value) and _python_words(str(info.value))
    if simil.gpu_count() == 0:
        with pytest.raises(simil.NoDeviceError) as info:
            simil.Index(8, device="gpu")
        assert 'device "cpu"' in str(info.value) and _python_words(str(info.value))
