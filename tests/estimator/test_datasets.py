"""Synthetic generators: the truth they claim is the truth the estimators target."""

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.datasets import make_skewed, random_directions, spiked_spectrum
from dask_dppca.decomposition.metrics import sin_theta


def _top(matrix, m):
    return np.linalg.eigh(matrix)[1][:, ::-1][:, :m]


@pytest.mark.parametrize("marginal", ["lognormal", "pareto"])
def test_skewed_components_pairwise_kernel_targets_the_directions(marginal):
    # seeds are for the test only
    d, m = 8, 2
    Q = random_directions(d, 3)
    X = make_skewed(4000, spiked_spectrum(d, m), Q, marginal=marginal, seed=4)
    pairwise = sin_theta(_top(dd.kendall_matrix(X, scheduler="synchronous"), m), Q[:, :m])
    # the one-sample sign covariance about the true mean (0) is biased on skewed data
    s = X / np.linalg.norm(X, axis=1, keepdims=True)
    one_sample = sin_theta(_top(s.T @ s, m), Q[:, :m])
    assert pairwise < 0.06
    assert one_sample > 2 * pairwise


def test_skewed_lognormal_is_standardised_and_centred():
    X = make_skewed(200_000, spiked_spectrum(4, 1), np.eye(4), marginal="lognormal", seed=5)
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=0.05)
    np.testing.assert_allclose(np.cov(X.T).diagonal(), spiked_spectrum(4, 1), rtol=0.1)


@pytest.mark.parametrize(
    "kwargs,name", [(dict(marginal="cauchy"), "marginal"), (dict(pareto_shape=1.0), "pareto_shape")]
)
def test_skewed_bad_parameters_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        make_skewed(10, spiked_spectrum(3, 1), np.eye(3), seed=0, **kwargs)
