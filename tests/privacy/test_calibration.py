"""Calibration of the Gaussian mechanism: every claim against an independent oracle.

Oracles: a 60-digit mpmath evaluation of the Balle-Wang profile, dp_accounting's
GaussianPrivacyLoss, the hockey-stick divergence of two 1-D Gaussians by numerical
integration and by Monte Carlo.  Seeds below are TEST-ONLY (the Monte-Carlo sample).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dask_dppca.privacy.mechanisms.calibration import (
    DELTA_RANGE,
    DELTA_RELATIVE_ERROR,
    EPSILON_RANGE,
    PrivacyTarget,
    analytic_gaussian_sigma,
    calibrate_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    gaussian_dp_delta,
    gaussian_dp_epsilon,
    gaussian_dp_mu,
    validate_privacy_parameters,
)

EPSILONS = [1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0]
DELTAS = [1e-12, 1e-8, 1e-6, 1e-5, 1e-3, 0.1]


def exact_delta(epsilon: float, mu: float) -> mpmath.mpf:
    """The Balle-Wang profile in 60-digit arithmetic."""
    with mpmath.workdps(60):
        eps, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return +(mpmath.ncdf(m / 2 - eps / m) - mpmath.exp(eps) * mpmath.ncdf(-m / 2 - eps / m))


def paper_sigma(n: int, epsilon: float, delta: float) -> float:
    """The paper's sigma, 4/n * sqrt(2 ln(1.25/delta)) / epsilon, for any epsilon."""
    return 4.0 / n * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


# -- validation -------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [float("nan"), 0.0, -1.0, float("inf"), "x", None])
def test_bad_epsilon_is_named(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        validate_privacy_parameters(epsilon, 1e-6)


@pytest.mark.parametrize("delta", [float("nan"), 0.0, 1.0, -1e-6, 1.5, float("inf")])
def test_bad_delta_is_named(delta):
    with pytest.raises(ValueError, match="delta"):
        validate_privacy_parameters(1.0, delta)


def test_error_message_shows_the_value():
    with pytest.raises(ValueError, match=r"epsilon: must be finite and > 0, got nan"):
        validate_privacy_parameters(float("nan"), 1e-6)


@pytest.mark.parametrize("sensitivity", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_sensitivity_is_named(sensitivity):
    with pytest.raises(ValueError, match="sensitivity"):
        analytic_gaussian_sigma(sensitivity, 1.0, 1e-6)


def test_unknown_calibration_is_named():
    with pytest.raises(ValueError, match="calibration"):
        calibrate_sigma(1.0, 1.0, 1e-6, calibration="laplace")


def test_classical_refuses_epsilon_at_least_one():
    with pytest.raises(ValueError, match="epsilon.*proven only for epsilon < 1.*analytic"):
        classical_gaussian_sigma(1.0, 1.0, 1e-6)
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_sigma(1.0, 3.0, 1e-6, calibration="classical")


# -- the profile itself --------------------------------------------------------------------


def test_profile_matches_mpmath_to_far_below_the_safety_margin():
    worst = 0.0
    for eps in EPSILONS + [1e-6, 100.0]:
        for delta in DELTAS + [1e-15, 0.5]:
            mu = gaussian_dp_mu(eps, delta)
            for factor in (0.3, 0.9, 1.0, 1.1, 3.0):
                want = exact_delta(eps, mu * factor)
                if want < 1e-300:
                    continue
                got = gaussian_dp_delta(eps, mu * factor)
                worst = max(worst, abs(got - float(want)) / float(want))
    # The calibration keeps DELTA_RELATIVE_ERROR as a margin; the measured error must
    # be far below it for the margin to make the result conservative.
    assert worst < DELTA_RELATIVE_ERROR / 100, worst


def test_the_accuracy_test_rejects_the_direct_subtraction():
    """A naive Phi(.) - e^eps Phi(.) (what a broken version would do) fails the bar."""

    def naive(eps, mu):
        return stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(
            -mu / 2 - eps / mu
        )

    errors = []
    for eps in (1e-3, 1.0, 10.0):
        for delta in (1e-12, 1e-8):
            mu = gaussian_dp_mu(eps, delta)
            errors.append(abs(naive(eps, mu) - float(exact_delta(eps, mu))) / delta)
    assert max(errors) > DELTA_RELATIVE_ERROR / 100


def test_profile_agrees_with_dp_accounting():
    for eps in [0.1, 0.5, 1.0, 2.0, 5.0]:
        for delta in [1e-8, 1e-6, 1e-3]:
            sens = 0.37
            sigma = analytic_gaussian_sigma(sens, eps, delta)
            for factor in (0.8, 1.0, 1.25):
                ours = gaussian_delta(eps, sens, sigma * factor)
                theirs = GaussianPrivacyLoss(
                    sigma * factor, sensitivity=sens
                ).get_delta_for_epsilon(eps)
                assert ours == pytest.approx(theirs, rel=1e-6)


def test_profile_is_monotone_and_bounded():
    mus = np.geomspace(1e-4, 50, 200)
    deltas = [gaussian_dp_delta(1.0, m) for m in mus]
    assert all(0.0 <= x <= 1.0 for x in deltas)
    assert np.all(np.diff(deltas) >= 0)
    assert gaussian_dp_delta(1.0, 0.0) == 0.0
    assert gaussian_dp_delta(1.0, math.inf) == 1.0


# -- analytic calibration ------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", DELTAS)
def test_analytic_sigma_is_conservative_and_tight(epsilon, delta):
    sens = 2.0 * math.sqrt(2.0) / 1000
    sigma = analytic_gaussian_sigma(sens, epsilon, delta)
    assert gaussian_delta(epsilon, sens, sigma) <= delta  # the floating-point check
    assert exact_delta(epsilon, sens / sigma) <= delta  # and the exact profile
    assert gaussian_delta(epsilon, sens, 0.99 * sigma) > delta  # tight: 1 % less fails
    assert exact_delta(epsilon, sens / (sigma * (1 - 1e-7))) > delta * (
        1 - 2 * DELTA_RELATIVE_ERROR
    )


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 0.9, 0.999])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-6, 1e-8, 1e-12])
def test_analytic_below_classical_on_grid(epsilon, delta):
    assert analytic_gaussian_sigma(1.0, epsilon, delta) < classical_gaussian_sigma(
        1.0, epsilon, delta
    )


@settings(max_examples=60, deadline=None)
@given(
    epsilon=st.floats(1e-3, 0.999),
    delta=st.floats(1e-14, 0.2),
    sens=st.floats(1e-9, 1e3),
)
def test_analytic_below_classical_property(epsilon, delta, sens):
    analytic = analytic_gaussian_sigma(sens, epsilon, delta)
    classical = classical_gaussian_sigma(sens, epsilon, delta)
    assert analytic < classical
    # and the classical sigma is itself private under the exact profile
    assert gaussian_delta(epsilon, sens, classical) <= delta


def test_tight_sensitivity_and_analytic_calibration_cut_sigma_by_0_564_at_epsilon_1():
    n = 10_000
    ratio = analytic_gaussian_sigma(2 * math.sqrt(2) / n, 1.0, 1e-6) / paper_sigma(n, 1.0, 1e-6)
    assert ratio == pytest.approx(0.564, abs=1e-3)
    assert ratio <= 0.57


def test_sigma_scales_with_sensitivity():
    base = analytic_gaussian_sigma(1.0, 0.7, 1e-6)
    for c in (1e-8, 3.0, 1e6):
        assert analytic_gaussian_sigma(c, 0.7, 1e-6) == pytest.approx(c * base, rel=1e-12)


def test_calibrate_sigma_dispatches():
    assert calibrate_sigma(2.0, 0.5, 1e-6) == analytic_gaussian_sigma(2.0, 0.5, 1e-6)
    assert calibrate_sigma(2.0, 0.5, 1e-6, "classical") == classical_gaussian_sigma(2.0, 0.5, 1e-6)


def test_excess_is_charged_conservatively():
    plain = calibrate_sigma(1.0, 1.0, 1e-6)
    excess = 1e-3
    charged = calibrate_sigma(1.0, 1.0, 1e-6, excess=excess)
    assert charged > plain
    # The sampled mechanism is (eps' + 2A, e^A delta')-DP with eps', delta' those of the
    # ideal Gaussian at `charged`: it must land within the requested (1, 1e-6).
    eps_ideal = 1.0 - 2 * excess
    assert math.exp(excess) * gaussian_delta(eps_ideal, 1.0, charged) <= 1e-6
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_sigma(1.0, 1e-3, 1e-6, excess=1e-3)
    with pytest.raises(ValueError, match="delta"):
        calibrate_sigma(1.0, 1.0, 1e-120, excess=1e-9)
    with pytest.raises(ValueError, match="excess"):
        calibrate_sigma(1.0, 1.0, 1e-6, excess=-1.0)


def test_epsilon_of_mu_inverts_the_profile():
    for mu in (0.01, 0.3, 1.0, 4.0):
        for delta in (1e-8, 1e-5):
            eps = gaussian_dp_epsilon(mu, delta)
            assert gaussian_dp_delta(eps, mu) <= delta
            assert gaussian_dp_delta(eps * 0.999, mu) > delta
    assert gaussian_dp_epsilon(0.0, 1e-6) == 0.0


# -- the guarantee itself: hockey-stick divergence of the 1-D mechanism ----------------


def hockey_stick_by_integration(epsilon: float, sens: float, sigma: float) -> float:
    """sup_S P(S) - e^eps Q(S) for P = N(sens, sigma^2), Q = N(0, sigma^2), by quadrature."""
    # P - e^eps Q > 0 exactly where the privacy loss exceeds epsilon: x > threshold.
    threshold = epsilon * sigma**2 / sens + sens / 2

    def integrand(x):
        return stats.norm.pdf(x, sens, sigma) - math.exp(epsilon) * stats.norm.pdf(x, 0.0, sigma)

    value, _ = integrate.quad(
        integrand, threshold, threshold + 40 * sigma, epsabs=0, epsrel=1e-11, limit=200
    )
    return value


@pytest.mark.parametrize("epsilon,delta", [(0.5, 1e-6), (1.0, 1e-5), (3.0, 1e-8), (10.0, 1e-6)])
def test_calibrated_sigma_meets_delta_by_integration(epsilon, delta):
    sens = 0.02
    sigma = analytic_gaussian_sigma(sens, epsilon, delta)
    by_quadrature = hockey_stick_by_integration(epsilon, sens, sigma)
    assert by_quadrature == pytest.approx(gaussian_delta(epsilon, sens, sigma), rel=1e-7)
    assert by_quadrature <= delta * (1 + 1e-9)
    # A broken calibration -- the released dppca 0.1.0 used half the needed sigma --
    # fails the same check by orders of magnitude.
    assert hockey_stick_by_integration(epsilon, sens, sigma / 2) > 10 * delta


@pytest.mark.statistical
def test_calibrated_sigma_meets_delta_by_monte_carlo():
    """delta = E_P[(1 - e^(eps - L))_+], L the privacy loss, estimated from samples."""
    rng = np.random.default_rng(20240601)  # TEST-ONLY seed: the Monte-Carlo sample
    epsilon, delta, sens = 1.0, 1e-3, 1.0
    n = 2_000_000
    z = 5.0  # |Z| > 5 has probability 6e-7: the fixed false-alarm rate

    def estimate(sigma):
        x = rng.normal(sens, sigma, size=n)
        loss = (sens * x - sens**2 / 2) / sigma**2  # log N(sens, s^2)(x) / N(0, s^2)(x)
        values = -np.expm1(np.minimum(epsilon - loss, 0.0))
        return values.mean(), values.std() / math.sqrt(n)

    sigma = analytic_gaussian_sigma(sens, epsilon, delta)
    mean, se = estimate(sigma)
    assert abs(mean - gaussian_delta(epsilon, sens, sigma)) < z * se
    assert mean < delta + z * se
    # 20 % too little noise is detected by the same estimator.
    broken_mean, broken_se = estimate(0.8 * sigma)
    assert broken_mean - z * broken_se > delta


# -- the accepted range: exact inside, a named refusal outside, never a loop --------------


def exact_delta_wide(epsilon: float, mu: float) -> mpmath.mpf:
    """The profile with enough digits for its two terms' difference (down to 1e-300)."""
    with mpmath.workdps(700):
        eps, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return +(mpmath.ncdf(m / 2 - eps / m) - mpmath.exp(eps) * mpmath.ncdf(-m / 2 - eps / m))


@pytest.mark.parametrize("epsilon", [EPSILON_RANGE[0], 1e-3, 1.0, EPSILON_RANGE[1]])
@pytest.mark.parametrize("delta", [DELTA_RANGE[0], 1e-30, 1e-6, 0.5, 0.999999])
def test_calibration_is_exact_at_the_corners_of_the_accepted_range(epsilon, delta):
    """Inside the range sigma meets delta under the exact profile and is tight."""
    target = PrivacyTarget.of(epsilon, delta)
    sigma = target.sigma(1.0)
    got = exact_delta_wide(epsilon, 1.0 / sigma)
    assert got <= delta
    assert got >= delta * (1 - 2 * DELTA_RELATIVE_ERROR)  # tight: no more noise than needed


@pytest.mark.parametrize("epsilon", [0.0, 1e-100, 1e-30, 1e-12, 1e-3])
@pytest.mark.parametrize("mu", [1e-20, 1e-8, 1e-3, 0.5, 2.0, 40.0])
def test_profile_is_exact_where_epsilon_is_below_mu_squared_over_2(epsilon, mu):
    """x = mu/2 - epsilon/mu >= 0: the branch that returned delta 0 at epsilon = 1e-100."""
    want = exact_delta_wide(epsilon, mu)
    assert gaussian_dp_delta(epsilon, mu) == pytest.approx(float(want), rel=1e-12, abs=0)


def test_a_tiny_epsilon_no_longer_gets_a_tiny_sigma():
    """DPPCA(epsilon=1e-100, delta=1e-20) had exact delta 1.1e-16 (11000x the target):
    the profile itself, evaluated where it went wrong, is exact now."""
    mu = gaussian_dp_mu(1e-100, 1e-20)
    assert float(exact_delta_wide(1e-100, mu)) <= 1e-20
    assert mu == pytest.approx(1e-20 * math.sqrt(2 * math.pi), rel=1e-6)


@pytest.mark.parametrize(
    "epsilon, delta, name",
    [
        (1e-100, 1e-6, "epsilon"),
        (1e-7, 1e-6, "epsilon"),
        (1000.5, 1e-6, "epsilon"),
        (1e6, 1e-6, "epsilon"),
        (1e300, 1e-6, "epsilon"),
        (1e6, 1e-120, "epsilon"),  # both out: epsilon is named first
        (1.0, 1e-101, "delta"),
        (1.0, 5e-324, "delta"),
    ],
)
def test_outside_the_range_the_right_parameter_is_named(epsilon, delta, name):
    with pytest.raises(ValueError) as error:
        PrivacyTarget.of(epsilon, delta)
    message = str(error.value)
    assert message.startswith(f"{name}:") and "exact" in message, message
    assert repr(float(epsilon if name == "epsilon" else delta)) in message


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "epsilon, delta", [(1.0, 5e-324), (700.0, 5e-324), (1e-300, 1e-300), (1e300, 1e-6)]
)
def test_the_profile_functions_end_outside_the_range_too(epsilon, delta):
    """The internal solvers (a budget evaluates them at what is left) never loop: they
    return a conservative value or raise."""
    try:
        mu = gaussian_dp_mu(epsilon, delta)
    except RuntimeError:
        return
    assert gaussian_dp_delta(epsilon, mu) <= delta


@pytest.mark.parametrize("epsilon, delta", [(1e4, 1e-5), (2.0, 1e-120)])
def test_a_budget_outside_the_range_is_refused_when_made(epsilon, delta, tmp_path):
    from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget

    name = "epsilon" if epsilon > EPSILON_RANGE[1] else "delta"
    with pytest.raises(ValueError, match=f"^{name}:"):
        PrivacyBudget(epsilon=epsilon, delta=delta)


def test_a_budget_at_the_edges_of_the_range_admits_a_release_at_its_totals():
    from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, PrivacyBudget

    for epsilon, delta in [(EPSILON_RANGE[1], DELTA_RANGE[0]), (EPSILON_RANGE[0], 0.5)]:
        budget = PrivacyBudget(epsilon=epsilon, delta=delta)
        sigma = PrivacyTarget.of(epsilon, delta).sigma(1.0)
        budget.check(GaussianCharge(1.0, sigma, 0.0, epsilon, delta))
