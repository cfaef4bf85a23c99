"""dask_dppca.planning.theory: population eigenvalues, the estimator's sigma, the utility model
and planner against simulation, and the breakdown bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, spiked_spectrum
from dask_dppca.decomposition.metrics import sin_theta
from dask_dppca.decomposition.reference import breakdown_bound
from dask_dppca.planning.theory import (
    population_eigenvalues,
    sphere_eigenvalues,
    winsor_eigenvalues,
)
from dask_dppca.planning.utility import UtilityModel, plan, release_sigma
from dask_dppca.privacy.mechanisms.noise import (
    SeededSampler,
    add_symmetric_noise,
)


def test_sphere_eigenvalues_sum_to_one_and_equal_spectrum_is_uniform():
    assert np.allclose(sphere_eigenvalues(np.ones(7)), 1 / 7, rtol=1e-9)
    phi = sphere_eigenvalues(spiked_spectrum(30, 3))
    assert phi.sum() == pytest.approx(1.0, rel=1e-8)
    assert np.all(np.diff(phi) <= 1e-15)
    # scale invariant
    assert np.allclose(sphere_eigenvalues(5.0 * spiked_spectrum(30, 3)), phi, rtol=1e-9)


@pytest.mark.parametrize("spectrum", [spiked_spectrum(20, 2), np.array([9.0, 4.0, 1.0, 0.5, 0.1])])
def test_sphere_eigenvalues_match_monte_carlo(spectrum):
    rng = np.random.default_rng(3)
    t = rng.standard_normal((400_000, spectrum.size)) * np.sqrt(spectrum)
    u = t**2 / np.sum(t**2, axis=1, keepdims=True)
    mc, se = u.mean(axis=0), u.std(axis=0) / math.sqrt(len(u))
    assert np.all(np.abs(sphere_eigenvalues(spectrum) - mc) < 5 * se)


def test_winsor_eigenvalues_limits_and_stderr():
    lam = np.array([6.0, 3.0, 1.0, 1.0])
    big, se = winsor_eigenvalues(lam, 1e6, df=None, n_samples=100_000, seed=1)
    assert np.all(se > 0)
    assert np.all(np.abs(big - lam) < 5 * se)  # r -> inf: Cov(T) = Sigma
    small, se_small = winsor_eigenvalues(lam, 1e-6, df=1.0, n_samples=100_000, seed=2)
    assert np.allclose(
        small / 1e-12, sphere_eigenvalues(lam), atol=5 * se_small.max() / 1e-12 + 1e-3
    )
    phi, se0 = population_eigenvalues(lam, "sphere")
    assert np.all(se0 == 0)


@pytest.mark.parametrize(
    "spatial_sign,radius,calibration,eps",
    [
        ("sphere", None, "analytic", 1.0),
        ("sphere", None, "classical", 0.5),
        ("winsor", 3.0, "analytic", 4.0),
        ("winsor", 0.5, "classical", 0.2),
    ],
)
def test_release_sigma_is_the_estimators(spatial_sign, radius, calibration, eps):
    # A private fit (the default sampler, whose lattice slack release_sigma counts too): a
    # seeded fit's test sampler has no lattice and so a sigma smaller by that slack.
    X = np.random.default_rng(0).standard_normal((300, 12))  # test data only
    est = dd.DPPCA(
        2,
        epsilon=eps,
        spatial_sign=spatial_sign,
        radius=radius,
        calibration=calibration,
        design="complete",
        scheduler="synchronous",
    ).fit(X)
    assert (
        release_sigma(
            300, 12, eps, 1e-6, spatial_sign=spatial_sign, radius=radius, calibration=calibration
        )
        == est.privacy_["sigma"]
    )


def _measured_median(spectrum, m, n, eps, df, spatial_sign, radius, reps=20):
    d = spectrum.size
    sigma = (
        0.0
        if math.isinf(eps)
        else release_sigma(n, d, eps, spatial_sign=spatial_sign, radius=radius)
    )
    errs = []
    for s in range(reps):
        X = make_elliptical(n, spectrum, np.eye(d), df=df, seed=100 + s)
        K = dd.kendall_matrix(X, spatial_sign=spatial_sign, radius=radius, scheduler="synchronous")
        if sigma:
            K = add_symmetric_noise(K, sigma, SeededSampler(s))
        V = np.linalg.eigh(K)[1][:, ::-1][:, :m]
        errs.append(sin_theta(V, np.eye(d)[:, :m]))
    return float(np.median(errs))


@pytest.mark.parametrize("df,spatial_sign,radius", [(1.0, "sphere", None), (None, "winsor", 3.0)])
def test_planner_median_agrees_with_simulation_within_factor_two(df, spatial_sign, radius):
    spectrum = spiked_spectrum(10, 2)
    model = UtilityModel(spectrum, 2, spatial_sign, radius, df=df, n_triples=30_000)
    for n, eps in [(400, 1.0), (400, math.inf), (1500, 0.5), (1500, 3.0)]:
        measured = _measured_median(spectrum, 2, n, eps, df, spatial_sign, radius)
        predicted = model.quantile(n, eps, 1e-6, p=0.5)
        assert 0.5 < predicted / measured < 2.0, (n, eps, predicted, measured)


def test_planner_inverts_the_model():
    model = UtilityModel(spiked_spectrum(10, 2), 2, df=1.0, n_triples=20_000)
    n = model.plan_records(0.1, p=0.9, epsilon=1.0)
    assert model.quantile(n, 1.0, p=0.9) <= 0.1 < model.quantile(int(n * 0.97), 1.0, p=0.9)
    eps = model.plan_epsilon(0.1, n=4 * n, p=0.9)
    assert model.quantile(4 * n, eps, p=0.9) <= 0.1 < model.quantile(4 * n, eps * 0.97, p=0.9)
    assert model.plan_epsilon(1e-6, n=100) == math.inf  # sampling error alone is too large
    # the paper's calibration needs more records (sigma ratio ~0.56 when noise dominates)
    n_classical = model.plan_records(0.05, p=0.5, epsilon=0.5, calibration="classical")
    n_analytic = model.plan_records(0.05, p=0.5, epsilon=0.5)
    assert 0.5 < n_analytic / n_classical < 0.7
    out = plan(0.1, spiked_spectrum(10, 2), 2, epsilon=1.0, df=1.0)
    assert out["n"] > 0 and out["gap"] > 0
    with pytest.raises(ValueError):
        plan(0.1, spiked_spectrum(10, 2), 2)


def test_utility_bound_shape():
    model = UtilityModel(spiked_spectrum(10, 2), 2, df=3.0, n_triples=20_000)
    a, b = model.utility_bound(1000, 1.0), model.utility_bound(4000, 1.0)
    assert b["privacy"] == pytest.approx(a["privacy"] / 4, rel=1e-3)  # sigma ~ 1/n
    assert b["sampling"] == pytest.approx(a["sampling"] / 2, rel=0.05)  # ~ 1/sqrt(n)
    assert a["bound"] >= model.quantile(1000, 1.0)  # the closed form is above the median


def test_breakdown_bound():
    rng = np.random.default_rng(0)
    spectrum = spiked_spectrum(8, 2)
    X = rng.standard_normal((400, 8)) * np.sqrt(spectrum)
    out = breakdown_bound(X, 2)
    n, k = out["n"], out["k"]
    p = lambda j: j * (2 * n - j - 1) / (n * (n - 1))  # noqa: E731
    assert p(k) < out["gap"] / 2 <= p(k + 1)
    assert 0 < out["fraction"] < out["limit"] + 1 / n
    # below the bound, k records at 1e6 along the weakest direction cannot flip the subspace
    Y = X.copy()
    Y[:k] = 1e6 * np.eye(8)[-1] + rng.standard_normal((k, 8)) * 1e-3
    V = np.linalg.eigh(dd.kendall_matrix(Y, scheduler="synchronous"))[1][:, ::-1][:, :2]
    assert sin_theta(V, np.eye(8)[:, :2]) < 0.99
    w = breakdown_bound(X, 2, spatial_sign="winsor", radius=1.0)
    assert w["G"] == 1.0 and w["k"] >= 0
