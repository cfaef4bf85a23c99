"""vecd, the noise law of every sampler, float safety and the lattice slack.

Statistical tests use a fixed false-alarm rate ALPHA (Bonferroni over the statistics
of one check) and each is paired with a deliberately broken mechanism that the same
check must reject.  Seeds below are TEST-ONLY: they fix the test data, the broken
samplers and the entropy injected into the lattice sampler's internals, never the
noise of a release.
"""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from dask_dppca.privacy.mechanisms import noise
from dask_dppca.privacy.mechanisms.contract import make_sampler
from dask_dppca.privacy.mechanisms.noise import (
    DEFAULT_LATTICE_BITS,
    OPENDP_MAX_ENTRIES,
    LatticeSampler,
    NoiseSampler,
    NonPrivateRandomStateWarning,
    OpenDPSampler,
    SeededSampler,
    add_symmetric_noise,
    lattice_step,
    vecd,
    vecd_inverse,
)

ALPHA = 1e-4  # false-alarm rate of each statistical check
SQRT2 = math.sqrt(2.0)


def seeded_sampler(seed: int) -> SeededSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return SeededSampler(seed)


class SeededEntropy:
    """TEST-ONLY entropy for the lattice internals: reproducible numpy words."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def words(self, n: int) -> np.ndarray:
        return self._rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)

    def bits(self, n: int) -> np.ndarray:
        return self._rng.integers(0, 2, size=n).astype(bool)


class ListEntropy:
    """Replays given words (for exact, deterministic checks of the Bernoulli step)."""

    def __init__(self, words) -> None:
        self._words = np.asarray(words, dtype=np.uint64)

    def words(self, n: int) -> np.ndarray:
        out, self._words = self._words[:n], self._words[n:]
        return out


# -- vecd ---------------------------------------------------------------------------------

# Entries are 0 or at least 1e-100 in size: the *reference* np.linalg.norm squares them,
# and squares of ~1e-159 fall into the subnormal range where it loses precision.
_entries = st.one_of(st.just(0.0), st.floats(1e-100, 1e6), st.floats(-1e6, -1e-100))
symmetric_matrices = st.integers(1, 7).flatmap(
    lambda d: hnp.arrays(np.float64, (d, d), elements=_entries).map(lambda a: a + a.T)
)


@settings(max_examples=80, deadline=None)
@given(a=symmetric_matrices)
def test_vecd_is_an_isometry_and_invertible(a):
    v = vecd(a)
    d = a.shape[0]
    assert v.shape == (d * (d + 1) // 2,)
    assert np.linalg.norm(v) == pytest.approx(np.linalg.norm(a, "fro"), rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(vecd_inverse(v, d), a, rtol=1e-15, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), d=st.integers(1, 6))
def test_vecd_preserves_inner_products(data, d):
    elements = st.floats(-100, 100)
    a = data.draw(hnp.arrays(np.float64, (d, d), elements=elements))
    b = data.draw(hnp.arrays(np.float64, (d, d), elements=elements))
    a, b = a + a.T, b + b.T
    assert vecd(a) @ vecd(b) == pytest.approx(np.trace(a @ b), rel=1e-10, abs=1e-8)


def test_vecd_layout():
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    np.testing.assert_array_equal(vecd(a), [1.0, 4.0, 6.0, 2 * SQRT2, 3 * SQRT2, 5 * SQRT2])


def test_vecd_rejects_bad_shapes():
    with pytest.raises(ValueError, match="matrix"):
        vecd(np.ones((2, 3)))
    with pytest.raises(ValueError, match="vector"):
        vecd_inverse(np.ones(5), 3)
    with pytest.raises(ValueError, match="d"):
        vecd_inverse(np.ones(1), -1)


# -- the noise law ------------------------------------------------------------------------

MATRIX = np.array(
    [
        [0.31, -0.07, 0.02, 0.0],
        [-0.07, 0.25, 0.11, -0.03],
        [0.02, 0.11, 0.27, 0.05],
        [0.0, -0.03, 0.05, 0.17],
    ]
)


def law_p_values(draws: np.ndarray, matrix: np.ndarray, sigma: float) -> list[float]:
    """p-values of the law 'diag N(0, sigma^2), off-diag N(0, sigma^2/2), independent'.

    For the standardised diagonal and off-diagonal residuals separately: a KS test
    against N(0, 1), a two-sided chi-square test of the variance, a z-test of the mean;
    plus a test that diagonal and off-diagonal residuals of the same draw are
    uncorrelated.
    """
    d = matrix.shape[0]
    resid = draws - matrix
    rows, cols = np.triu_indices(d, 1)
    groups = [resid[:, np.arange(d), np.arange(d)] / sigma, resid[:, rows, cols] / (sigma / SQRT2)]
    p_values = []
    for group in groups:
        z = group.ravel()
        p_values.append(stats.kstest(z, "norm").pvalue)
        chi2 = stats.chi2(z.size)
        ss = float(np.sum(z * z))
        p_values.append(2 * min(chi2.cdf(ss), chi2.sf(ss)))
        p_values.append(2 * stats.norm.sf(abs(z.sum()) / math.sqrt(z.size)))
    p_values.append(stats.pearsonr(groups[0][:, 0], groups[1][:, 0]).pvalue)
    return p_values


def law_rejected(draws: np.ndarray, matrix: np.ndarray, sigma: float) -> bool:
    p_values = law_p_values(draws, matrix, sigma)
    return min(p_values) < ALPHA / len(p_values)


def draw_many(noisy, n_draws: int) -> np.ndarray:
    return np.stack([noisy(MATRIX) for _ in range(n_draws)])


def broken_offdiag_full_variance(matrix, sigma, rng):
    """vecd^-1 without the 1/sqrt2: off-diagonal noise N(0, sigma^2)."""
    e = np.triu(rng.normal(0.0, sigma, matrix.shape))
    return matrix + e + np.triu(e, 1).T


def broken_half_sigma(matrix, sigma, rng):
    return add_symmetric_noise(matrix, sigma / 2, _RngSampler(rng))


def broken_diag_double_variance(matrix, sigma, rng):
    """E = (Z + Z^T) / sqrt2: off-diagonal right, diagonal variance 2 sigma^2."""
    z = rng.normal(0.0, sigma, matrix.shape)
    return matrix + (z + z.T) / SQRT2


def broken_shared_offdiag_noise(matrix, sigma, rng):
    """All off-diagonal entries share one draw: right marginals, not independent."""
    d = matrix.shape[0]
    e = np.diag(rng.normal(0.0, sigma, d))
    rows, cols = np.triu_indices(d, 1)
    shared = rng.normal(0.0, sigma / SQRT2)
    e[rows, cols] = shared
    e[cols, rows] = shared
    return matrix + e


class _RngSampler(NoiseSampler):
    def __init__(self, rng):
        self._rng = rng

    def _add_noise(self, values, sigma):
        return values + self._rng.normal(0.0, sigma, values.size)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "broken",
    [
        broken_offdiag_full_variance,
        broken_half_sigma,
        broken_diag_double_variance,
        broken_shared_offdiag_noise,
    ],
)
def test_the_law_check_rejects_a_broken_law(broken):
    rng = np.random.default_rng(99)  # TEST-ONLY seed of the broken mechanism
    sigma = 0.05
    draws = draw_many(lambda m: broken(m, sigma, rng), 3000)
    if broken is broken_shared_offdiag_noise:
        # Marginals are right; independence across entries is what is broken.
        resid = draws - MATRIX
        rows, cols = np.triu_indices(4, 1)
        off = resid[:, rows, cols]
        assert stats.pearsonr(off[:, 0], off[:, 1]).pvalue < ALPHA
        return
    assert law_rejected(draws, MATRIX, sigma)


@pytest.mark.statistical
def test_lattice_sampler_law_on_a_long_vector():
    """At the real lattice ratio (sigma / L ~ 2^40): KS and variance on 200k entries."""
    sigma = 3.7e-4
    x = np.random.default_rng(5).uniform(-1, 1, 200_000)  # TEST-ONLY data
    z = (LatticeSampler().add_noise(x, sigma) - x) / sigma
    chi2 = stats.chi2(z.size)
    ss = float(z @ z)
    p_values = [stats.kstest(z, "norm").pvalue, 2 * min(chi2.cdf(ss), chi2.sf(ss))]
    assert min(p_values) > ALPHA / 2


# -- the discrete Gaussian and its building blocks --------------------------------------------


def discrete_gaussian_pmf(s: float, support: np.ndarray) -> np.ndarray:
    j = np.arange(-int(60 * s) - 60, int(60 * s) + 61)
    norm = np.exp(-(j.astype(float) ** 2) / (2 * s * s)).sum()
    return np.exp(-(support.astype(float) ** 2) / (2 * s * s)) / norm


def chi_square_p_value(draws: np.ndarray, pmf) -> float:
    """Goodness of fit, bins with expected count >= 20, the rest pooled into two tails."""
    n = draws.size
    lo, hi = int(draws.min()), int(draws.max())
    support = np.arange(lo - 5, hi + 6)
    expected = n * pmf(support)
    keep = expected >= 20
    left, right = support[keep][0], support[keep][-1]
    inner = np.arange(left, right + 1)
    observed = (
        [np.sum(draws < left)] + [np.sum(draws == k) for k in inner] + [np.sum(draws > right)]
    )
    p_inner = pmf(inner)
    tail = max(0.0, 0.5 * (1 - p_inner.sum()))
    expected = n * np.concatenate([[tail], p_inner, [tail]])
    mask = expected > 0
    obs, exp_ = np.asarray(observed, float)[mask], expected[mask]
    exp_ *= obs.sum() / exp_.sum()
    return stats.chisquare(obs, exp_).pvalue


@pytest.mark.statistical
@pytest.mark.parametrize("s", [0.7, 3.5, 12.3])
def test_discrete_gaussian_matches_its_pmf(s):
    draws = noise._discrete_gaussian(s, 200_000, SeededEntropy(int(s * 10)))
    assert chi_square_p_value(draws, lambda k: discrete_gaussian_pmf(s, k)) > ALPHA


@pytest.mark.statistical
def test_the_pmf_check_rejects_the_laplace_proposal():
    """Skipping the Gaussian acceptance step (a broken sampler) is caught."""
    s = 3.5
    t = math.floor(s) + 1
    draws = noise.discrete_laplace(t, 200_000, SeededEntropy(3), 2**40)
    assert chi_square_p_value(draws, lambda k: discrete_gaussian_pmf(s, k)) < ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("gamma", [0.0, 0.3, 1.0, 2.7])
def test_bernoulli_exp_minus_frequency(gamma):
    n = 200_000
    hits = noise._bernoulli_exp_minus(np.full(n, gamma), SeededEntropy(11)).sum()
    assert stats.binomtest(int(hits), n, math.exp(-gamma)).pvalue > ALPHA


def test_bernoulli_is_exactly_ceil_p_2_53_over_2_53():
    """W = k 2^-53 < p accepts exactly the k below ceil(p 2^53): checked at the edges."""
    for p in (0.5, 0.5 + 3 * 2.0**-53, math.exp(-1.0), 1.0, 2.0**-53, 0.0):
        cut = math.ceil(p * 2.0**53)
        edges = sorted({k for k in (cut - 1, cut, cut + 1) if 0 <= k < 2**53})
        ks = np.array(edges, dtype=np.uint64)
        words = ks << np.uint64(11) | np.uint64(2**11 - 1)  # low bits must be ignored
        accepted = noise._bernoulli(np.full(ks.size, p), ListEntropy(words))
        np.testing.assert_array_equal(accepted, ks < cut)


def test_uniform_below_rejects_the_biased_top():
    t = 6
    limit = (2**64 // t) * t  # 2^64 - 4: the last 4 words would favour 0..3
    words = [limit, limit + 3, 5, limit - 1]
    out = noise._uniform_below(t, 2, ListEntropy(words))
    np.testing.assert_array_equal(out, [5, (limit - 1) % t])


def test_numpy_exp_error_is_within_the_documented_4_ulp():
    """privacy_excess assumes exp errs by <= 4 ulp on [-1, 0]; check it here."""
    x = -np.random.default_rng(2).uniform(0, 1, 3000)  # TEST-ONLY points
    y = np.exp(x)
    with mpmath.workdps(40):
        errors = [
            (mpmath.mpf(float(yi)) - mpmath.exp(mpmath.mpf(float(xi))))
            / mpmath.mpf(float(np.spacing(yi)))
            for xi, yi in zip(x, y)
        ]
    worst = max(abs(float(e)) for e in errors)
    assert worst <= 4.0


def test_discrete_gaussian_is_close_to_the_rounded_gaussian():
    """The lemma of docs/privacy.md: |log q(k)/p(k)| <= (1 + k^2/s^2)/(8 s^2) + 3 e^(-2 pi^2 s^2).

    p is N_Z(0, s^2), q the law of round(Z), Z ~ N(0, s^2); checked in 50 digits.
    """
    for s in (1.5, 4.0, 16.0):
        with mpmath.workdps(50):
            support = range(-int(80 * s), int(80 * s))
            norm = mpmath.fsum(mpmath.exp(-(mpmath.mpf(j) ** 2) / (2 * s * s)) for j in support)
            ratios = []
            for k in range(-int(8 * s), int(8 * s) + 1):
                p = mpmath.exp(-(mpmath.mpf(k) ** 2) / (2 * s * s)) / norm
                q = mpmath.ncdf((k + mpmath.mpf(0.5)) / s) - mpmath.ncdf((k - mpmath.mpf(0.5)) / s)
                ratios.append((k, abs(float(mpmath.log(q / p)))))
        tail = 3 * math.exp(-2 * math.pi**2 * s * s)
        assert all(r <= (1 + k * k / s**2) / (8 * s * s) + tail for k, r in ratios)
        assert any(r > 1 / (8 * s * s) + tail for k, r in ratios)  # a bound without k^2 is false


# -- float safety and the lattice ------------------------------------------------------------


def on_lattice(values: np.ndarray, step: float) -> bool:
    scaled = values / step
    return bool(np.all(scaled == np.rint(scaled)))


def test_lattice_outputs_are_exact_lattice_points():
    sigma = 2.3e-3
    x = np.random.default_rng(8).normal(size=5000)  # TEST-ONLY data
    step = lattice_step(sigma)
    assert sigma / step >= 2.0**40
    assert on_lattice(LatticeSampler().add_noise(x, sigma), step)
    # The naive float sampler (a broken mechanism for privacy) is not on any lattice.
    assert not on_lattice(seeded_sampler(1).add_noise(x, sigma), step)


def test_opendp_coarse_outputs_are_on_its_grid():
    sigma = 2.3e-3
    x = np.random.default_rng(9).normal(size=200)  # TEST-ONLY data
    sampler = OpenDPSampler(lattice_bits=40)
    assert on_lattice(sampler.add_noise(x, sigma), 2.0 ** sampler._k(sigma))


def test_low_bits_of_the_input_do_not_reach_the_output():
    """Mironov's attack reads the input from the low bits of the output.

    Two inputs in the same lattice cell that differ in their low bits give, with the
    same (test-only) entropy, bit-identical lattice outputs: the output is a function of
    the lattice index and the integer noise only.  The naive float sampler (a broken
    mechanism) gives outputs that differ, which is what lets an attacker tell them apart.
    """
    sigma = 1e-3
    step = lattice_step(sigma)
    rng = np.random.default_rng(4)  # TEST-ONLY data
    cells = rng.integers(-(2**45), 2**45, size=1000).astype(float)
    x = step * (cells + rng.uniform(-0.45, 0.45, size=1000))
    x_other = step * (cells + rng.uniform(-0.45, 0.45, size=1000))
    assert np.all(x != x_other)
    a, b = LatticeSampler(), LatticeSampler()
    a._entropy, b._entropy = SeededEntropy(21), SeededEntropy(21)
    np.testing.assert_array_equal(a.add_noise(x, sigma), b.add_noise(x_other, sigma))
    naive_x = seeded_sampler(21).add_noise(x, sigma)
    naive_other = seeded_sampler(21).add_noise(x_other, sigma)
    assert np.all(naive_x != naive_other)


def rounded(values: np.ndarray, step: float) -> np.ndarray:
    return step * np.rint(values / step)


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 40),
    sigma=st.floats(1e-8, 10.0),
)
def test_sensitivity_slack_covers_the_rounding(data, n, sigma):
    elements = st.floats(-100, 100)
    x = data.draw(hnp.arrays(np.float64, n, elements=elements))
    y = data.draw(hnp.arrays(np.float64, n, elements=elements))
    step = lattice_step(sigma)
    moved = np.linalg.norm(rounded(x, step) - rounded(y, step))
    assert moved <= np.linalg.norm(x - y) + LatticeSampler().sensitivity_slack(n, sigma)


@settings(max_examples=60, deadline=None)
@given(a=symmetric_matrices, b=symmetric_matrices, sigma=st.floats(1e-6, 1.0))
def test_sensitivity_slack_covers_the_symmetric_rounding(a, b, sigma):
    """Diagonal on L(sigma), off-diagonal on L(sigma/sqrt2), measured in vecd's norm."""
    if a.shape != b.shape:
        return
    d = a.shape[0]
    rows, cols = np.triu_indices(d, 1)
    sigma_off = noise._scale_down_by_sqrt2(sigma)

    def lattice_vecd(m):
        diagonal = rounded(np.diag(m), lattice_step(sigma))
        off_diagonal = SQRT2 * rounded(m[rows, cols], lattice_step(sigma_off))
        return np.concatenate([diagonal, off_diagonal])

    moved = np.linalg.norm(lattice_vecd(a) - lattice_vecd(b))
    exact = np.linalg.norm(vecd(a) - vecd(b))
    assert moved <= exact * (1 + 1e-12) + LatticeSampler().sensitivity_slack(
        d * (d + 1) // 2, sigma
    )


def test_rounding_needs_a_slack():
    """Without slack the claim is false: rounding can move neighbours a whole step apart."""
    sigma = 1.0
    step = lattice_step(sigma)
    x, y = np.array([0.49 * step]), np.array([0.51 * step])
    assert np.linalg.norm(rounded(x, step) - rounded(y, step)) > np.linalg.norm(x - y) + 0.0
    assert LatticeSampler().sensitivity_slack(1, sigma) >= step


def test_slack_and_excess_values():
    n = 3000 * 3001 // 2
    lattice = LatticeSampler()
    assert lattice.sensitivity_slack(n, 1.0) == pytest.approx(2.0**-40 * math.sqrt(2 * n), rel=1e-9)
    assert 1e-8 < lattice.privacy_excess(n, 1.0) < 1e-7
    assert OpenDPSampler().sensitivity_slack(n, 1.0) == 0.0
    assert 0.0 < OpenDPSampler().privacy_excess(n, 1.0) < 1e-280
    assert 0.0 < OpenDPSampler(lattice_bits=40).sensitivity_slack(n, 1.0) < 1e-8
    assert seeded_sampler(0).sensitivity_slack(n, 1.0) == 0.0


# -- entropy, construction, validation ------------------------------------------------------


def test_seeded_sampler_warns_and_repeats():
    with pytest.warns(NonPrivateRandomStateWarning):
        a = SeededSampler(3)
    with pytest.warns(NonPrivateRandomStateWarning):
        b = SeededSampler(3)
    assert not a.is_private
    np.testing.assert_array_equal(a.add_noise(np.zeros(5), 1.0), b.add_noise(np.zeros(5), 1.0))
    assert LatticeSampler.is_private and OpenDPSampler.is_private


def default_sampler(n_entries):
    return make_sampler("gaussian", n_entries=n_entries)


def test_default_sampler_rule():
    assert isinstance(default_sampler(100 * 101 // 2), OpenDPSampler)
    # OpenDP on a grid 40 bits below sigma (~4x faster than every float's), whose
    # rounding the calibration must add (test_privacy_report_rederives_sigma_by_hand).
    assert default_sampler(528).lattice_bits == DEFAULT_LATTICE_BITS
    assert 0.0 < default_sampler(528).sensitivity_slack(528, 1.0) < 1e-10
    assert isinstance(default_sampler(OPENDP_MAX_ENTRIES), OpenDPSampler)
    assert isinstance(default_sampler(OPENDP_MAX_ENTRIES + 1), LatticeSampler)
    assert isinstance(default_sampler(1000 * 1001 // 2), LatticeSampler)
    with pytest.raises(ValueError, match="n_entries"):
        default_sampler(-1)


def test_lattice_parameters_are_validated():
    with pytest.raises(ValueError, match="lattice_bits"):
        LatticeSampler(10)
    with pytest.raises(ValueError, match="lattice_bits"):
        OpenDPSampler(lattice_bits=5)
    with pytest.raises(ValueError, match="sigma"):
        lattice_step(1e-300)


def test_add_symmetric_noise_keeps_the_input_and_validates():
    m = MATRIX.copy()
    out = add_symmetric_noise(m, 0.1, LatticeSampler())
    np.testing.assert_array_equal(m, MATRIX)
    assert np.array_equal(out, out.T)
    with pytest.raises(ValueError, match="matrix"):
        add_symmetric_noise(np.ones((2, 3)), 0.1, LatticeSampler())
    with pytest.raises(ValueError, match="sigma"):
        add_symmetric_noise(m, -1.0, LatticeSampler())


def test_off_diagonal_scale_is_rounded_up():
    for sigma in np.geomspace(1e-12, 1e6, 500):
        scaled = noise._scale_down_by_sqrt2(float(sigma))
        assert mpmath.mpf(scaled) >= mpmath.mpf(float(sigma)) / mpmath.sqrt(2)
