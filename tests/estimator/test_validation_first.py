"""Every bad parameter is refused before anything starts: no cluster, no data read."""

from __future__ import annotations

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca import cluster, estimator

BAD = [
    ({"calibration": "loose"}, "calibration"),
    ({"calibration": None}, "calibration"),
    ({"design": "partial"}, "design"),
    ({"design": 3}, "design"),
    ({"n_components": 0}, "n_components"),
    ({"n_components": True}, "n_components"),
    ({"epsilon": 0}, "epsilon"),
    ({"epsilon": True}, "epsilon"),
    ({"delta": 1.5}, "delta"),
    ({"transform": "banana"}, "transform"),
    ({"transform": "identity"}, "transform"),
    ({"transform": "winsor"}, "radius"),
    ({"radius": 1.0}, "radius"),
    ({"scheduler": "nowhere"}, "scheduler"),
    ({"scheduler": 8786}, "scheduler"),
    ({"trusted_worker": ""}, "trusted_worker"),
    ({"require_trusted": "yes"}, "require_trusted"),
    ({"progress": 1}, "progress"),
    ({"random_state": -1}, "random_state"),
    ({"random_state": 1.5}, "random_state"),
]


@pytest.fixture
def nothing_may_start(monkeypatch):
    """Fail loudly if fit opens its input or asks for a compute target."""
    started = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise AssertionError("fit started something before validating its parameters")

    monkeypatch.setattr(cluster, "compute_target", refuse)
    monkeypatch.setattr(cluster, "embedded_client", refuse)
    monkeypatch.setattr(estimator, "as_dask_array", refuse)
    return started


@pytest.mark.parametrize("params, name", BAD, ids=[f"{n}-{p}" for p, n in BAD])
def test_bad_parameter_is_refused_before_any_cluster_or_read(params, name, nothing_may_start):
    with pytest.raises(ValueError, match=f"^{name}: "):
        dd.DPPCA(**params).fit(np.eye(5))
    assert nothing_may_start == []


def test_the_guard_itself_would_catch_a_late_check(nothing_may_start):
    """With valid parameters fit reaches the input: the fixture above can fail."""
    with pytest.raises(AssertionError, match="started something"):
        dd.DPPCA(2).fit(np.eye(5))
    assert len(nothing_may_start) == 1


def test_every_parameter_has_a_constraint():
    names = set(dd.DPPCA().get_params())
    checked_elsewhere = {"epsilon", "delta", "transform", "radius"}  # privacy + transform checks
    assert names == set(estimator.PARAMETER_CONSTRAINTS) | checked_elsewhere
