"""The two-stage Analyze Gauss baseline of benchmarks/experiments.py spends exactly its budget.

The comparison in docs/results.md is only fair if the baseline is as private as
g-DPPCA: its centring rounds and its second-moment release must compose to the same
(epsilon, delta).  Fixed seeds below are for the tests only.
"""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from dask_dppca.datasets import make_elliptical, spiked_spectrum
from dask_dppca.privacy.budget.privacy_budget import (
    BudgetExceededError,
    GaussianCharge,
    PrivacyBudget,
)

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments.py"
spec = importlib.util.spec_from_file_location("experiments", SCRIPT)
experiments = importlib.util.module_from_spec(spec)
spec.loader.exec_module(experiments)


def _two_stage_releases(X, eps, share, c, seed=0):
    """The script's own two stages: the centre, and every (sensitivity, sigma) released."""
    centre, mu_rest, releases = experiments.private_centre(X, eps, share, seed)
    _, sigma = experiments.centred_second_moment(X, centre, c, mu_rest)
    # the stage-two sensitivity, from docs/method.md, section 4:
    # ||x x^T - y y^T||_F <= sqrt2 c^2 for norms <= c
    return centre, releases + [(math.sqrt(2.0) * c * c / X.shape[0], sigma)]


@pytest.mark.parametrize("eps,share", [(0.1, 0.1), (1.0, 0.25), (10.0, 0.1)])
def test_two_stage_analyze_gauss_composes_to_its_target(eps, share):
    X = make_elliptical(500, spiked_spectrum(5, 1), np.eye(5), df=1.0, seed=1)
    _, releases = _two_stage_releases(X, eps, share, c=2.0)
    assert len(releases) == len(experiments.CENTRE_RADII) + 1
    within = PrivacyBudget(eps * (1 + 1e-6), experiments.DELTA)
    for sensitivity, sigma in releases:
        within.spend(GaussianCharge(sensitivity, sigma))
    tighter = PrivacyBudget(eps * 0.999, experiments.DELTA)
    with pytest.raises(BudgetExceededError):
        for sensitivity, sigma in releases:
            tighter.spend(GaussianCharge(sensitivity, sigma))


def test_private_centre_finds_an_unknown_location_of_heavy_tailed_data():
    d = 10
    location = np.full(d, experiments.SHIFT / math.sqrt(d))
    X = make_elliptical(20000, spiked_spectrum(d, 2), np.eye(d), df=1.0, seed=2) + location
    centre, _ = _two_stage_releases(X, eps=1e3, share=0.25, c=2.0)
    # t_1 has no mean; the clipped-mean fixed point is a symmetric (Huber-type) location
    assert np.linalg.norm(centre - location) < 0.15
    naive = X.mean(axis=0)
    assert np.linalg.norm(naive - location) > np.linalg.norm(centre - location)
