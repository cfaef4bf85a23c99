"""Sensitivity is a correctness property: ||K_hat(S) - K_hat(S')||_F <= the reported bound
for every pair of replace-one neighbours, and the bound is attained (tight, not slack)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dask_dppca as dd
from dask_dppca.design import CompleteDesign
from dask_dppca.kernel.spatial_sign import MAX_BOUND, MIN_BOUND, SpatialSign, custom, sphere, winsor

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


def _reported_sensitivity(n, d, **params):
    est = dd.DPPCA(n_components=1, random_state=0, scheduler="synchronous", **params)
    rng = np.random.default_rng(0)  # test data only
    return est.fit(rng.standard_normal((n, d))).privacy_["sensitivity"]


def _distance(s, s_prime, **params):
    k = dd.kendall_matrix(s, scheduler="synchronous", **params)
    k_prime = dd.kendall_matrix(s_prime, scheduler="synchronous", **params)
    return np.linalg.norm(k - k_prime)


def _adversarial_pairs(n, d, rng, unit=1.0):
    """Neighbours that push ||K(S) - K(S')||_F to its supremum, in several guises.

    ``unit`` is the scale at which g saturates (a winsor radius): the others cluster
    well inside it and the changed record moves far outside it.
    """
    cluster = 1e-6 * unit * rng.standard_normal((n - 1, d))
    far = np.zeros(d)
    cases = {}
    for name, others, scale in [
        ("clustered", cluster, 1e6 * unit),
        ("duplicates", np.zeros((n - 1, d)), 1e6 * unit),
        ("huge", cluster, 1e300),
        ("offset", cluster + 1e8 * unit, 1e12 * unit),
    ]:
        a, b = far.copy(), far.copy()
        a[0], b[1] = scale, scale  # the changed record moves far away, orthogonally
        cases[name] = (np.vstack([others, a]), np.vstack([others, b]))
    return cases


@pytest.mark.parametrize("spatial_sign, radius", [("sphere", None), ("winsor", 0.7)])
def test_adversarial_neighbours_reach_the_bound_and_never_exceed_it(spatial_sign, radius):
    n, d = 40, 3
    bound = _reported_sensitivity(n, d, spatial_sign=spatial_sign, radius=radius)
    g2 = 1.0 if spatial_sign == "sphere" else radius**2
    assert math.isclose(bound, 2 * math.sqrt(2) * g2 / n, rel_tol=1e-6)
    rng = np.random.default_rng(1)  # test data only
    for name, (s, s_prime) in _adversarial_pairs(n, d, rng).items():
        gap = _distance(s, s_prime, spatial_sign=spatial_sign, radius=radius)
        assert gap <= bound, name
        assert gap >= 0.95 * bound, name


def _hostile_rows(d):
    finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)
    special = st.sampled_from([0.0, 1.0, -1.0, 1e-300, 5e-324, 1e300, -1e300, np.nan, np.inf])
    return hnp.arrays(np.float64, (1, d), elements=st.one_of(finite, special))


@settings(max_examples=60, deadline=None)
@given(
    base=hnp.arrays(
        np.float64,
        st.tuples(st.integers(3, 12), st.just(3)),
        elements=st.one_of(st.floats(-10, 10), st.sampled_from([0.0, 1e300, -1e-200, 1e8])),
    ),
    replacement=_hostile_rows(3),
    index=st.integers(0, 11),
    spatial_sign=st.sampled_from(["sphere", "winsor"]),
)
def test_random_neighbours_stay_within_the_bound(base, replacement, index, spatial_sign):
    n = base.shape[0]
    radius = 1.3 if spatial_sign == "winsor" else None
    s_prime = base.copy()
    s_prime[index % n] = replacement
    plan = CompleteDesign().plan((n,), base.shape[1])
    g2 = 1.0 if spatial_sign == "sphere" else radius**2
    bound = plan.sensitivity(math.sqrt(g2))
    gap = _distance(base, s_prime, spatial_sign=spatial_sign, radius=radius)
    assert gap <= bound * (1 + 1e-9)


def test_a_broken_bound_is_caught():
    """The adversarial check fails a sensitivity that forgot the sqrt(2) (G^2 * 2 / n)."""
    n, d = 40, 3
    broken = 2.0 / n
    rng = np.random.default_rng(2)  # test data only
    s, s_prime = _adversarial_pairs(n, d, rng)["clustered"]
    assert _distance(s, s_prime) > broken


# ---------------------------------------------------------------------------------------
# Every spatial_sign that can be built keeps its reported sensitivity (audit items a, c)
# ---------------------------------------------------------------------------------------


def _smooth_xi(s):
    return 1.5 * -np.expm1(-np.asarray(s, dtype=float))


CONSTRUCTIBLE = {  # name -> (spatial_sign, unit: the scale at which g saturates)
    "sphere": (sphere(), 1.0),
    "winsor-min-radius": (winsor(MIN_BOUND), MIN_BOUND),
    "winsor-1.13e-37": (winsor(1.13e-37), 1.13e-37),
    "winsor-0.7": (winsor(0.7), 0.7),
    "winsor-max-radius": (winsor(MAX_BOUND), MAX_BOUND),
    "winsor-built-directly": (SpatialSign("winsor", bound=3.0, radius=3.0), 3.0),
    "custom": (custom(_smooth_xi, 1.5), 1.0),
}


def _gaps_and_reported(spatial_sign, unit, n=40, d=3):
    """||K(S) - K(S')||_F for adversarial neighbours at the spatial_sign's scale, and the
    sensitivity a fit reports, all divided by G^2 (K's entries at G = 1e100 would
    overflow when squared)."""
    g2 = spatial_sign.bound**2
    est = dd.DPPCA(
        n_components=1, spatial_sign=spatial_sign, random_state=0, scheduler="synchronous"
    )
    reported = est.fit(np.random.default_rng(0).standard_normal((n, d))).privacy_["sensitivity"]
    gaps = []
    for s, s_prime in _adversarial_pairs(n, d, np.random.default_rng(1), unit).values():
        k = dd.kendall_matrix(s, spatial_sign, scheduler="synchronous")
        k_prime = dd.kendall_matrix(s_prime, spatial_sign, scheduler="synchronous")
        gaps.append(np.linalg.norm((k - k_prime) / g2))
    return np.array(gaps), reported / g2


@pytest.mark.parametrize("name", list(CONSTRUCTIBLE))
def test_every_constructible_transform_keeps_its_reported_sensitivity(name):
    gaps, reported = _gaps_and_reported(*CONSTRUCTIBLE[name])
    assert np.all(np.isfinite(gaps)) and gaps.max() <= reported
    assert gaps.max() >= 0.95 * reported  # and the neighbours reach it: the check is tight


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the identity overflows at 1e300
def test_a_wrong_bound_is_caught_by_the_neighbours():
    """The check above has teeth: a SpatialSign that escaped its constructor's check
    (audit item a: SpatialSign("identity", bound=1.0)) reports a sensitivity the
    adversarial neighbours exceed many times over."""
    broken = object.__new__(SpatialSign)
    for field, value in {
        "name": "identity",
        "bound": 1.0,
        "radius": None,
        "xi_function": None,
    }.items():
        object.__setattr__(broken, field, value)
    gaps, reported = _gaps_and_reported(broken, 1.0)
    assert np.nanmax(gaps) > 1e3 * reported


def _complete_plan(n, d):
    """The complete design's counts for n records, over a few public blocks (only the
    block sizes, block pairs and tiles enter the rounding bound)."""
    from dask_dppca.design import DesignPlan

    return DesignPlan(
        block_sizes=(16384, 16384),
        block_pairs=((0, 0), (0, 1), (1, 1)),
        n_pairs=n * (n - 1) // 2,
        max_degree=n - 1,
        n_features=d,
        tile_rows=512,
    )


@pytest.mark.parametrize("n", [10**4, 10**8, 2 * 10**9, 5 * 10**9, 10**12])
def test_the_classical_calibration_covers_the_rounding_at_every_n(n):
    """Both calibrations must bound the computed K_hat's sensitivity: the tight one plus
    the kernel's rounding room.  The paper's 4 G^2 / n exceeds the tight 2 sqrt(2) G^2 / n
    by 1.17 G^2 / n, more than the rounding room only while n is below about 2e9; beyond,
    the classical release must add the rest (it added nothing, whatever n)."""
    from dask_dppca.privacy import PrivacyTarget, ReleaseMechanism
    from dask_dppca.privacy.mechanisms.contract import make_sampler

    plan, g = _complete_plan(n, 8), sphere()
    mechanism = ReleaseMechanism.plan_release(
        CompleteDesign(),
        plan,
        g,
        PrivacyTarget.of(0.5, 1e-6, "classical"),
        make_sampler("gaussian", n_entries=36),
    )
    needed = plan.sensitivity(g.bound) + 2.0 * g.bound**2 * plan.rounding_error()
    assert mechanism.sensitivity - mechanism.sampler_slack >= needed
    if plan.paper_sensitivity(g.bound) >= needed:  # covered: the paper's value, unchanged
        assert mechanism.rounding_slack == 0.0
        assert mechanism.design_sensitivity == plan.paper_sensitivity(g.bound)
    else:
        assert n >= 2 * 10**9 and mechanism.rounding_slack > 0.0
