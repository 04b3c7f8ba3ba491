"""simil: similarity search and clustering of dense vectors, on NVIDIA GPUs or the CPU.

A Python interface to libsimil.  Vectors are numpy arrays of float32 (uint8,
float64 and integer arrays are converted), one vector per row; ids are int64.
Results are new numpy arrays.

    >>> import simil
    >>> xb = simil.generate("uniform", 10000, 64, seed=1)
    >>> xq = simil.generate("uniform", 5, 64, seed=2)
    >>> index = simil.Index(64, "Flat", metric="l2")
    >>> index.add(xb)                          # ids 0 .. 9999
    >>> distances, ids = index.search(xq, 10)  # float32 5 x 10, int64 5 x 10

Devices: "auto" (GPU 0 if there is one, else the CPU), "cpu", "gpu" or "gpu:N".
Asking for a GPU where there is none raises NoDeviceError; simil never falls
back silently.  Index.backend says what an index runs on.

Errors: every failure of the library raises a subclass of simil.Error that
carries the library's message; e.status is the status name (for example
"SIMIL_ERR_INVALID_ARGUMENT") and e.code its number.  Bad arguments raise
InvalidArgumentError, which is also a ValueError.

Threads: train, add, search, remove, kmeans, select_k, generate, read and
write release the GIL.  Many threads may search one index at once; add,
train, remove and reset wait until the searches in flight have finished.
"""

import collections
import numbers
import operator
import os
import tempfile
import textwrap

import numpy as np

from . import _core

__version__ = _core.version()

__all__ = [
    "Index", "load", "serialize_index", "deserialize_index", "set_progress",
    "kmeans", "select_k", "generate", "read", "write",
    "search_parameters", "SearchParameter",
    "gpu_count", "built_with_cuda", "__version__",
    "METRIC_L2", "METRIC_INNER_PRODUCT",
    "Error", "InvalidArgumentError", "OutOfMemoryError", "UnsupportedError",
    "NoDeviceError", "FileError", "CorruptFileError", "NotTrainedError",
    "DeviceError", "InternalError",
]


# ---- errors ----

class Error(Exception):
    """Base class of the errors simil raises.

    Attributes: status, the name of the library's status code (such as
    "SIMIL_ERR_IO"), and code, its value (a negative int).
    """
    status = None
    code = None


class InvalidArgumentError(Error, ValueError):
    """A bad value: a wrong shape or dimension, k < 1, NaN or Inf in vectors."""
    status, code = "SIMIL_ERR_INVALID_ARGUMENT", -1


class OutOfMemoryError(Error, MemoryError):
    """Host or GPU memory ran out."""
    status, code = "SIMIL_ERR_OUT_OF_MEMORY", -2


class UnsupportedError(Error):
    """A valid request that this build of simil cannot do (yet)."""
    status, code = "SIMIL_ERR_UNSUPPORTED", -3


class NoDeviceError(Error, RuntimeError):
    """A GPU was asked for and none is usable."""
    status, code = "SIMIL_ERR_NO_DEVICE", -4


class FileError(Error, OSError):
    """The operating system refused a file operation (missing file, permissions)."""
    status, code = "SIMIL_ERR_IO", -5


class CorruptFileError(Error):
    """A file is truncated, damaged or not in a format simil reads."""
    status, code = "SIMIL_ERR_CORRUPT", -6


class NotTrainedError(Error, RuntimeError):
    """The index must be trained before this call."""
    status, code = "SIMIL_ERR_NOT_TRAINED", -7


class DeviceError(Error, RuntimeError):
    """The GPU driver or runtime failed."""
    status, code = "SIMIL_ERR_DEVICE", -8


class InternalError(Error, RuntimeError):
    """A bug in simil: please report it with the message."""
    status, code = "SIMIL_ERR_INTERNAL", -9


_ERRORS = (InvalidArgumentError, OutOfMemoryError, UnsupportedError, NoDeviceError,
           FileError, CorruptFileError, NotTrainedError, DeviceError, InternalError)
_core._set_error_classes({cls.code: cls for cls in _ERRORS})


# Faiss's numbers for its metrics, as Index.metric_type gives them.
METRIC_INNER_PRODUCT = 0
METRIC_L2 = 1


# ---- argument normalization ----

def _host(x, what):
    """x itself, or for an array in GPU memory its host copy (add and train
    take host memory: the library trains and encodes there)."""
    if not (hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack_device__")):
        return x
    library = type(x).__module__.partition(".")[0]
    if library == "torch" and x.device.type == "cuda":
        return x.detach().cpu().numpy()
    if library == "cupy":
        return x.get()
    if hasattr(x, "__cuda_array_interface__") or (
            hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] in _DLPACK_CUDA):
        raise UnsupportedError(f"{what} in GPU memory: simil copies those of PyTorch and "
                               "CuPy to the host for add and train; copy this one yourself")
    return x


def _rows(x, what, dim=None):
    """x as C-contiguous float32 rows; a 1-d array is one row."""
    a = np.asarray(_host(x, what))
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{what} must be an array of numbers, got dtype {a.dtype}")
    if a.ndim == 1:
        if dim is not None and a.shape[0] != dim:
            raise InvalidArgumentError(
                f"{what}: a single vector of {a.shape[0]} values was given, "
                f"the index has dimension {dim}")
        a = a.reshape(1, -1)
    elif a.ndim != 2:
        raise InvalidArgumentError(f"{what} must be a 1-d or 2-d array, got shape {a.shape}")
    elif dim is not None and a.shape[1] != dim:
        raise InvalidArgumentError(
            f"{what} have {a.shape[1]} columns, the index has dimension {dim}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _ids(ids):
    """ids as a C-contiguous 1-d int64 array; a single int is one id."""
    a = np.asarray(ids)
    if a.size == 0 and a.dtype.kind == "f":  # [] comes in as float64
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"ids must be integers, got dtype {a.dtype}")
    if a.ndim > 1:
        raise InvalidArgumentError(f"ids must be a 1-d array, got shape {a.shape}")
    if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
        raise InvalidArgumentError("ids must fit in int64")
    return np.ascontiguousarray(a.reshape(-1), dtype=np.int64)


def _allow(allow):
    """allow (Index.search) for the core: None, sorted unique int64 ids, or a
    bool mask as (little-endian packed bytes, nbits)."""
    if allow is None:
        return None
    a = np.asarray(allow)
    if a.dtype == np.bool_:
        if a.ndim != 1:
            raise InvalidArgumentError(f"allow: a bitset must be 1-d, got shape {a.shape}")
        return (np.packbits(a, bitorder="little"), a.shape[0])
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    ids = _ids(a.reshape(-1))
    return np.unique(ids)


def _seed(seed):
    """seed as an int that fits in uint64."""
    seed = operator.index(seed)
    if not 0 <= seed < 2**64:
        raise InvalidArgumentError(f"seed={seed} must be in [0, 2**64)")
    return seed


def _device(device):
    """device as the library's device string; None means "auto"."""
    if device is None:
        return "auto"
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'cpu' or 'gpu:0', got {device!r}")
    return device


# ---- search parameters ----

SearchParameter = collections.namedtuple(
    "SearchParameter", "name type default range index_types help choices")
SearchParameter.__doc__ = """One setting Index.search takes as a keyword.

name: the keyword, such as "nprobe".
type: "int", "float" or "enum" (one of the strings in choices).
default: its value when not given, as that type.
range: the values it takes, such as "1 to 1073741824" or "auto, fp32 or fp16".
index_types: the index types whose searches read it; the others ignore it.
help: one line.
choices: for "enum", the names it takes; else None.
"""


def _search_parameter(row):
    name, kind, default, range_, index_types, help_, choices = row
    value = {"int": int, "float": float}.get(kind, str)(default)
    return SearchParameter(name, kind, value, range_, index_types, help_, choices)


_SEARCH_PARAMETERS = {row[0]: _search_parameter(row) for row in _core.search_parameters()}


def search_parameters():
    """The settings Index.search takes as keywords: a dict of name -> SearchParameter.

    The list comes from the library's table, so it is the same as what the C
    API (simil_search_param_get_info) and `simil search --help` show.
    """
    return dict(_SEARCH_PARAMETERS)


def _search_settings(params):
    """The keywords of Index.search as (name, value) pairs for the library,
    checked for names and Python types (the library checks the values)."""
    settings = []
    for name, value in params.items():
        p = _SEARCH_PARAMETERS.get(name)
        if p is None:
            raise TypeError(f"search() got an unexpected keyword argument {name!r}; the search "
                            f"parameters are {', '.join(_SEARCH_PARAMETERS)}")
        if value is None:
            continue
        if p.type == "int":
            try:
                value = operator.index(value)
            except TypeError:
                raise TypeError(f"search parameter {name} takes an integer ({p.range}), "
                                f"got {type(value).__name__}") from None
        elif p.type == "float":
            if not isinstance(value, numbers.Real):
                raise TypeError(f"search parameter {name} takes a number ({p.range}), "
                                f"got {type(value).__name__}")
            value = float(value)
        elif not isinstance(value, str):
            raise TypeError(f"search parameter {name} takes one of {p.range}, "
                            f"got {type(value).__name__}")
        settings.append((name, value))
    return tuple(settings)


def _search_parameters_doc():
    """The lines of Index.search's docstring that list the settings."""
    return "\n".join(
        textwrap.fill(f"{p.name}: {p.help}; {p.range}, default {p.default!r} "
                      f"({p.index_types}).", 79, initial_indent=" " * 8,
                      subsequent_indent=" " * 12)
        for p in _SEARCH_PARAMETERS.values())


# ---- arrays in GPU memory ----

_DLPACK_CUDA = (2, 13)          # kDLCUDA, kDLCUDAManaged
_DLPACK_TYPES = {(2, 32, 1): "<f4", (0, 64, 1): "<i8", (0, 32, 1): "<i4", (1, 8, 1): "|u1"}


class _GpuArray:
    """Where a C-contiguous array in GPU memory lies; owner keeps it alive."""
    __slots__ = ("address", "shape", "typestr", "owner")

    def __init__(self, address, shape, typestr, owner):
        self.address, self.shape, self.typestr, self.owner = address, shape, typestr, owner


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _gpu_array(x, what):
    """x as a _GpuArray when it is in GPU memory (__cuda_array_interface__, or
    __dlpack__ on a CUDA device: PyTorch, CuPy, JAX, Numba), else None."""
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        shape, typestr = tuple(cai["shape"]), cai["typestr"]
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _c_strides(shape, int(typestr[2:])):
            raise InvalidArgumentError(f"{what} in GPU memory must be C-contiguous "
                                       f"(strides {tuple(strides)}, shape {shape})")
        _sync_producer(x)
        return _GpuArray(int(cai["data"][0]), shape, typestr, x)
    if not (hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")):
        return None
    if x.__dlpack_device__()[0] not in _DLPACK_CUDA:
        return None
    try:
        capsule = x.__dlpack__(stream=1)  # the legacy default stream, which simil waits for
    except TypeError:
        capsule = x.__dlpack__()
    address, shape, strides, dtype, _ = _core.dlpack_info(capsule)
    if dtype not in _DLPACK_TYPES:
        raise TypeError(f"{what}: DLPack type code {dtype[0]} of {dtype[1]} bits is not one "
                        "simil takes (float32 vectors, int64 ids)")
    if strides is not None and tuple(strides) != _c_strides(shape, 1):  # in elements
        raise InvalidArgumentError(f"{what} in GPU memory must be C-contiguous")
    return _GpuArray(address, shape, _DLPACK_TYPES[dtype], (x, capsule))


def _sync_producer(x):
    """Wait for the work PyTorch or CuPy queued on a stream other than the
    legacy default one, which simil's calls wait for themselves."""
    library = type(x).__module__.partition(".")[0]
    if library == "torch":
        import torch
        stream = torch.cuda.current_stream(x.device)
        if stream != torch.cuda.default_stream(x.device):
            stream.synchronize()
    elif library == "cupy":
        import cupy
        stream = cupy.cuda.get_current_stream()
        if stream.ptr != 0:
            stream.synchronize()


def _gpu_empty_like(x, shape, typestr):
    """A new array in GPU memory beside x, of x's library (PyTorch or CuPy)."""
    library = type(x).__module__.partition(".")[0]
    if library == "torch":
        import torch
        dtype = {"<f4": torch.float32, "<i8": torch.int64}[typestr]
        return torch.empty(shape, dtype=dtype, device=x.device)
    if library == "cupy":
        import cupy
        with cupy.cuda.Device(x.device.id):
            return cupy.empty(shape, dtype=np.dtype(typestr))
    raise UnsupportedError(
        f"the queries, a {type(x).__name__}, are in GPU memory, and simil makes result "
        "arrays in GPU memory for PyTorch and CuPy only: pass out=(distances, labels), "
        "float32 and int64 arrays of nq x k in GPU memory")


# ---- the index ----

class Index:
    """A set of vectors, each with an int64 id, that answers k-nearest-neighbour queries.

    Index(dim, description="Flat", metric="l2", device="auto")

    dim: the vector dimension (>= 1).
    description: a Faiss-style factory string: "Flat" is exact search; see
        docs/index-types.md for the others ("IVF4096,Flat", "IVF4096,PQ32",
        "XFBQ", "SQfp16", "IVF4096,SQ8", ...) and which are built.
    metric: "l2" (squared Euclidean, smallest first), "ip" (inner product,
        largest first) or "cosine" (vectors are normalized, then "ip").
    device: "auto", "cpu", "gpu" or "gpu:N".

    len(index) is the number of vectors held.  Searches may run from many
    threads at once (concurrent searches are combined into batches, see
    set_batching); train, add, remove and reset wait for them.

    The names Faiss users know work too: d, ntotal, is_trained, nprobe (the
    default of searches), metric_type, add_with_ids, reconstruct_n; and an
    Index pickles (through the bytes of its file, serialize_index).
    """

    __slots__ = ("_core", "_device")

    def __init__(self, dim, description="Flat", metric="l2", device="auto"):
        self._device = _device(device)
        self._core = _core.Index(operator.index(dim), description, metric, self._device)

    @classmethod
    def _wrap(cls, core, device):
        """An Index around a _core.Index (as simil.load makes)."""
        index = cls.__new__(cls)
        index._core = core
        index._device = device
        return index

    def train(self, x):
        """Train the index on x (n x dim, or one vector of dim values).

        Indexes that need no training (Flat) accept the call and do nothing.
        An index whose stored vectors depend on its training (an inverted
        file, PQ, OPQ, and a sharded index of any type that trains) refuses it
        while it holds vectors (InvalidArgumentError; reset() it first); flat
        XFBQ recodes its vectors with the new alpha.
        """
        self._core.train(_rows(x, "training vectors", self.dim))

    def add(self, x, ids=None):
        """Add the vectors x (n x dim, or one vector of dim values).

        ids: n int64 ids >= 0, or None to number the vectors one after the
        other, from one past the largest id the index has ever held.
        Duplicate ids are allowed.  Vectors holding NaN or Inf are refused
        (InvalidArgumentError) and then nothing is added.
        """
        x = _rows(x, "vectors", self.dim)
        if ids is not None:
            ids = _ids(ids)
            if ids.shape[0] != x.shape[0]:
                raise InvalidArgumentError(
                    f"{ids.shape[0]} ids were given for {x.shape[0]} vectors")
        self._core.add(x, ids)

    def add_with_ids(self, x, ids):
        """Add the vectors x with these ids (Faiss's name for add(x, ids))."""
        if ids is None:
            raise InvalidArgumentError("add_with_ids needs ids; add(x) numbers the vectors")
        self.add(x, ids)

    def search(self, q, k, out=None, allow=None, **params):
        """Find the k nearest neighbours of each query.

        q: queries, nq x dim (or one query of dim values, giving nq = 1):
            numpy or anything numpy reads, or an array in GPU memory (an
            object with __cuda_array_interface__ or __dlpack__ on a CUDA
            device, such as a PyTorch or CuPy array), float32 and
            C-contiguous, which the search reads where it is.
        k: neighbours per query, >= 1.
        allow: return only these ids: None (every id), an array of int ids
            (any order; repeats are ignored), or a bitset as a bool array
            whose element i says whether id i is allowed (it must cover every
            id the index has held).  Flat gives the true k nearest among the
            allowed vectors, an approximate index the k nearest among the
            allowed vectors it scans, leaving slots empty (-1) where too few
            are.
        params: search parameters by name, such as nprobe=16 or lut="fp16";
            None or absent for the default (for nprobe, the index's own,
            index.nprobe).  A setting this index does not use is ignored
            (Index.uses_search_parameter tells).  An unknown name or a value
            of the wrong type raises TypeError, a value out of range
            InvalidArgumentError (a ValueError).  They are:
        {parameters}
        out: None, or (distances, ids): float32 and int64 nq x k arrays,
            C-contiguous, that the results go to (numpy, or in GPU memory).

        Returns (distances, ids): float32 nq x k and int64 nq x k; numpy
        arrays for queries in host memory, and for queries in GPU memory new
        arrays of the queries' library (PyTorch or CuPy) on their GPU, with
        no copy through the host; or out.  Each row is sorted by distance
        (ascending for "l2", descending similarity for "ip" and "cosine"),
        then by id.  L2 distances are squared.  Slots beyond the number of
        vectors held get id -1 and distance +inf ("l2") or -inf ("ip",
        "cosine").
        """
        settings = _search_settings(params)
        gq = _gpu_array(q, "queries")
        if gq is None and out is None:
            q = _rows(q, "queries", self.dim)
            return self._core.search(q, operator.index(k), settings, _allow(allow))
        k = operator.index(k)
        if gq is None:
            q = _rows(q, "queries", self.dim)
            gq = _GpuArray(q.ctypes.data, q.shape, "<f4", q)
        shape = gq.shape if len(gq.shape) == 2 else (1,) + tuple(gq.shape)
        if gq.typestr != "<f4" or len(shape) != 2 or shape[1] != self.dim:
            raise InvalidArgumentError(
                f"queries in GPU memory must be float32 nq x {self.dim}, C-contiguous; got "
                f"{gq.typestr} of shape {tuple(gq.shape)}")
        if k < 1:
            raise InvalidArgumentError(f"search: k={k} must be >= 1")
        if out is None:
            out = (_gpu_empty_like(q, (shape[0], k), "<f4"),
                   _gpu_empty_like(q, (shape[0], k), "<i8"))
        dist, ids = (self._result_array(a, (shape[0], k), t, w)
                     for a, t, w in zip(out, ("<f4", "<i8"), ("distances", "ids")))
        self._core.search_pointers(gq.address, shape[0], k, settings, dist.address, ids.address,
                                   _allow(allow))
        return out

    search.__doc__ = search.__doc__.replace("        {parameters}", _search_parameters_doc())

    def range_search(self, q, radius, allow=None, **params):
        """Find every neighbour within radius of each query.

        "l2": squared distance < radius (radius >= 0, squared as search's
        distances); "ip" and "cosine": similarity > radius.  Flat finds them
        all; an inverted file those in the lists it scans (nprobe).  allow and
        params as for search.  A NaN or infinite radius, or a negative one
        for "l2", raises InvalidArgumentError.

        Returns (offsets, distances, ids), as Faiss's range_search returns
        (lims, D, I): query i's neighbours are ids[offsets[i]:offsets[i+1]],
        sorted as search sorts them; offsets has nq + 1 int64 entries.
        """
        settings = _search_settings(params)
        q = _rows(q, "queries", self.dim)
        if not isinstance(radius, numbers.Real):
            raise TypeError(f"radius must be a number, got {type(radius).__name__}")
        return self._core.range_search(q, float(radius), settings, _allow(allow))

    def uses_search_parameter(self, name):
        """Whether searches of this index read the search parameter name.

        nprobe is read by inverted files, extra_distance by XFBQ, and so on
        (simil.search_parameters() lists them); the others ignore it.
        """
        if name not in _SEARCH_PARAMETERS:
            raise InvalidArgumentError(f"unknown search parameter {name!r}; the search "
                                       f"parameters are {', '.join(_SEARCH_PARAMETERS)}")
        return self._core.uses_search_param(name)

    @staticmethod
    def _result_array(a, shape, typestr, what):
        """Where a result array of out lies, checked: GPU memory or numpy."""
        g = _gpu_array(a, what)
        if g is None:
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable):
                raise InvalidArgumentError(f"out: {what} must be a writable C-contiguous array")
            g = _GpuArray(a.ctypes.data, a.shape, a.dtype.str, a)
        if tuple(g.shape) != shape or g.typestr != typestr:
            raise InvalidArgumentError(f"out: {what} must be {np.dtype(typestr)} of shape "
                                       f"{shape}, got {g.typestr} of shape {tuple(g.shape)}")
        return g

    def remove(self, ids):
        """Remove every vector whose id is in ids (an int or a sequence of ints).

        Ids that are not present are ignored.  Returns how many vectors went.
        """
        return self._core.remove(_ids(ids))

    def reconstruct(self, id):
        """The stored vector with this id, float32 of length dim.

        For "cosine" it is the normalized vector.  InvalidArgumentError if the
        id is not present.
        """
        return self._core.reconstruct(operator.index(id))

    def reconstruct_n(self, n0=0, ni=-1):
        """The stored vectors with ids n0 .. n0 + ni - 1, float32 ni x dim.

        ni = -1: up to ntotal - 1, as in Faiss (where ids are 0 .. ntotal - 1
        unless given).  InvalidArgumentError if one of the ids is not present.
        """
        n0, ni = operator.index(n0), operator.index(ni)
        if ni == -1:
            ni = self.ntotal - n0
        if n0 < 0 or ni < 0:
            raise InvalidArgumentError(f"reconstruct_n: n0={n0} and ni={ni} must be >= 0")
        return self._core.reconstruct_batch(np.arange(n0, n0 + ni, dtype=np.int64))

    def reset(self):
        """Remove every vector; training is kept."""
        self._core.reset()

    def set_batching(self, enabled, max_wait_us=100):
        """Combine the searches that threads make at the same time.

        While one search runs, the searches other threads start wait, and
        those with the same k and parameters then run as one batch.  Each
        caller gets exactly the results it would get alone.  On by default
        for Flat, IVFn,Flat, IVFn,PQm and XFBQ indexes, with max_wait_us=100.

        enabled: False runs every search on its own.
        max_wait_us: how long a batch may wait after its first search for
            others to join (0 to 10,000,000 microseconds).  It waits only
            until as many searches have come as the last batch held, so a
            lone thread pays it once; 0 never waits.
        Other index types accept enabled=False only (UnsupportedError).
        """
        self._core.set_batching(bool(enabled), operator.index(max_wait_us))

    def save(self, path):
        """Write the index to path (str or os.PathLike), atomically.

        A file already at path is replaced only once the new one is complete.
        Read it back with simil.load().
        """
        self._core.save(os.fspath(path))

    def save_faiss(self, path):
        """Write the index as a Faiss index file (faiss.read_index reads it), atomically.

        Flat, IVFn,Flat and IVFn,PQmx8 can be written; other types raise
        UnsupportedError, an untrained IVF NotTrainedError.  Cosine indexes
        are written as inner product over their normalized vectors.
        """
        self._core.save_faiss(os.fspath(path))

    @property
    def dim(self):
        """The vector dimension."""
        return self._core.dim

    @property
    def d(self):
        """The vector dimension (Faiss's name for dim)."""
        return self._core.dim

    @property
    def nprobe(self):
        """Inverted lists a search visits unless it says otherwise (1 unless set).

        Saved with the index; a Faiss file's nprobe becomes it.  Setting it
        on an index without inverted lists raises InvalidArgumentError; it
        reads 0 there.
        """
        return self._core.nprobe

    @nprobe.setter
    def nprobe(self, value):
        if value is not None:
            value = operator.index(value)
            if value < 1:
                raise InvalidArgumentError(
                    f"nprobe={value} must be >= 1 (or None for the default, 1)")
        self._core.nprobe = 0 if value is None else value

    @property
    def metric_type(self):
        """Faiss's number for the metric: METRIC_L2 (1), or METRIC_INNER_PRODUCT (0)
        for "ip" and "cosine" (cosine is inner product over normalized vectors)."""
        return METRIC_L2 if self._core.metric == "l2" else METRIC_INNER_PRODUCT

    @property
    def ntotal(self):
        """The number of vectors held (also len(index))."""
        return self._core.ntotal

    @property
    def metric(self):
        """The metric: "l2", "ip" or "cosine"."""
        return self._core.metric

    @property
    def description(self):
        """The normalized factory string, such as "Flat" or "IVF1024,Flat"."""
        return self._core.description

    @property
    def backend(self):
        """What the index runs on, such as "cpu (2 threads)" or "cuda:0 (NVIDIA H200)"."""
        return self._core.backend

    @property
    def is_trained(self):
        """Whether vectors may be added (False until train() for indexes that need it)."""
        return self._core.is_trained

    def __len__(self):
        """The number of vectors held."""
        return self.ntotal

    def __reduce__(self):
        """Pickle as the bytes of the index file; it loads back on the same device string."""
        return (_unpickle, (serialize_index(self), self._device))

    def __repr__(self):
        """simil.Index(dim=..., description=..., metric=..., ntotal=..., backend=...)."""
        return (f"simil.Index(dim={self.dim}, description={self.description!r}, "
                f"metric={self.metric!r}, ntotal={self.ntotal}, backend={self.backend!r})")


def load(path, device="auto"):
    """Load an index written by Index.save(), or a Faiss index file, onto device
    ("auto", "cpu", "gpu", "gpu:N").

    A Faiss type simil cannot represent raises UnsupportedError; a truncated,
    damaged or unknown file CorruptFileError; a missing or unreadable one
    FileError.
    """
    device = _device(device)
    return Index._wrap(_core.load(os.fspath(path), device), device)


def serialize_index(index):
    """The bytes of index's file (what Index.save writes), as Faiss's serialize_index.

    The file goes through a temporary folder (tempfile.gettempdir()).
    """
    with tempfile.TemporaryDirectory(prefix="simil-") as folder:
        path = os.path.join(folder, "index.simil")
        index.save(path)
        with open(path, "rb") as f:
            return f.read()


def deserialize_index(data, device="auto"):
    """An Index from the bytes of an index file (simil's or Faiss's) onto device."""
    with tempfile.TemporaryDirectory(prefix="simil-") as folder:
        path = os.path.join(folder, "index.bin")
        with open(path, "wb") as f:
            f.write(memoryview(data))
        return load(path, device)


def _unpickle(data, device):
    return deserialize_index(data, device)


def set_progress(callback):
    """Report the progress of long calls (train, add, kmeans, k-NN graphs).

    callback(stage, done, total) is called a few times a second, from the
    thread that made the call, with stage a str such as "add" and done out
    of total work units; once more with done == total at the end.  None
    stops the reports.  An exception in the callback does not stop the
    work: it goes to sys.unraisablehook.  One callback serves the process.
    """
    _core.set_progress(callback)


# ---- clustering and selection ----

_KMEANS_INIT = {"random": 0, "k-means++": 1, "kmeans++": 1}


def kmeans(x, k, iterations=20, init="random", max_points_per_centroid=256, seed=1234,
           spherical=False, device="auto"):
    """Cluster the rows of x (n x dim) into k clusters with Lloyd's k-means.

    iterations: Lloyd iterations.
    init: "random" (k distinct training points) or "k-means++".
    max_points_per_centroid: train on a random sample of at most
        k * max_points_per_centroid points (None or 0: on all of them).
    seed: the random seed (0 <= seed < 2**64); a seed gives the same result
        on the same device.
    spherical: keep the centroids at unit norm (for "ip" or "cosine" data).
    device: "auto", "cpu", "gpu" or "gpu:N".

    Returns (centroids, assignments, objective): float32 k x dim; int64 n,
    the nearest centroid of every row of x; float64 of length iterations,
    the sum of squared distances of the training points to their centroids
    at each iteration.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise InvalidArgumentError(f"x must be a 2-d array (n x dim), got shape {x.shape}")
    x = _rows(x, "x")
    try:
        init_code = _KMEANS_INIT[init]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"init={init!r} is not one of {sorted(_KMEANS_INIT)}") from None
    points = 0 if max_points_per_centroid is None else operator.index(max_points_per_centroid)
    return _core.kmeans(x, operator.index(k), operator.index(iterations), init_code, points,
                        _seed(seed), bool(spherical), _device(device))


def select_k(values, k, largest=False):
    """The k smallest (or largest) values of each row, sorted, with their column indices.

    values: a 2-d array (rows x cols), or a 1-d array for a single row.
    Ties go to the smaller index.  NaN counts as +inf when selecting the
    smallest, and is never returned before a number.  If k > cols, the
    extra slots get +inf (-inf when largest) and index -1.

    Returns (values, indices): float32 and int64, rows x k (or k for 1-d input).
    """
    a = np.asarray(values)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"values must be an array of numbers, got dtype {a.dtype}")
    if a.ndim not in (1, 2):
        raise InvalidArgumentError(f"values must be a 1-d or 2-d array, got shape {a.shape}")
    rows = a.reshape(1, -1) if a.ndim == 1 else a
    out_values, out_indices = _core.select_k(np.ascontiguousarray(rows, dtype=np.float32),
                                             operator.index(k), bool(largest))
    if a.ndim == 1:
        return out_values[0], out_indices[0]
    return out_values, out_indices


# ---- data ----

def generate(kind, n, dim, seed, first=0):
    """Rows [first, first + n) of a synthetic dataset of the benchmarks, bit-exact.

    kind: "uniform" (values in [0, 1)) or "mix" (a Gaussian mixture of 1024
    clusters).  The rows do not depend on how a dataset is cut into pieces.
    Returns float32 n x dim.
    """
    return _core.generate(kind, operator.index(n), operator.index(dim), _seed(seed),
                          operator.index(first))


def read(path, first=0, count=-1):
    """Read rows [first, first + count) of a vector file; count -1 (or None): to the end.

    Formats, by name: .fvecs .bvecs .ivecs (texmex), .npy, MNIST idx
    (*-idx3-ubyte, optionally .gz), and FILE.hdf5:DATASET when simil was
    built with HDF5.  Returns a 2-d array of the file's element type
    (float32, uint8, int32 or int64; float64 .npy files come back as float32).
    """
    count = -1 if count is None else operator.index(count)
    return _core.read(os.fspath(path), operator.index(first), count)


_WRITABLE = (np.dtype(np.float32), np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.int64))


def write(path, array):
    """Write a 2-d array (a 1-d one is one row) to a vector file, atomically.

    The format follows the name: .fvecs needs float32, .bvecs uint8, .ivecs
    int32 (int64 is narrowed if every value fits), .npy takes any of float32,
    uint8, int32 and int64.  float64 and float16 arrays are written as float32.
    """
    a = np.asarray(array)
    if a.dtype.kind == "f" and a.dtype != np.float32:
        a = a.astype(np.float32)
    if a.dtype not in _WRITABLE:
        raise TypeError(f"write: dtype {a.dtype} cannot be written; "
                        "use float32, uint8, int32 or int64")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise InvalidArgumentError(f"write: the array must be 1-d or 2-d, got shape {a.shape}")
    _core.write(os.fspath(path), np.ascontiguousarray(a))


# ---- the library ----

def gpu_count():
    """The number of GPUs this build of simil can use (0 without CUDA, driver or device)."""
    return _core.gpu_count()


def built_with_cuda():
    """Whether libsimil was built with its CUDA backend."""
    return _core.built_with_cuda()
