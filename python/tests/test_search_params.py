"""Search parameters: Index.search(q, k, **params), simil.search_parameters(),
their errors, and that each setting changes what it should."""
import numpy as np
import pytest

import simil
from helpers import DEVICES

NAMES = ["nprobe", "threads", "refine_factor", "extra_distance", "extra_of", "lut",
         "precomputed_tables"]


def mix(n, dim, seed):
    return simil.generate("mix", n, dim, seed=seed)


def recall(I, xb, xq, k):
    """recall k@k against exact float64 L2 search."""
    d = ((xq[:, None, :].astype(np.float64) - xb[None, :, :]) ** 2).sum(axis=2)
    truth = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.mean([len(set(a) & set(b)) / k for a, b in zip(I, truth)])


def built(desc, xb, device="cpu"):
    index = simil.Index(xb.shape[1], desc, device=device)
    index.train(xb)
    index.add(xb)
    return index


def test_the_list():
    params = simil.search_parameters()
    assert list(params)[:len(NAMES)] == NAMES
    assert params["nprobe"] == simil.SearchParameter(
        "nprobe", "int", 1, "1 to 1073741824", "IVF indexes", params["nprobe"].help, None)
    assert params["threads"].default == 0
    assert params["refine_factor"].default == 4
    assert params["extra_distance"].type == "float"
    assert params["extra_distance"].default == pytest.approx(0.05)
    assert params["lut"].choices == ("auto", "fp32", "fp16")
    assert params["lut"].default == "auto"
    for p in params.values():
        assert p.help and p.range and p.index_types
        assert p.name in simil.Index.search.__doc__
    params.clear()  # a copy: the module's list is untouched
    assert "nprobe" in simil.search_parameters()


def test_errors_name_the_keyword():
    xb = mix(300, 8, 1)
    index = built("IVF4,Flat", xb)
    q = xb[:3]
    with pytest.raises(TypeError, match="unexpected keyword argument 'nprob'.*nprobe, threads"):
        index.search(q, 5, nprob=2)
    with pytest.raises(TypeError, match="nprobe takes an integer"):
        index.search(q, 5, nprobe="2")
    with pytest.raises(TypeError, match="nprobe takes an integer"):
        index.search(q, 5, nprobe=2.0)
    with pytest.raises(TypeError, match="extra_distance takes a number"):
        index.search(q, 5, extra_distance="0.1")
    with pytest.raises(TypeError, match="lut takes one of auto, fp32 or fp16"):
        index.search(q, 5, lut=2)
    with pytest.raises(ValueError, match="nprobe: 0 is out of range.*1 to 1073741824"):
        index.search(q, 5, nprobe=0)
    with pytest.raises(simil.InvalidArgumentError, match="nprobe: .* is out of range"):
        index.search(q, 5, nprobe=2**70)
    with pytest.raises(simil.InvalidArgumentError, match="threads: -1 is out of range"):
        index.search(q, 5, threads=-1)
    with pytest.raises(simil.InvalidArgumentError, match="extra_distance: .* is out of range"):
        index.search(q, 5, extra_distance=1.5)
    with pytest.raises(simil.InvalidArgumentError, match="extra_distance"):
        index.search(q, 5, extra_distance=float("nan"))
    with pytest.raises(simil.InvalidArgumentError, match="'fp8' is not one of auto, fp32 or fp16"):
        index.search(q, 5, lut="fp8")
    with pytest.raises(simil.InvalidArgumentError, match="unknown search parameter 'x'"):
        index.uses_search_parameter("x")


def test_defaults_none_and_unused_settings():
    xb = mix(500, 8, 2)
    index = built("IVF8,Flat", xb)
    D0, I0 = index.search(xb[:10], 5)
    D1, I1 = index.search(xb[:10], 5, nprobe=None, threads=None)
    assert np.array_equal(I0, I1) and np.array_equal(D0, D1)
    D2, I2 = index.search(xb[:10], 5, nprobe=1, lut="fp16", extra_distance=1, refine_factor=9,
                          precomputed_tables=False, threads=np.int64(1))
    assert np.array_equal(I0, I2) and np.array_equal(D0, D2)  # only nprobe=1 applies: the default
    assert index.uses_search_parameter("nprobe")
    assert not index.uses_search_parameter("lut")
    # Flat uses none but threads: every setting is accepted and ignored
    flat = built("Flat", xb)
    Df, If = flat.search(xb[:10], 5)
    Dg, Ig = flat.search(xb[:10], 5, nprobe=7, lut="fp32", extra_distance=0.5)
    assert np.array_equal(If, Ig) and np.array_equal(Df, Dg)
    assert [n for n in NAMES if flat.uses_search_parameter(n)] == ["threads"]


def test_nprobe_all_lists_is_exact():
    xb, xq = mix(2000, 16, 3), mix(40, 16, 4)
    index = built("IVF16,Flat", xb)
    _, I1 = index.search(xq, 10, nprobe=1)
    _, I16 = index.search(xq, 10, nprobe=16)
    assert recall(I16, xb, xq, 10) >= 0.995
    assert recall(I1, xb, xq, 10) < recall(I16, xb, xq, 10)


def test_refine_factor_finds_more():
    xb, xq = mix(3000, 16, 5), mix(50, 16, 6)
    index = built("IVF16,PQ4,Refine", xb)
    _, I1 = index.search(xq, 10, nprobe=16, refine_factor=1)
    _, I32 = index.search(xq, 10, nprobe=16, refine_factor=32)
    r1, r32 = recall(I1, xb, xq, 10), recall(I32, xb, xq, 10)
    assert r32 >= 0.99 and r32 > r1 + 0.1, (r1, r32)


def test_extra_distance_widens_xfbq():
    xb, xq = mix(3000, 16, 7), mix(50, 16, 8)
    index = built("XFBQ", xb)
    _, I0 = index.search(xq, 10, extra_distance=0)
    _, I1 = index.search(xq, 10, extra_distance=1)  # every row is a candidate: exact
    r0, r1 = recall(I0, xb, xq, 10), recall(I1, xb, xq, 10)
    assert r1 >= 0.995 and r0 < r1 - 0.05, (r0, r1)
    # a fraction of each query's spread (smallest to median code distance)
    _, S0 = index.search(xq, 10, extra_distance=0, extra_of="spread")
    _, S1 = index.search(xq, 10, extra_distance=1, extra_of="spread")
    assert (S0 == I0).all()  # no window either way
    s1 = recall(S1, xb, xq, 10)
    assert s1 > r0 + 0.05, (r0, s1)
    with pytest.raises(simil.InvalidArgumentError, match="extra_of: 'median' is not one of"):
        index.search(xq, 10, extra_of="median")


@pytest.mark.parametrize("device", DEVICES)
def test_tables_and_lut_agree(device):
    """precomputed_tables and lut change how IVF-PQ distances are computed,
    not what they are: the same neighbours, distances within rounding (fp16
    tables on a GPU within 2%)."""
    xb, xq = mix(3000, 16, 9), mix(50, 16, 10)
    index = built("IVF16,PQ4", xb, device)
    D, I = index.search(xq, 10, nprobe=4, precomputed_tables=1, lut="fp32")
    for params, tol in [(dict(precomputed_tables=0, lut="fp32"), 1e-4),
                        (dict(precomputed_tables=1, lut="fp16"), 2e-2),
                        (dict(precomputed_tables=0, lut="auto"), 1e-4)]:
        D2, I2 = index.search(xq, 10, nprobe=4, **params)
        assert np.allclose(D, D2, rtol=tol, atol=tol * np.abs(D).max()), params
        same = np.mean(I == I2)
        assert same >= (0.999 if tol < 1e-3 else 0.9), (params, same)
