"""simil.select_k against numpy: a stable sort by value, then by column index."""
import numpy as np
import pytest

import simil


def reference(values, k, largest):
    """(values, indices) of the k smallest (largest) per row; ties to the smaller
    index; NaN after every number; slots beyond the row: +-inf and -1."""
    rows, cols = values.shape
    key = np.where(np.isnan(values), np.inf, values)
    if largest:
        key = np.where(np.isnan(values), np.inf, -values)
    idx = np.broadcast_to(np.arange(cols), values.shape)
    order = np.lexsort((idx, key), axis=1)[:, :k]
    out_v = np.full((rows, k), -np.inf if largest else np.inf, np.float32)
    out_i = np.full((rows, k), -1, np.int64)
    kk = min(k, cols)
    out_v[:, :kk] = np.take_along_axis(values, order, axis=1)
    out_i[:, :kk] = order
    return out_v, out_i


@pytest.mark.parametrize("largest", [False, True])
@pytest.mark.parametrize("rows,cols,k", [(20, 50, 1), (20, 50, 7), (20, 50, 50), (5, 50, 64),
                                         (3, 5000, 100), (2, 3000, 1500), (1, 1, 1)])
def test_matches_lexsort(rows, cols, k, largest):
    seed = rows * 100003 + cols * 7 + k
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 10, (rows, cols)).astype(np.float32)  # many ties
    values[:, ::3] += rng.random((rows, len(range(0, cols, 3))), dtype=np.float32)
    v, i = simil.select_k(values, k, largest=largest)
    rv, ri = reference(values, k, largest)
    context = f"seed={seed} rows={rows} cols={cols} k={k} largest={largest}"
    assert v.dtype == np.float32 and i.dtype == np.int64, context
    assert np.array_equal(i, ri), context
    assert np.array_equal(v, rv), context


@pytest.mark.parametrize("largest", [False, True])
def test_nan_is_never_before_a_number(largest):
    rng = np.random.default_rng(77)
    values = rng.random((6, 40), dtype=np.float32)
    values[rng.random((6, 40)) < 0.2] = np.nan
    numbers = int((~np.isnan(values)).sum(axis=1).min())
    v, i = simil.select_k(values, numbers, largest=largest)
    rv, ri = reference(values, numbers, largest)
    assert np.array_equal(i, ri) and np.array_equal(v, rv), "seed=77"
    v, i = simil.select_k(values, 40, largest=largest)  # every column: NaNs last
    for row in range(6):
        count = int((~np.isnan(values[row])).sum())
        assert not np.isnan(v[row, :count]).any(), f"row {row}"
        assert sorted(i[row].tolist()) == list(range(40)), f"row {row}"


def test_one_row_and_conversion():
    x = np.array([3.0, 1.0, 2.0, 1.0])  # float64, 1-d
    v, i = simil.select_k(x, 3)
    assert v.shape == (3,) and i.tolist() == [1, 3, 2] and v.tolist() == [1.0, 1.0, 2.0]
    v, i = simil.select_k(x, 6, largest=True)
    assert i.tolist() == [0, 2, 1, 3, -1, -1]
    assert v[:4].tolist() == [3.0, 2.0, 1.0, 1.0] and np.all(v[4:] == -np.inf)
    v, i = simil.select_k(np.zeros((0, 5), np.float32), 2)
    assert v.shape == (0, 2) and i.shape == (0, 2)


def test_bad_k():
    with pytest.raises(simil.InvalidArgumentError, match="k=0"):
        simil.select_k(np.ones((2, 3), np.float32), 0)
    with pytest.raises(simil.InvalidArgumentError):
        simil.select_k(np.ones((2, 3, 4), np.float32), 1)
