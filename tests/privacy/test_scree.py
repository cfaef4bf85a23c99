"""The scree mechanisms: exact statistics (pair-by-pair oracles), sensitivity on hostile
neighbours (max computed / claimed <= 1), and black-box audits that catch broken versions.

Seeds here make TEST DATA only; the audited noise comes from the real samplers (OpenDP,
OS entropy).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dask_dppca.kernel.scree_stats import (
    SCREE_BLOCK_ROWS,
    block_histograms,
    block_order,
    block_sums,
    grid_index,
    grid_values,
    scree_design,
    sub_block_pairs_per_record,
    sub_blocks,
    summation_slack,
)
from dask_dppca.privacy.mechanisms.calibration import gaussian_dp_epsilon
from dask_dppca.privacy.mechanisms.noise import OpenDPSampler
from dask_dppca.privacy.mechanisms.parts import GaussianPart, PureDPPart
from dask_dppca.privacy.mechanisms.scree import (
    CLIP_MULTIPLE,
    WINSOR_FACTOR,
    WINSOR_LEVEL,
    GaussianStatistic,
    PairQuantiles,
    gaussian_consistent_winsorized,
    huber_ranges,
    monotone,
    opendp_epsilon,
    opendp_selector,
    robust_from_quantile,
    robust_from_quantiles,
    winsorizing_level,
)

RNG = np.random.default_rng(20261201)  # test data only


def _directions(d: int, k: int) -> np.ndarray:
    return np.linalg.qr(RNG.standard_normal((d, k)))[0].T


def _design_pairs(sizes, block_pairs):
    """The scree design's record pairs, listed one by one (the oracle)."""
    offsets = np.cumsum((0,) + tuple(sizes))
    order = [offsets[b] + block_order(b, size) for b, size in enumerate(sizes)]
    for i, j in block_pairs:
        subs_i, subs_j = sub_blocks(sizes[i]), sub_blocks(sizes[j])
        if i == j:
            for a0, a1 in subs_i:
                rows = order[i][a0:a1]
                for p in range(len(rows)):
                    for q in range(p + 1, len(rows)):
                        yield int(rows[p]), int(rows[q])
        else:
            for (a0, a1), (b0, b1) in zip(subs_i, subs_j):
                for p in order[i][a0:a1]:
                    for q in order[j][b0:b1]:
                        yield int(p), int(q)


# -- the exact statistics, against pair-by-pair loops ------------------------------------


def test_design_counts_and_degrees_match_the_pair_list():
    for sizes, pairs in [
        ((300,), None),
        ((128, 5, 1), None),
        ((200, 130, 70), ((0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (0, 2))),
    ]:
        block_pairs = tuple((b, b) for b in range(len(sizes))) if pairs is None else pairs
        listed = list(_design_pairs(sizes, block_pairs))
        degree: dict[int, int] = {}
        for i, j in listed:
            degree[i] = degree.get(i, 0) + 1
            degree[j] = degree.get(j, 0) + 1
        assert len(set(listed)) == len(listed)  # no pair twice
        assert scree_design(sizes, pairs) == (len(listed), max(degree.values()))
    b = SCREE_BLOCK_ROWS
    assert scree_design((b * 4,)) == (4 * b * (b - 1) // 2, b - 1)


def test_histograms_and_sums_equal_the_pair_loop_with_bad_values():
    x = RNG.standard_normal((330, 4)) * [3.0, 1.0, 0.5, 0.1]
    x[7] = np.nan
    x[250, 2] = np.inf
    sizes = (200, 130)
    blocks = (x[:200], x[200:])
    v = _directions(4, 2)
    clip = np.array([2.0, 0.5, 5.0])
    upper = np.array([1.5, 0.3])
    centre, tau = np.array([1.0, 0.2]), np.array([3.0, 0.6])
    for pair in [(0, 0), (0, 1)]:
        hist = np.zeros((3, grid_values().size), dtype=np.int64)
        sums = np.zeros(3 + 2 + 2)
        for i, j in _design_pairs(sizes, (pair,)):
            dx = x[i] - x[j]
            with np.errstate(invalid="ignore"):
                dy = np.abs(v @ dx)
                values = [*dy, float(np.sqrt(np.sum(dx * dx)))]
            for r, value in enumerate(values):
                if not np.isfinite(value):
                    bin_ = grid_values().size - 1
                elif value == 0:
                    bin_ = 0
                else:
                    bin_ = int(np.clip(np.ceil(64 * np.log2(value)), -4096, 4096) + 4096)
                hist[r, bin_] += 1
            s = [0.5 * value * value for value in values]
            for r in range(3):
                sums[r] += clip[r] if not np.isfinite(s[r]) else min(s[r], clip[r])
            for r in range(2):
                sums[3 + r] += upper[r] if not np.isfinite(s[r]) else min(s[r], upper[r])
                sums[5 + r] += (
                    tau[r] if not np.isfinite(s[r]) else np.clip(s[r] - centre[r], -tau[r], tau[r])
                )
        a, b = pair
        other = None if a == b else blocks[b]
        got_hist = block_histograms(blocks[a], v, trace=True, other=other, indices=pair)
        assert np.array_equal(got_hist, hist), pair
        got = block_sums(blocks[a], v, clip, upper, centre, tau, other=other, indices=pair)
        assert got.to_float() == pytest.approx(sums, rel=1e-12), pair


def test_grid_index_is_the_first_grid_point_at_or_above():
    grid = grid_values()
    values = np.array([0.0, 1e-30, 0.3, 1.0, 7.7, 1e18, np.inf, np.nan])
    index = grid_index(values)
    assert index[0] == 0 and index[-1] == index[-2] == grid.size - 1
    for value, j in zip(values[1:6], index[1:6]):
        assert grid[j] >= value * (1 - 1e-12)
        assert j == 0 or grid[j - 1] < value * (1 + 1e-12)


# -- sensitivity on hostile neighbours -----------------------------------------------------


def _hostile_neighbours(n: int, d: int):
    """Replace-one neighbours at the extremes: a tight cluster, one record far away in S
    and elsewhere (or at the cluster) in S'."""
    base = RNG.standard_normal((n, d)) * 1e-6
    cases = {}
    for name, a, b in [
        ("far-vs-cluster", 1e6, 0.0),
        ("far-vs-far", 1e6, -1e6),
        ("huge", 1e150, -1e150),
        ("nan-vs-far", np.nan, 1e6),
    ]:
        s, s_prime = base.copy(), base.copy()
        s[3], s_prime[3] = a, b
        cases[name] = (s, s_prime)
    spread = RNG.standard_normal((n, d))
    s, s_prime = spread.copy(), spread.copy()
    s_prime[3] = 1e3
    cases["gaussian-vs-outlier"] = (s, s_prime)
    # Ties: duplicated rows (most pairs differ by exactly 0), one of them moved far, or
    # to a value that differs from all others by a tiny amount.
    ties = np.zeros((n, d))
    ties[: n // 4] = RNG.integers(0, 3, size=(n // 4, d))
    for name, value in [("ties-vs-far", 1e6), ("ties-vs-tiny", 1e-9)]:
        s, s_prime = ties.copy(), ties.copy()
        s_prime[-1] = value
        cases[name] = (s, s_prime)
    return cases


@pytest.mark.parametrize("case", list(_hostile_neighbours(256, 3)))
def test_sums_move_by_at_most_their_claimed_sensitivity(case):
    s, s_prime = _hostile_neighbours(256, 3)[case]
    v = _directions(3, 2)
    clip = np.array([1.0, 2.0, 3.0])
    upper, centre, tau = np.array([0.5, 4.0]), np.array([0.1, 1.0]), np.array([0.2, 2.0])
    n_pairs, degree = scree_design((256,))
    # The Huber terms' width is tau + m (m < tau here), not 2 tau: the terms are >= -m.
    ranges = np.concatenate([clip, upper, huber_ranges(centre, tau)])
    mech = GaussianStatistic(
        "all", tuple(ranges), 1.0, n_pairs, degree, summation_slack(n_pairs, 1), OpenDPSampler()
    )
    a = block_sums(s, v, clip, upper, centre, tau).to_float()
    b = block_sums(s_prime, v, clip, upper, centre, tau).to_float()
    ratio = np.abs(a - b) / mech.sensitivities
    assert np.max(ratio) <= 1.0
    if case == "far-vs-cluster":
        assert np.max(ratio) > 0.99  # the worst case is reached


def test_huber_ranges_cover_every_term_and_are_reached():
    """The Huber terms ``clamp(s - m, -tau, tau)`` of pair terms ``s >= 0`` (0, tiny,
    huge, non-finite) lie in an interval of the claimed width, for centres below 0,
    between 0 and tau and above tau; a width of tau (less than claimed) is exceeded."""
    tau = np.full(5, 2.0)
    centre = np.array([-3.0, -0.5, 0.0, 0.7, 5.0])
    width = huber_ranges(centre, tau)
    assert width.tolist() == [2.0, 2.0, 2.0, 2.7, 4.0]
    v = np.eye(5)
    data = np.zeros((6, 5))
    data[1] = 1e-300
    data[2] = 0.3
    data[3] = 1e200
    data[4] = np.inf
    data[5] = np.nan
    terms = []
    for a in range(6):
        for b in range(a + 1, 6):
            pair = data[[a, b]]
            terms.append(block_sums(pair, v, np.ones(5), None, centre, tau).to_float()[5:])
    terms = np.array(terms)
    spread = terms.max(axis=0) - terms.min(axis=0)
    assert np.all(spread <= width)
    assert spread[3] == pytest.approx(width[3]) and spread[4] == pytest.approx(width[4])
    assert spread[3] > tau[3]  # a width of tau alone would be broken


@pytest.mark.parametrize("case", list(_hostile_neighbours(256, 3)))
def test_quantile_utilities_move_by_at_most_the_max_degree(case):
    """The utilities of the differing pairs' quantiles (ties left out) move by at most
    ``b D`` (``b`` the levels' denominator), and that bound is reached."""
    s, s_prime = _hostile_neighbours(256, 3)[case]
    v = _directions(3, 2)
    n_pairs, degree = scree_design((256,))
    mech = PairQuantiles(((0.5, 0.9), (0.5,), (0.5,)), 1.0, n_pairs, degree)
    assert mech.sensitivity == 10 * degree and mech.scale == 2.0 * 10 * degree
    hs, hp = block_histograms(s, v), block_histograms(s_prime, v)
    worst = 0
    for row in range(3):
        for q in (0.1, 0.5, 0.9):
            worst = max(
                worst, int(np.max(np.abs(mech.utilities(hs[row], q) - mech.utilities(hp[row], q))))
            )
    assert worst <= mech.sensitivity
    if case in ("far-vs-cluster", "ties-vs-far"):
        assert worst >= 0.9 * mech.sensitivity  # about reached


def test_quantiles_leave_out_the_ties():
    """On a column of duplicated values (80 % zeros) the released median is that of the
    pairs that differ (an atom at 3), not 0; on continuous data the utilities are ``b``
    times those of the quantile of all pairs (the same mechanism at ``b`` times the
    scale), up to a shift of one bin above the target."""
    x = np.zeros((1024, 1))
    x[:205, 0] = 3.0
    counts = block_histograms(x, np.eye(1), trace=False)
    n_pairs, degree = scree_design((1024,))
    mech = PairQuantiles(((0.5, 0.9),), 50.0, n_pairs, degree)
    assert mech.release(counts)[0] == pytest.approx([3.0, 3.0], rel=0.02)
    y = RNG.standard_normal((1024, 1))
    row = block_histograms(y, np.eye(1), trace=False)[0]
    cumulative = np.cumsum(row)
    assert row[0] == 0  # no ties
    for q, a in ((0.5, 5), (0.9, 9)):
        old = -np.abs(10 * cumulative - a * n_pairs)  # the quantile of all pairs, x b
        new = mech.utilities(row, q)
        below = 10 * cumulative <= a * n_pairs
        assert np.array_equal(new[below], old[below])
        above = np.flatnonzero(~below)[1:]
        assert np.array_equal(new[above], old[above - 1])
        assert new[np.flatnonzero(~below)[0]] == 0  # the bin holding the target rank


def test_a_non_private_centre_breaks_the_sensitivity():
    """BROKEN on purpose: squared deviations from the data's own mean score, clipped at C.
    One far record moves every term, far beyond the claimed D C / |P| (what the pair
    differences avoid)."""
    s, s_prime = _hostile_neighbours(256, 1)["gaussian-vs-outlier"]
    s, s_prime = s[:, :1], s_prime[:, :1]
    clip = 1.0

    def centred(data):
        y = data[:, 0]
        return np.minimum((y - y.mean()) ** 2, clip).sum() / (len(y) - 1)

    claimed = clip / (len(s) - 1)
    assert abs(centred(s) - centred(s_prime)) / claimed > 5.0


# -- black-box audits ----------------------------------------------------------------------

ALPHA = 1e-3


def _cp_upper(k: int, n: int) -> float:
    return 1.0 if k >= n else float(stats.beta.ppf(1 - ALPHA, k + 1, n - k))


def _audit(draw_s, draw_p, accept, delta: float, n: int) -> float:
    """Epsilon lower bound of the test 'the input was S'' on the event ``accept``."""
    a, b = draw_s(n), draw_p(n)
    fpr, fnr = _cp_upper(int(np.sum(accept(a))), n), _cp_upper(int(np.sum(~accept(b))), n)
    bounds = [
        math.log(u / w)
        for u, w in ((1 - delta - fnr, fpr), (1 - delta - fpr, fnr))
        if u > 0 and w > 0
    ]
    return max(bounds, default=-math.inf)


class BrokenHalfNoise(GaussianStatistic):
    """BROKEN on purpose: half the noise it claims."""

    @property
    def sigma(self) -> float:
        return super().sigma / 2.0


@pytest.mark.parametrize("term", ["clipped", "winsorized", "huber"])
@pytest.mark.parametrize("broken", [False, True])
def test_gaussian_scree_release_audit(broken, term):
    """Each Gaussian scree release (its term, range and sensitivity) on worst-case
    neighbours; the half-noise version must be caught."""
    s, s_prime = _hostile_neighbours(128, 2)["far-vs-cluster"]
    v = _directions(2, 1)
    clip, upper, centre, tau = np.array([1.0]), np.array([0.5]), np.array([0.1]), np.array([0.3])
    huber_width = float(huber_ranges(centre, tau)[0])  # tau + m = 0.4, not 2 tau = 0.6
    index, width = {"clipped": (0, 1.0), "winsorized": (1, 0.5), "huber": (2, huber_width)}[term]
    n_pairs, degree = scree_design((128,))
    cls = BrokenHalfNoise if broken else GaussianStatistic
    mech = cls(term, (width,), 0.5, n_pairs, degree, summation_slack(n_pairs, 1), OpenDPSampler())
    # At delta = 0.05 the claim (epsilon 0.51) is where 3000 draws can see a factor 2 in
    # the noise: expected bounds 0.26 (honest) and 1.08 (half the noise).
    delta = 0.05
    claimed = gaussian_dp_epsilon(0.5, delta)
    z = [
        block_sums(data, v, clip, upper, centre, tau).to_float()[index] / mech.sensitivities[0]
        for data in (s, s_prime)
    ]
    assert abs(z[0] - z[1]) > 0.99  # worst-case neighbours

    def draws(value):
        return lambda n: mech.sampler.add_noise(np.full(n, value), mech.sigma)

    # The optimal (likelihood-ratio) test for Gaussian noise, its threshold fixed in units
    # of the public gap before any draw: "S'" when the output is 1.75 gaps past S's value.
    gap, sign = abs(z[1] - z[0]), np.sign(z[1] - z[0])
    bound = _audit(
        draws(z[0]), draws(z[1]), lambda out: (out - z[0]) * sign > 1.75 * gap, delta, 3000
    )
    if broken:
        assert bound > claimed, (bound, claimed)
    else:
        assert bound < claimed, (bound, claimed)


class BrokenHalfScale(PairQuantiles):
    """BROKEN on purpose: the noisy max at half its claimed scale."""

    @property
    def scale(self) -> float:
        return super().scale / 2.0


@pytest.mark.parametrize("broken", [False, True])
def test_quantile_release_audit(broken):
    """Two candidates whose utilities swap by the full sensitivity ``b D`` between
    neighbours."""
    degree = 10
    cls = BrokenHalfScale if broken else PairQuantiles
    mech = cls(((0.5,),), 1.0, 100, degree)
    assert mech.sensitivity == 2 * degree
    u_s = np.array([0, -mech.sensitivity], dtype=np.int64)
    u_p = np.array([-mech.sensitivity, 0], dtype=np.int64)

    def draws(u):
        return lambda n: np.array([opendp_selector(u, mech.scale) for _ in range(n)])

    bound = _audit(draws(u_s), draws(u_p), lambda out: out == 1, 0.0, 1500)
    if broken:
        assert bound > 1.0, bound
    else:
        assert bound < 1.0, bound


def test_the_quantile_mechanism_is_what_opendp_proves():
    mech = PairQuantiles(((0.5,),), 0.3, 1000, 127)
    assert opendp_epsilon(mech.sensitivity, mech.scale) == pytest.approx(0.3, rel=1e-12)
    assert mech.parts == (PureDPPart(0.3),)
    assert GaussianStatistic("x", (1.0,), 0.4, 10, 3, 0.0, OpenDPSampler()).parts == (
        GaussianPart(0.4),
    )


# -- post-processing -----------------------------------------------------------------------


def test_monotone_is_the_isotonic_fit():
    assert monotone([3, 5, -1, 2]).tolist() == [4, 4, 1, 1]
    assert monotone([5, 4, 3]).tolist() == [5, 4, 3]


def test_robust_and_winsorized_are_consistent_at_the_gaussian():
    lam = 2.5
    dy = RNG.standard_normal(400_000) * math.sqrt(2 * lam)
    assert robust_from_quantile(float(np.median(np.abs(dy)))) == pytest.approx(lam, rel=0.01)
    upper = float(np.quantile(np.abs(dy), 0.9))
    assert robust_from_quantiles(float(np.median(np.abs(dy))), upper) == pytest.approx(
        lam, rel=0.01
    )
    s = dy * dy / 2
    upper = float(np.quantile(s, 0.9))
    assert gaussian_consistent_winsorized(
        float(np.minimum(s, upper).mean()), upper
    ) == pytest.approx(lam, rel=0.01)


def test_the_winsorized_inversion_is_scipy_stats_value_for_value():
    """scipy.special's chi^2 functions (light on a worker) give scipy.stats' bits: the
    same bisection over ``stats.chi2`` returns the same lambda, and the constants agree."""

    def with_stats(mean: float, upper: float) -> float:
        def winsorized(lam: float) -> float:
            c = upper / lam
            return float(lam * stats.chi2.cdf(c, 3) + upper * stats.chi2.sf(c, 1))

        lo = hi = mean
        while winsorized(hi) < mean:
            hi *= 2.0
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if winsorized(mid) < mean else (lo, mid)
        return 0.5 * (lo + hi)

    for upper in (1e-8, 0.3, 3.0, 7e5):
        for share in (1e-6, 0.1, 0.5, 0.9, 0.999999):
            mean = share * upper
            assert gaussian_consistent_winsorized(mean, upper) == with_stats(mean, upper)
    assert WINSOR_FACTOR == math.sqrt(CLIP_MULTIPLE) / stats.norm.ppf(1 - WINSOR_LEVEL / 2)


def test_the_winsorizing_level_is_the_clip_level_at_the_gaussian():
    """Public constants: U from the released 1 - WINSOR_LEVEL quantile of |dy| is
    CLIP_MULTIPLE lambda at the Gaussian (no data read)."""
    lam = 3.0
    q = stats.norm.ppf(1 - WINSOR_LEVEL / 2) * math.sqrt(2 * lam)
    assert winsorizing_level(q) == pytest.approx(CLIP_MULTIPLE * lam, rel=1e-12)
    assert WINSOR_LEVEL == 0.1 and WINSOR_FACTOR == pytest.approx(1.8239, abs=1e-4)


def test_robust_ratios_are_consistent_on_cauchy_data():
    """Multivariate t_1 (no variance) with scatter diag(9, 4, 1): the released robust
    values' ratios estimate the scatter's ratios (elliptical: every |v^T dx| is the same
    law scaled by sqrt(v^T Sigma v))."""
    n, scatter = 4096, np.array([9.0, 4.0, 1.0])
    z = RNG.standard_normal((n, 3)) * np.sqrt(scatter)
    x = z / np.abs(RNG.standard_normal((n, 1)))  # t_1: a normal over |a normal|
    counts = sum(
        block_histograms(x[a : a + 1024], np.eye(3), trace=False) for a in range(0, n, 1024)
    )
    n_pairs, degree = scree_design((1024,) * 4)
    mech = PairQuantiles(((0.5, 0.9),) * 3, 2.0, n_pairs, degree)
    released = mech.release(counts)
    median = np.array([robust_from_quantile(r[0]) for r in released])
    assert median[:2] / median[2] == pytest.approx(scatter[:2] / scatter[2], rel=0.2)
    robust = np.array([robust_from_quantiles(*r) for r in released])
    assert robust[:2] / robust[2] == pytest.approx(scatter[:2] / scatter[2], rel=0.2)


def test_the_float_slack_covers_row_by_row_sums_in_every_sub_block_pair_of_a_record():
    """numpy's sum(axis=0) adds a piece of two columns or more row after row, within
    (p - 1) u p R of exact, not the pairwise (log2 p + 1) u p R; and a record is in one
    sub-block pair per block pair of its block, each of which may round differently on
    the neighbour.  The slack counts both (one sub-block pair, summed pairwise, was about
    11 times too small here)."""
    u, p = 2.0**-53, SCREE_BLOCK_ROWS * SCREE_BLOCK_ROWS
    blocks = 13
    pairs = tuple((i, j) for i in range(blocks) for j in range(i, blocks))
    per_record = sub_block_pairs_per_record(blocks, pairs)
    assert per_record == blocks
    assert sub_block_pairs_per_record(blocks) == 1
    assert sub_block_pairs_per_record(3, ((0, 1), (1, 2), (1, 1))) == 3
    n_pairs, _ = scree_design((4096,) * blocks, pairs)
    slack = summation_slack(n_pairs, per_record)
    assert slack >= 2 * per_record * (p - 1) * p * u + 2 * n_pairs * u
    with pytest.raises(ValueError, match="sub_block_pairs_per_record"):
        summation_slack(n_pairs, 0)


def test_the_upper_level_reaches_past_a_tiny_median_with_the_trace():
    """Along a zero-inflated column (92 % zeros, the rest near 12) the median of ``|dy|``
    is the other columns' leak (about 0.04) and the 0.9 level lies 8 octaves above it:
    a window of 4 octaves above the median stops far below; with ``n_features`` the
    window also reaches 4 octaves above the trace's released median over sqrt(d)."""
    n = 4096
    x = RNG.standard_normal((n, 4))
    x[:, 0] = np.where(RNG.random(n) < 0.92, 0.0, 12.0 + RNG.standard_normal(n))
    v = np.array([[1.0, 0.026, 0.026, 0.026]])
    v /= np.linalg.norm(v)
    counts = sum(block_histograms(x[a : a + 1024], v) for a in range(0, n, 1024))
    n_pairs, degree = scree_design((1024,) * 4)
    levels = ((0.5, 0.9), (0.5,))
    exact = np.quantile(np.abs(np.subtract.outer(x[:1024] @ v[0], x[:1024] @ v[0])), 0.9)
    near = PairQuantiles(levels, 50.0, n_pairs, degree, n_features=4).release(counts)
    stuck = PairQuantiles(levels, 50.0, n_pairs, degree).release(counts)
    assert near[0][1] == pytest.approx(exact, rel=0.1)
    assert stuck[0][1] < exact / 4
    assert near[0][0] == pytest.approx(stuck[0][0], rel=0.05)  # the median: unchanged
