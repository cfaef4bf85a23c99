"""Robustness, measured: breakdown and gross contamination (docs/method.md, section 6).

Small instances of benchmarks/bench_breakdown.py's claims:
* covariance PCA breaks down with one adversarial record;
* g-DPPCA's subspace (sphere and winsor) holds at every contamination below the bound
  G^2 p < gap/2 (p = k(2n-k-1)/(n(n-1))): the perturbation of K_hat is at most G^2 p in
  operator norm, and the subspace moves by at most the Davis-Kahan value
  G^2 p / (gap - G^2 p), checked at every k;
* 2% of the records at 1e300 along the weakest direction barely move K_hat's subspace.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

M = 2
BREAKDOWN = 0.5
RADIUS = 3.0
METHODS = {
    "sphere": ({"spatial_sign": "sphere"}, 1.0),
    "winsor": ({"spatial_sign": "winsor", "radius": RADIUS}, RADIUS),
}


def _data(n, d, seed=1):
    directions = random_directions(d, seed)
    x = make_elliptical(n, spiked_spectrum(d, M, 10.0), directions, df=None, seed=seed + 1)
    return x, directions


def _pair_fraction(k, n):
    return k * (2 * n - k - 1) / (n * (n - 1))


def _top(matrix, m=M):
    values, vectors = np.linalg.eigh(matrix)
    return vectors[:, np.argsort(values)[::-1][:m]]


def _gap(matrix, m=M):
    values = np.sort(np.linalg.eigvalsh(matrix))[::-1]
    return values[m - 1] - values[m]


def _adversary(kind, k, directions, seed=0):
    rng = np.random.default_rng(seed)  # test data only
    d = directions.shape[0]
    if kind == "far_weakest":
        return 1e4 * directions[:, -1] + rng.standard_normal((k, d))
    if kind == "far_random":
        z = rng.standard_normal((k, d))
        return 1e4 * z / np.linalg.norm(z, axis=1, keepdims=True)
    return np.tile(10.0 * directions[:, -1], (k, 1))  # near_weakest: identical copies


def _k_hat(x, **kwargs):
    return dd.kendall_matrix(x, scheduler="synchronous", **kwargs)


@pytest.mark.parametrize("kind", ["far_weakest", "far_random"])
def test_covariance_breaks_down_with_one_record(kind):
    x, directions = _data(200, 5)
    truth = directions[:, :M]
    clean = _top(_k_hat(x, spatial_sign="identity"))
    assert dd.sin_theta(clean, truth) < 0.1
    y = x.copy()
    y[:1] = _adversary(kind, 1, directions)
    broken = _top(_k_hat(y, spatial_sign="identity"))
    assert dd.sin_theta(broken, clean) > BREAKDOWN
    # ... while one record moves g-DPPCA's K_hat by at most G^2 * 2/n
    for kwargs, bound_g in METHODS.values():
        before, after = _k_hat(x, **kwargs), _k_hat(y, **kwargs)
        assert np.linalg.norm(after - before, 2) <= bound_g**2 * 2 / len(x) * (1 + 1e-10)
        assert dd.sin_theta(_top(after), _top(before)) < 0.05


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("kind", ["far_weakest", "far_random", "near_weakest"])
def test_g_dppca_holds_at_every_fraction_below_the_bound(method, kind):
    n, d = 200, 5
    x, directions = _data(n, d)
    kwargs, bound_g = METHODS[method]
    clean = _k_hat(x, **kwargs)
    gap, basis = _gap(clean), _top(clean)
    k_bound = max(k for k in range(n + 1) if bound_g**2 * _pair_fraction(k, n) < gap / 2)
    assert k_bound >= 0.03 * n, f"bound too small to test anything: {k_bound}"
    adversary = _adversary(kind, k_bound, directions)
    for k in range(1, k_bound + 1):  # every fraction up to the bound
        y = x.copy()
        y[:k] = adversary[:k]
        k_hat = _k_hat(y, **kwargs)
        shift = bound_g**2 * _pair_fraction(k, n)
        assert np.linalg.norm(k_hat - clean, 2) <= shift * (1 + 1e-10)  # each pair <= G^2
        error = dd.sin_theta(_top(k_hat), basis)
        assert error <= shift / (gap - shift) + 1e-10  # Weyl + Davis-Kahan
        assert error < BREAKDOWN, f"{method}/{kind}: broke at k = {k} <= bound {k_bound}"


def test_private_release_holds_below_the_bound():
    """The release at a moderate epsilon, at the largest contamination the bound allows."""
    n, d = 400, 5
    x, directions = _data(n, d)
    clean = _k_hat(x)
    gap = _gap(clean)
    k = max(k for k in range(n + 1) if _pair_fraction(k, n) < gap / 2)
    y = x.copy()
    y[:k] = _adversary("far_weakest", k, directions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        est = dd.DPPCA(
            n_components=M, epsilon=2.0, scheduler="synchronous", random_state=3, design="complete"
        ).fit(y)
    assert dd.sin_theta(est.components_.T, directions[:, :M]) < BREAKDOWN


@pytest.mark.parametrize("method", list(METHODS))
def test_two_percent_at_1e300_along_the_weakest_direction(method):
    n, d = 600, 10
    x, directions = _data(n, d, seed=5)
    kwargs, _ = METHODS[method]
    clean = _top(_k_hat(x, **kwargs))
    y = x.copy()
    rows = np.random.default_rng(6).choice(n, size=int(0.02 * n), replace=False)  # test data only
    y[rows] = (
        1e300 * directions[:, -1] * np.random.default_rng(7).uniform(1, 1.5, size=(len(rows), 1))
    )
    k_hat = _k_hat(y, **kwargs)
    assert np.all(np.isfinite(k_hat))
    assert dd.sin_theta(_top(k_hat), clean) < 0.1
    assert dd.sin_theta(_top(k_hat), directions[:, :M]) < 0.15
    # the far records still count, in their direction: K_hat's weakest-direction
    # eigenvalue grows by about G^2 * 2 * 2% over the clean one
    weakest = directions[:, -1]
    assert weakest @ k_hat @ weakest > weakest @ _k_hat(x, **kwargs) @ weakest
    cov = _top(
        _k_hat(
            np.where(np.isin(np.arange(n), rows)[:, None], 1e4 * weakest, x),
            spatial_sign="identity",
        )
    )
    assert dd.sin_theta(cov, clean) > BREAKDOWN  # covariance PCA does not survive this
