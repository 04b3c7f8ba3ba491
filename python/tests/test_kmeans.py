"""simil.kmeans: shapes, a falling objective, determinism, and recovered clusters."""
import numpy as np
import pytest

import simil
from helpers import DEVICES


def blobs(seed, per_blob, dim, centers):
    """Well separated Gaussian blobs: per_blob points around each center."""
    rng = np.random.default_rng(seed)
    points = [c + 0.05 * rng.standard_normal((per_blob, dim)) for c in centers]
    labels = np.repeat(np.arange(len(centers)), per_blob)
    order = rng.permutation(len(labels))
    return np.vstack(points)[order].astype(np.float32), labels[order]


def corners(dim, k):
    return [np.eye(dim)[i % dim] * (3 + i // dim) for i in range(k)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("init", ["random", "k-means++"])
def test_shapes_and_objective(device, init):
    seed, n, dim, k, iterations = 31, 3000, 12, 16, 15
    x = np.random.default_rng(seed).random((n, dim), dtype=np.float32)
    centroids, assignments, objective = simil.kmeans(x, k, iterations=iterations, init=init,
                                                     seed=seed, device=device)
    context = f"seed={seed} n={n} dim={dim} k={k} init={init} device={device}"
    assert centroids.shape == (k, dim) and centroids.dtype == np.float32, context
    assert assignments.shape == (n,) and assignments.dtype == np.int64, context
    assert objective.shape == (iterations,) and objective.dtype == np.float64, context
    assert assignments.min() >= 0 and assignments.max() < k, context
    assert np.all(np.diff(objective) <= 1e-6 * objective[:-1]), f"{objective}, {context}"
    assert objective[-1] < objective[0], context
    # The objective of the last iteration is the sum of squared distances to
    # the centroids the points were assigned to.
    d = ((x.astype(np.float64) - centroids[assignments]) ** 2).sum()
    assert d <= objective[-1] * (1 + 1e-3), context


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_for_a_seed(device):
    x = np.random.default_rng(32).random((2000, 8), dtype=np.float32)
    a = simil.kmeans(x, 10, seed=5, device=device)
    b = simil.kmeans(x, 10, seed=5, device=device)
    for u, v in zip(a, b):
        assert np.array_equal(u, v), f"seed=5 device={device}"
    c = simil.kmeans(x, 10, seed=6, device=device)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("device", DEVICES)
def test_recovers_separated_blobs(device):
    seed, dim, k = 33, 6, 5
    x, labels = blobs(seed, 300, dim, corners(dim, k))
    centroids, assignments, objective = simil.kmeans(x, k, init="k-means++", seed=seed,
                                                     max_points_per_centroid=None,
                                                     device=device)
    context = f"seed={seed} dim={dim} k={k} device={device}"
    # One cluster per blob: the labels are a permutation of the blobs.
    pairs = set(zip(labels.tolist(), assignments.tolist()))
    assert len(pairs) == k, f"{sorted(pairs)}, {context}"
    # The assignments are the nearest centroids.
    d = ((x[:, None, :].astype(np.float64) - centroids[None]) ** 2).sum(axis=2)
    assert np.array_equal(d.argmin(axis=1), assignments), context
    expected = sum(((x[labels == b] - x[labels == b].mean(axis=0)) ** 2).sum() for b in range(k))
    np.testing.assert_allclose(objective[-1], expected, rtol=1e-3, err_msg=context)


def test_spherical_and_subsampling():
    x = np.random.default_rng(34).standard_normal((4000, 10)).astype(np.float32)
    centroids, assignments, _ = simil.kmeans(x, 8, spherical=True, device="cpu")
    np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1.0, rtol=1e-4)
    centroids, assignments, objective = simil.kmeans(x, 8, max_points_per_centroid=20,
                                                     iterations=5, device="cpu")
    assert assignments.shape == (4000,) and objective.shape == (5,)
    assert assignments.min() >= 0 and assignments.max() < 8


def test_errors():
    x = np.zeros((5, 3), np.float32)
    with pytest.raises(simil.InvalidArgumentError):
        simil.kmeans(x, 6)  # more clusters than points
    with pytest.raises(simil.InvalidArgumentError):
        simil.kmeans(x, 0)
    with pytest.raises(simil.InvalidArgumentError, match="init"):
        simil.kmeans(x, 2, init="farthest")
    with pytest.raises(simil.InvalidArgumentError, match="2-d"):
        simil.kmeans(np.zeros(5), 2)
