"""Arrays in GPU memory: search reads queries given by __cuda_array_interface__
or DLPack where they are, and writes results to GPU arrays (PyTorch, CuPy, or
out=).  The pointer path is also checked on the CPU, with host memory behind a
stand-in __cuda_array_interface__ (the library tells host from GPU memory by
the pointer); the GPU tests skip, saying why, without a GPU and PyTorch or
CuPy."""
import numpy as np
import pytest

import simil
from simil import _core

K = 7


def data(seed, n, d):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


class HostBehindInterface:
    """Host memory offered through __cuda_array_interface__ (version 3)."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3,
                                         "strides": None, "stream": None}


def flat(device="cpu", n=300, d=12):
    index = simil.Index(d, "Flat", device=device)
    index.add(data(1, n, d))
    return index


def test_pointer_path_on_host_memory():
    index = flat()
    q = data(2, 20, 12)
    D, I = index.search(q, K)
    outD, outI = np.empty((20, K), np.float32), np.empty((20, K), np.int64)
    got = index.search(HostBehindInterface(q), K, out=(outD, outI))
    assert got[0] is outD and got[1] is outI
    assert np.array_equal(outI, I) and np.array_equal(outD, D)
    # out= also takes stand-ins for its arrays, and works for plain numpy queries
    outD2, outI2 = np.zeros_like(outD), np.zeros_like(outI)
    index.search(q, K, out=(HostBehindInterface(outD2), HostBehindInterface(outI2)))
    assert np.array_equal(outI2, I)


def test_pointer_path_checks():
    index = flat()
    q = data(2, 20, 12)
    good = (np.empty((20, K), np.float32), np.empty((20, K), np.int64))
    with pytest.raises(simil.InvalidArgumentError, match="float32 nq x 12"):
        index.search(HostBehindInterface(q[:, :5].copy()), K, out=good)
    with pytest.raises(simil.InvalidArgumentError, match="float32 nq x 12"):
        index.search(HostBehindInterface(q.astype(np.float64)), K, out=good)
    with pytest.raises(simil.InvalidArgumentError, match="C-contiguous"):
        index.search(_strided(q), K, out=good)
    with pytest.raises(simil.InvalidArgumentError, match="shape"):
        index.search(q, K, out=(np.empty((20, K + 1), np.float32), good[1]))
    with pytest.raises(simil.InvalidArgumentError, match="int64"):
        index.search(q, K, out=(good[0], np.empty((20, K), np.int32)))
    with pytest.raises(simil.InvalidArgumentError, match="k=0"):
        index.search(HostBehindInterface(q), 0, out=good)
    # queries in GPU memory of no library simil knows need out=
    with pytest.raises(simil.UnsupportedError, match="out="):
        index.search(HostBehindInterface(q), K)


def _strided(q):
    """Every other column of a wider array, offered with its real strides."""
    wide = np.repeat(q, 2, axis=1)
    view = HostBehindInterface(wide)
    view.__cuda_array_interface__.update(shape=q.shape, strides=(wide.strides[0], 8))
    return view


def test_dlpack_capsule_is_read_where_it_lies():
    a = data(3, 5, 4)
    address, shape, strides, dtype, device = _core.dlpack_info(a.__dlpack__())
    assert address == a.ctypes.data and shape == (5, 4)
    assert strides in (None, (4, 1)) and dtype == (2, 32, 1) and device == (1, 0)
    b = np.arange(6, dtype=np.int64)[1:]
    address, shape, strides, dtype, device = _core.dlpack_info(b.__dlpack__())
    assert address == b.ctypes.data and shape == (5,) and dtype == (0, 64, 1)
    with pytest.raises(ValueError):
        _core.dlpack_info(object())
    # numpy arrays offer DLPack on the CPU: they take the numpy path
    index = flat()
    assert np.array_equal(index.search(a.repeat(3, axis=1), K)[1],
                          index.search(np.ascontiguousarray(a.repeat(3, axis=1)), K)[1])


# ---- on a GPU ----

def gpu_library():
    if simil.gpu_count() == 0:
        pytest.skip("no GPU: the GPU array tests need one (and PyTorch or CuPy)")
    try:
        import torch
        if torch.cuda.is_available():
            return "torch", torch
    except ImportError:
        pass
    try:
        import cupy
        return "cupy", cupy
    except ImportError:
        pytest.skip("neither PyTorch with CUDA nor CuPy imports: GPU arrays are not tested")


def to_gpu(lib, name, a):
    return lib.from_numpy(a).cuda() if name == "torch" else lib.asarray(a)


def to_host(name, a):
    return a.cpu().numpy() if name == "torch" else a.get()


@pytest.mark.parametrize("description", ["Flat", "IVF16,Flat"])
def test_gpu_queries_give_gpu_results(description):
    name, lib = gpu_library()
    xb, xq = data(5, 4000, 32), data(6, 100, 32)
    index = simil.Index(32, description, device="gpu")
    index.train(xb)
    index.add(to_gpu(lib, name, xb))  # add copies through the host, said so in the docs
    if description.startswith("IVF"):
        index.nprobe = 16  # a Flat index has no nprobe, and says so
    D, I = index.search(xq, K)
    gD, gI = index.search(to_gpu(lib, name, xq), K)
    assert type(gD).__module__.startswith(name) and type(gI).__module__.startswith(name)
    assert (gD.device.type == "cuda") if name == "torch" else True
    assert np.array_equal(to_host(name, gI), I)
    np.testing.assert_allclose(to_host(name, gD), D, rtol=1e-5, atol=1e-5)


def test_gpu_dlpack_only_object_and_out():
    name, lib = gpu_library()
    xb, xq = data(7, 2000, 16), data(8, 50, 16)
    index = simil.Index(16, "Flat", device="gpu")
    index.add(xb)
    D, I = index.search(xq, K)
    gq = to_gpu(lib, name, xq)

    class DLPackOnly:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream) if name == "torch" else self.t.toDlpack()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    outD = to_gpu(lib, name, np.zeros((50, K), np.float32))
    outI = to_gpu(lib, name, np.zeros((50, K), np.int64))
    index.search(DLPackOnly(gq), K, out=(outD, outI))
    assert np.array_equal(to_host(name, outI), I)
