"""fit and theory cannot drift: the same sigma for every public configuration.

``planning.release_sigma`` plans without data; ``DPPCA.fit`` plans from its input.  Both
build one ReleaseMechanism from the design plan, so for any (n, d, epsilon, delta,
spatial_sign, calibration) their sigma must be bitwise equal, including the block and
tile sizes behind the rounding slack and the sampler chosen by d.  The fits here do not
compute K_hat: the release is replaced by a stub that records the mechanism, so n can
reach 10^6 at no cost (the input is a zero-stride view, no memory).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dask_dppca as dd
from dask_dppca import design as design_module
from dask_dppca.compute import LocalScheduler
from dask_dppca.decomposition import estimator
from dask_dppca.planning.utility import release_sigma
from dask_dppca.privacy import PrivateRelease


@pytest.fixture
def planned(monkeypatch):
    """Replace the release by a stub; collect the mechanisms fit planned."""
    mechanisms = []

    def stub(self, mechanism, lane_sums, n_components, fit_id, **kwargs):
        mechanisms.append(mechanism)
        d = mechanism.plan.n_features
        return PrivateRelease(np.zeros(d), np.eye(d)[:n_components]), "stub"

    monkeypatch.setattr(LocalScheduler, "release", stub)
    return mechanisms


configurations = st.fixed_dictionaries(
    {
        "n": st.integers(2, 1_000_000),
        "d": st.sampled_from([1, 2, 5, 31, 64, 153, 154, 155, 300]),
        "epsilon": st.floats(0.01, 10.0),
        "delta": st.sampled_from([1e-3, 1e-6, 1e-9]),
        "spatial_sign": st.sampled_from([("sphere", None), ("winsor", 0.5), ("winsor", 7.0)]),
        "calibration": st.sampled_from(["analytic", "classical"]),
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=configurations)
def test_fit_and_release_sigma_agree_bitwise(planned, config):
    n, d = config["n"], config["d"]
    epsilon = (
        min(config["epsilon"], 0.99) if config["calibration"] == "classical" else config["epsilon"]
    )
    spatial_sign, radius = config["spatial_sign"]
    records = np.broadcast_to(0.0, (n, d))
    est = dd.DPPCA(
        1,
        epsilon=epsilon,
        delta=config["delta"],
        spatial_sign=spatial_sign,
        radius=radius,
        calibration=config["calibration"],
        design="complete",
        scheduler="threads",
    ).fit(records)
    want = release_sigma(
        n,
        d,
        epsilon,
        config["delta"],
        spatial_sign=spatial_sign,
        radius=radius,
        calibration=config["calibration"],
    )
    assert est.privacy_["sigma"] == want
    assert planned[-1].sigma == want and planned[-1].plan.n_samples == n


def test_the_comparison_sees_a_drift(planned, monkeypatch):
    """A fit that planned its blocks differently (here: from 1000-row chunks it took as
    imposed by the input) is caught."""
    n, d = 50_000, 8
    real = design_module.plan_blocks
    monkeypatch.setattr(
        estimator,
        "plan_blocks",
        lambda n, d, row_chunks, design, threads: real(
            n, d, (1000,) * (n // 1000), design, threads
        ),
    )
    est = dd.DPPCA(1, design="complete", scheduler="threads").fit(np.broadcast_to(0.0, (n, d)))
    assert est.privacy_["sigma"] != release_sigma(n, d, 1.0, 1e-6)
