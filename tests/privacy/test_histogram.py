"""The score map's histograms, groups and synthetic points (docs/privacy.md, "Score maps").

Sensitivity: on hostile replace-one neighbours (a record moved to infinity, to NaN, out of
the frame, into another group, to a label outside the public domain) the count matrix
moves by at most sqrt 2 in l2 and 2 in l1, and that is attained.  Noise off: bin
assignment and the out-of-frame treatment against a loop that follows the R package
``dppca`` (right-closed bins, lowest edge included, x fastest, clamping).  Audits: the
additive histogram's certified mu stays below its claim and half the noise fails; the
sparse histogram's certified epsilon stays below its claim and a threshold of one count
fails.  Seeds make TEST DATA only; the noise-off doubles are NOT private.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dask_dppca.kernel.score_stats import bin_index, group_codes, histogram_counts
from dask_dppca.privacy.mechanisms.calibration import gaussian_dp_epsilon
from dask_dppca.privacy.mechanisms.frame import Frame
from dask_dppca.privacy.mechanisms.histogram import (
    AdditiveHistogram,
    GroupCounts,
    NoisyHistogram,
    SparseHistogram,
    allocate,
    synthetic_points,
)
from dask_dppca.privacy.mechanisms.laplace import DiscreteLaplaceSampler, IntegerNoise
from dask_dppca.privacy.mechanisms.noise import NoiseSampler, OpenDPSampler
from dask_dppca.privacy.mechanisms.parts import ApproxDPPart, GaussianPart, PureDPPart
from dask_dppca.privacy.mechanisms.score_map import ScoreMap, ScoreMapMechanism
from tests.privacy.audit_tools import audit, epsilon_bound, mu_bound

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)

SQRT2 = math.sqrt(2.0)


class NoIntegerNoise(IntegerNoise):
    """Zero noise (NOT private, tests only)."""

    is_private = False

    def _draw(self, scale, size):
        return np.zeros(size, dtype=np.int64)


class NoGaussian(NoiseSampler):
    """Zero noise (NOT private, tests only)."""

    is_private = False

    def _add_noise(self, values, sigma):
        return values.copy()


# -- bin assignment: parity with the R package's deterministic part ----------------------


def r_cell(v: float, edges: list[float], clamp: bool) -> int:
    """The R package's rule, one value at a time: (e_{j-1}, e_j], lowest edge included;
    outside: the nearest edge bin when clamping, else -1."""
    m = len(edges) - 1
    if math.isnan(v):
        return -1
    if v < edges[0] or v > edges[-1]:
        return (0 if v < edges[0] else m - 1) if clamp else -1
    if v == edges[0]:
        return 0
    return next(j for j in range(m) if edges[j] < v <= edges[j + 1])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.floats(-3, 3), st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, math.nan])),
            st.one_of(st.floats(-3, 3), st.sampled_from([-1.0, 0.5, 1.0, math.inf])),
        ),
        min_size=1,
        max_size=20,
    ),
    st.booleans(),
)
def test_bin_assignment_matches_the_r_rule(points, clamp):
    x_edges = [-2.0, -1.0, 0.0, 1.0, 2.0]  # m_x = 4
    y_edges = [-1.0, 0.0, 1.0]  # m_y = 2
    cells = bin_index(np.array(points), x_edges, y_edges, clamp=clamp)
    for (x, y), cell in zip(points, cells):
        jx, jy = r_cell(x, x_edges, clamp), r_cell(y, y_edges, clamp)
        expected = 8 if jx < 0 or jy < 0 else jy * 4 + jx  # x fastest; 8 = out of frame
        assert cell == expected, (x, y)


def test_counts_per_group_match_a_loop():
    rng = np.random.default_rng(1)  # test data
    scores = rng.standard_normal((200, 2)) * 2
    scores[:5] = [[np.nan, 0], [np.inf, 0], [0, -np.inf], [9, 9], [-1e308, 1e308]]
    codes = rng.integers(0, 3, 200)
    xe, ye = np.linspace(-3, 3, 4), np.linspace(-2, 2, 3)
    counts = histogram_counts(scores, xe, ye, codes, 3)
    oracle = np.zeros((3, 7), dtype=np.int64)
    for (x, y), g in zip(scores, codes):
        jx, jy = r_cell(x, list(xe), False), r_cell(y, list(ye), False)
        oracle[g, 6 if jx < 0 or jy < 0 else jy * 3 + jx] += 1
    assert np.array_equal(counts, oracle)
    assert counts.sum() == 200


def test_labels_outside_the_public_domain_go_to_other():
    codes = group_codes(["b", "a", "zz", None, float("nan"), ["unhashable"], "b"], ["a", "b"])
    assert codes.tolist() == [1, 0, 2, 2, 2, 2, 1]


# -- sensitivity on hostile neighbours ---------------------------------------------------


def _hostile_histogram_neighbours(rng):
    scores = rng.standard_normal((40, 2))
    labels = np.array(["a", "b", "c"] * 13 + ["a"], dtype=object)
    cases = {}
    for name, score, label in [
        ("to +inf", [np.inf, 0.0], None),
        ("to nan", [np.nan, np.nan], None),
        ("out of the frame", [1e300, -1e300], None),
        ("into another group", None, "c"),
        ("to a label outside the domain", None, "zzz"),
        ("another cell and group", [2.9, 2.9], "b"),
        ("same cell", [scores[0, 0] + 1e-12, scores[0, 1]], None),
    ]:
        s2, l2 = scores.copy(), labels.copy()
        if score is not None:
            s2[0] = score
        if label is not None:
            l2[0] = label
        cases[name] = ((scores, labels), (s2, l2))
    return cases


def test_count_matrix_sensitivity_is_sqrt2_in_l2_and_2_in_l1():
    xe, ye = np.linspace(-3, 3, 6), np.linspace(-3, 3, 5)
    domain = ["a", "b", "c"]
    worst_l2 = worst_l1 = 0.0
    for name, ((s, labels), (s2, labels2)) in _hostile_histogram_neighbours(
        np.random.default_rng(4)
    ).items():
        a = histogram_counts(s, xe, ye, group_codes(labels, domain), 4)
        b = histogram_counts(s2, xe, ye, group_codes(labels2, domain), 4)
        l2_ratio = np.linalg.norm(b - a) / SQRT2
        l1_ratio = np.abs(b - a).sum() / 2
        assert l2_ratio <= 1 and l1_ratio <= 1, name  # computed / claimed
        worst_l2, worst_l1 = max(worst_l2, l2_ratio), max(worst_l1, l1_ratio)
    assert worst_l2 == 1 and worst_l1 == 1  # attained


# -- the mechanisms with noise off --------------------------------------------------------


def test_additive_release_adds_noise_to_every_count_and_nothing_else():
    counts = np.array([[3, 0, 1, 5, 2], [0, 0, 0, 1, 0]])
    h = AdditiveHistogram((2, 2), 1.0, n_groups=2)
    released = h.release(counts, NoGaussian())
    assert np.array_equal(released.counts, counts)
    assert released.probabilities()[0] == pytest.approx(counts[0] / 11)
    assert released.out_of_frame().tolist() == [2, 0]
    assert released.grid(0).tolist() == [[3, 0], [1, 5]]  # row = y bin, x fastest
    assert released.group_sizes().tolist() == [11, 1]
    assert h.parts == (GaussianPart(1.0),) and h.sigma == pytest.approx(SQRT2)
    with pytest.raises(ValueError, match="exact_counts"):
        h.release(counts[:1], NoGaussian())


def test_sparse_release_keeps_counts_above_the_threshold_and_zeroes_the_rest():
    h = SparseHistogram((2, 2), 1.0, 1e-4)
    k = h.threshold_count
    assert k == pytest.approx(1 + 2 * math.log(2 / 1e-4), rel=1e-4)  # 1 + 2 ln(2/delta)/eps
    counts = np.array([[0, 1, int(k) - 1, int(k) + 1, 100]])
    released = h.release(counts, NoIntegerNoise()).counts[0]
    assert released.tolist() == [0, 0, 0, int(k) + 1, 100]
    assert h.parts == (ApproxDPPart(1.0, 1e-4),)


def test_the_stage_splits_its_budget_within_epsilon_and_delta():
    m = ScoreMapMechanism(5000, 0.75, 2.5e-5, domain=("x", "y"), methods=("additive", "sparse"))
    pure = sum(p.epsilon for p in m.parts if isinstance(p, PureDPPart))
    gaussian = [p.mu for p in m.parts if isinstance(p, GaussianPart)]  # histogram, sizes
    assert len(gaussian) == 2 and gaussian[1] < gaussian[0]
    mu = math.sqrt(sum(g * g for g in gaussian))  # Gaussian DP composes exactly
    (approx,) = [p for p in m.parts if isinstance(p, ApproxDPPart)]
    total_eps = pure + gaussian_dp_epsilon(mu, 2.5e-5 / 2) + approx.epsilon
    assert total_eps <= 0.75 * (1 + 1e-9) and approx.delta + 2.5e-5 / 2 <= 2.5e-5
    assert m.group_names == ("x", "y", "other")
    assert m.histograms["additive"].shape == (3, 101)
    assert m.group_counts is not None and m.group_counts.n_groups == 3
    assert ScoreMapMechanism(5000, 0.75, 2.5e-5).group_counts is None  # no groups
    with pytest.raises(ValueError, match="domain"):
        ScoreMapMechanism(10, 1.0, 1e-5, domain=("a", "a"))
    with pytest.raises(ValueError, match="methods"):
        ScoreMapMechanism(10, 1.0, 1e-5, methods=("laplace",))


# -- synthetic points (post-processing) ----------------------------------------------------


def test_synthetic_points_lie_in_their_cells_and_follow_the_mass():
    frame = Frame((0.0, 10.0), (2.0, 1.0))
    p = np.array([0.0, 0.0, 1.0, 3.0, 100.0])  # 2 x 2 grid + out-of-frame (ignored)
    rng = np.random.default_rng(0)  # post-processing seed, for the test
    pts = synthetic_points(p, frame, (2, 2), 4000, bandwidth_scale=0.0, rng=rng)
    assert pts.shape == (4000, 2)
    assert np.all((pts[:, 0] >= -2) & (pts[:, 0] <= 2) & (pts[:, 1] >= 10) & (pts[:, 1] <= 11))
    share_right = np.mean(pts[:, 0] > 0)
    assert 0.72 < share_right < 0.78  # cell (1, 1) holds 3/4
    assert synthetic_points(np.zeros(5), frame, (2, 2), 10).shape == (0, 2)
    centre = synthetic_points(p, frame, (2, 2), 5, method="center", bandwidth_scale=0, rng=rng)
    assert set(map(tuple, centre)) <= {(-1.0, 10.5), (1.0, 10.5)}


def test_allocation_by_largest_remainder():
    assert allocate(10, [1, 1, 1]).tolist() == [4, 3, 3]
    assert allocate(7, [0, -5, np.nan]).tolist() == [0, 0, 0]
    assert allocate(5, [2.0, 0.0, 3.0]).tolist() == [2, 0, 3]


def test_a_score_map_is_sized_from_noisy_counts_and_round_trips():
    counts = np.array([[10.0, 0.0, 5.0, 5.0, 3.0], [-2.0, 4.0, 0.0, 0.0, 0.0]])
    m = ScoreMap(
        Frame((0.0, 0.0), (1.0, 1.0)),
        {"additive": NoisyHistogram(counts, (2, 2), "additive")},
        ("a", "other"),
    )
    pts = m.synthetic(rng=np.random.default_rng(1))  # post-processing seed
    assert {k: len(v) for k, v in pts.items()} == {"a": 20, "other": 2}  # size x in-frame share
    assert m.group_sizes() == {"a": 23.0, "other": 2.0}
    again = ScoreMap.from_dict(m.to_dict())
    assert again.frame == m.frame and np.array_equal(again.histogram().counts, counts)
    released = ScoreMap(m.frame, m.histograms, m.groups, group_counts=np.array([30.0, -1.0]))
    assert released.group_sizes() == {"a": 30.0, "other": 0.0}  # the released sizes win
    assert {k: len(v) for k, v in released.synthetic().items()} == {"a": 26, "other": 0}
    assert ScoreMap.from_dict(released.to_dict()).group_counts.tolist() == [30.0, -1.0]


def test_group_counts_add_noise_to_the_row_sums_only():
    g = GroupCounts(2, 1.0)
    assert g.release(np.array([[3, 0, 1], [0, 2, 0]]), NoGaussian()).tolist() == [4.0, 2.0]
    assert g.parts == (GaussianPart(1.0),) and g.sigma == pytest.approx(SQRT2)
    with pytest.raises(ValueError, match="exact_counts"):
        g.release(np.array([[1, 2]]), NoGaussian())


# -- audits ---------------------------------------------------------------------------------

MU_CLAIMED = 1.0


PAIRS = 500  # independent neighbour pairs in one release (see _additive_draws)


def _additive_draws(sampler, sigma_factor=1.0):
    """The additive release on neighbours [[5, 0]] ~ [[4, 1]], projected on their
    difference (the optimal test for Gaussian noise).

    One release of a histogram of ``PAIRS`` such pairs of cells gives ``PAIRS`` draws: each
    entry's noise is independent of the others', so a pair's two entries have the law
    they would have on a data set where only that pair differs (a true replace-one
    neighbour).  That makes the audit ~500 times cheaper, on the real release path.
    """
    h = AdditiveHistogram((2 * PAIRS - 1, 1), MU_CLAIMED)
    neighbours = (np.tile([5, 0], PAIRS)[None, :], np.tile([4, 1], PAIRS)[None, :])

    def release(counts):
        if sigma_factor == 1.0:
            return h.release(counts, sampler).counts[0]
        # BROKEN on purpose: the same mechanism drawing at sigma * sigma_factor.
        return sampler.add_noise(counts[0].astype(float), h.sigma * sigma_factor)

    def draw(side, n):
        out = []
        while len(out) < n:
            noisy = release(neighbours[side]).reshape(PAIRS, 2)
            out.extend((noisy[:, 1] - noisy[:, 0]) / SQRT2)
        return np.array(out[:n])

    return draw


@pytest.mark.statistical
def test_audit_of_the_additive_histogram_stays_below_its_mu():
    """Certified mu (confidence 0.999) below the claimed mu = 1."""
    assert audit(_additive_draws(OpenDPSampler()), 300, 1000, mu_bound) < MU_CLAIMED


@pytest.mark.statistical
def test_audit_catches_the_additive_histogram_with_half_the_noise():
    """BROKEN on purpose: half the noise (true mu = 2) certifies mu > 1."""
    assert audit(_additive_draws(OpenDPSampler(), 0.5), 300, 1000, mu_bound) > MU_CLAIMED


EPS_SPARSE, DELTA_SPARSE = 1.0, 1e-3


def _sparse_draws(histogram):
    """The sparse release on neighbours where one cell goes from 1 to 0 (the delta event)."""
    neighbours = (np.array([[1, 0, 30]]), np.array([[0, 1, 30]]))
    sampler = DiscreteLaplaceSampler()

    def draw(side, n):
        return np.array(
            [histogram.release(neighbours[side], sampler).counts[0, 0] for _ in range(n)]
        )

    return draw


@pytest.mark.statistical
def test_audit_of_the_sparse_histogram_stays_below_its_epsilon():
    h = SparseHistogram((2, 1), EPS_SPARSE, DELTA_SPARSE)
    bound = audit(_sparse_draws(h), 300, 1000, lambda a, b, t: epsilon_bound(a, b, t, DELTA_SPARSE))
    assert bound < EPS_SPARSE


class _NoThreshold(SparseHistogram):
    """BROKEN on purpose: a threshold of one count, so a lone record shows half the time."""

    @property
    def threshold(self) -> int:
        return self.multiplier


@pytest.mark.statistical
def test_audit_catches_a_sparse_histogram_without_its_threshold():
    h = _NoThreshold((2, 1), EPS_SPARSE, DELTA_SPARSE)
    bound = audit(_sparse_draws(h), 300, 1000, lambda a, b, t: epsilon_bound(a, b, t, DELTA_SPARSE))
    assert bound > EPS_SPARSE


_value = st.one_of(
    st.floats(-4, 4),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, -3.0, 0.0, 3.0]),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(_value, _value, st.sampled_from(["a", "b", "zz", None])), min_size=1, max_size=25
    ),
    st.tuples(_value, _value, st.sampled_from(["a", "b", "zz", None])),
    st.integers(0, 24),
    st.booleans(),
)
def test_random_hostile_neighbours_never_exceed_the_claimed_sensitivities(rows, new, k, clamp):
    """Any record replaced by anything: the count matrix within sqrt 2 (l2) and 2 (l1),
    the group sizes within sqrt 2."""
    k = k % len(rows)
    other = list(rows)
    other[k] = new
    xe, ye = np.linspace(-3, 3, 4), np.linspace(-3, 3, 3)

    def counts(data):
        scores = np.array([[x, y] for x, y, _ in data], dtype=float).reshape(-1, 2)
        codes = group_codes([g for _, _, g in data], ["a", "b"])
        return histogram_counts(scores, xe, ye, codes, 3, clamp=clamp)

    a, b = counts(rows), counts(other)
    assert np.linalg.norm(b - a) <= SQRT2 and np.abs(b - a).sum() <= 2
    assert np.linalg.norm(b.sum(axis=1) - a.sum(axis=1)) <= SQRT2
    assert a.sum() == b.sum() == len(rows)  # every record in exactly one entry


def test_a_floor_drops_the_noise_in_empty_cells_as_post_processing():
    h = AdditiveHistogram((2, 2), 1.0)
    released = h.release(np.array([[40, 1, 0, 30, 2]]), NoGaussian())
    assert released.sigma == h.sigma and released.floor(2.0) == pytest.approx(2 * SQRT2)
    assert released.probabilities(released.floor(2.0))[0].tolist() == [40 / 70, 0, 0, 30 / 70, 0]
    assert released.grid(floor=3.0).tolist() == [[40, 0], [0, 30]]
    m = ScoreMap(Frame((0.0, 0.0), (1.0, 1.0)), {"additive": released}, ("all",))
    points = m.synthetic(rng=np.random.default_rng(3), bandwidth_scale=0.0)["all"]
    assert len(points) == 73  # the noisy size, all of its kept mass in the frame
    assert set(np.sign(points[:, 0] * points[:, 1]).tolist()) == {1.0}  # cells 0 and 3 only
    raw = m.synthetic(rng=np.random.default_rng(3), floor_sigmas=0.0)["all"]
    assert len(raw) == 71  # 73 noisy, 2 of them outside the frame
    assert ScoreMap.from_dict(m.to_dict()).histogram().sigma == h.sigma


def test_the_sparse_release_draws_the_same_noise_whatever_the_counts():
    """Its time cannot tell how many entries are non-empty: it draws for every entry."""
    from dask_dppca.privacy.mechanisms.histogram import SparseHistogram
    from dask_dppca.privacy.mechanisms.laplace import SeededDiscreteLaplace

    class Counting(SeededDiscreteLaplace):
        drawn = 0

        def draw(self, scale, size):
            type(self).drawn += int(size)
            return super().draw(scale, size)

    hist = SparseHistogram((30, 30), 1.0, 1e-6)
    drawn = []
    for live in (1, 900):
        counts = np.zeros(hist.shape, dtype=np.int64)
        counts.ravel()[:live] = 5
        Counting.drawn = 0
        hist.release(counts, Counting(0))  # NOT PRIVATE: a seeded test sampler
        drawn.append(Counting.drawn)
    assert drawn[0] == drawn[1] == 901
