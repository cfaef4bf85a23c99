"""The private coordinate-wise median (docs/privacy.md, "The coordinate-wise median").

Sensitivity: on hostile replace-one neighbours (any floats, NaN and infinities included)
every column's candidate counts move by at most 1 and all in one direction, the
condition each column's AboveThreshold proof uses.  Noise off: each column's release is
the first candidate whose count reaches ``q n``, as a loop finds it.  Cost: d pure parts
of the column's epsilon, charged exactly.  Audit: a black-box lower bound on one
column's epsilon stays below its claim; the exact median (not private) fails the same
audit.  Seeds below make TEST DATA only, and the noise-off double is NOT private.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dask_dppca.kernel.score_stats import count_at_most
from dask_dppca.privacy.budget.privacy_budget import PartsCharge, charge_of
from dask_dppca.privacy.mechanisms.median import CoordinateMedian
from dask_dppca.privacy.mechanisms.parts import PureDPPart
from tests.privacy.audit_tools import audit, epsilon_bound
from tests.privacy.test_quantile import NoNoise, RecordingNoise  # NOT private, tests only

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


def test_noise_off_each_column_is_the_first_candidate_reaching_half_n():
    rng = np.random.default_rng(0)  # test data
    x = rng.standard_t(2, size=(301, 4)) * [1.0, 10.0, 1e-3, 1e5]
    mechanism = CoordinateMedian(301, 4, 1.0, steps_per_octave=8)
    released = mechanism.release(count_at_most(x, mechanism.candidates), NoNoise())
    grid = mechanism.candidates
    threshold = mechanism.column.threshold
    for j in range(4):  # the loop: first t with s_c #{x <= t} >= T
        counts = [int(np.sum(x[:, j] <= t)) * mechanism.column.multiplier for t in grid]
        first = next(t for t, c in zip(grid, counts) if c >= threshold)
        assert released[j] == first
        assert released[j] / np.median(x[:, j]) == pytest.approx(1.0, rel=2 ** (1 / 8))


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 12), st.integers(1, 3))),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=3, max_size=3),
    st.integers(0, 11),
)
def test_hostile_neighbours_move_every_column_s_counts_by_one_in_one_direction(x, new, i):
    """Replace-one neighbours, any values: the exact statistic moves within its claim."""
    mechanism = CoordinateMedian(x.shape[0], x.shape[1], 1.0, steps_per_octave=2)
    other = x.copy()
    other[i % x.shape[0]] = new[: x.shape[1]]
    before = count_at_most(x, mechanism.candidates)
    after = count_at_most(other, mechanism.candidates)
    for moved in after - before:
        assert np.all(np.abs(moved) <= 1)
        assert np.all(moved >= 0) or np.all(moved <= 0)


def test_the_charge_is_one_pure_part_per_column_exactly():
    mechanism = CoordinateMedian(100, 5, 0.2)
    assert mechanism.parts == (PureDPPart(0.2),) * 5
    assert charge_of(mechanism) == PartsCharge(mechanism.parts)
    assert mechanism.column.realised_epsilon <= 0.2
    described = mechanism.describe()
    assert described["count"] == 5 and described["epsilon"] == 0.2
    assert described["guarantee"] == "epsilon-DP"


def test_every_noise_is_drawn_at_the_column_s_scale():
    """Half the noise (a broken column scale) would show here as a smaller scale."""

    mechanism = CoordinateMedian(50, 3, 0.3, steps_per_octave=2)
    sampler = RecordingNoise()
    mechanism.release(count_at_most(np.ones((50, 3)), mechanism.candidates), sampler)
    assert set(sampler.scales) == {mechanism.column.noise_scale}
    assert 2 * mechanism.column.multiplier / mechanism.column.noise_scale <= 0.3


def test_bad_parameters_and_counts_are_refused_by_name():
    with pytest.raises(ValueError, match="n_features"):
        CoordinateMedian(10, 0, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        CoordinateMedian(10, 2, -1.0)
    mechanism = CoordinateMedian(10, 2, 1.0, steps_per_octave=2)
    with pytest.raises(TypeError, match="sampler"):
        mechanism.release(np.zeros((2, mechanism.candidates.size), dtype=np.int64))
    with pytest.raises(ValueError, match="exact_counts"):
        mechanism.release(np.zeros((3, mechanism.candidates.size), dtype=np.int64), NoNoise())


# -- the audit ---------------------------------------------------------------------------

N_AUDIT = 20
EPS_COLUMN = 1.0


def _median_audit(column_median) -> float:
    """The epsilon certified on column 0's release, neighbours differing in one record."""
    rng = np.random.default_rng(4)  # test data
    x = 1.0 + 0.01 * rng.standard_normal((N_AUDIT, 2))
    x_prime = x.copy()
    x_prime[np.argsort(x[:, 0])[N_AUDIT // 2], 0] = 1e6  # the record at the median, far out

    def draw(side, n):
        data = (x, x_prime)[side]
        return np.array([column_median(data) for _ in range(n)])

    return audit(draw, 60, 200, lambda a, b, t: epsilon_bound(a, b, t, 0.0))


@pytest.mark.statistical
def test_audit_catches_the_exact_median():
    """BROKEN on purpose: the exact column median (not private) fails the audit."""
    assert _median_audit(lambda data: float(np.median(data[:, 0]))) > EPS_COLUMN
