"""Calibrating the Gaussian mechanism: sigma from (sensitivity, epsilon, delta).

Two calibrations are offered (docs/method.md, section 5; docs/privacy.md "Calibration"):

* ``"analytic"`` (Balle & Wang 2018): the smallest sigma for which the Gaussian
  mechanism of l2 sensitivity ``Delta`` is (epsilon, delta)-DP, from the exact privacy
  profile

      delta(epsilon) = Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu),
      mu = Delta / sigma.

  Valid for every epsilon > 0.
* ``"classical"`` (Dwork & Roth 2014, Theorem A.1): ``Delta sqrt(2 ln(1.25/delta)) /
  epsilon``, proven only for epsilon < 1; what the paper uses.

Implementation choice.  The profile is hand-written (scipy's ``erfcx`` and
``log_ndtr``, see ``log_delta``) rather than taken from dp_accounting's
``GaussianPrivacyLoss.get_delta_for_epsilon``: that one subtracts the two nearly equal
terms directly, which loses relative accuracy when delta is far below
``Phi(mu/2 - eps/mu)`` (1e-9 at epsilon = 1e-3, far more at large epsilon), and a
calibration must be accurate in relative terms at delta = 1e-12 as well as at 1e-3.
The tests check this implementation against dp_accounting where both are accurate and
against a 60-digit mpmath evaluation on a wide grid (measured error < 2e-13 relative);
calibration then keeps :data:`DELTA_RELATIVE_ERROR`, four orders above that, as a
margin, so that the sigma returned satisfies the *exact* profile, not only its
floating-point evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import erf, erfcx, log_ndtr

from ...validation import nonnegative_finite, positive_finite, real_number

__all__ = [
    "CALIBRATIONS",
    "DELTA_RANGE",
    "DELTA_RELATIVE_ERROR",
    "EPSILON_RANGE",
    "GL_NODES",
    "GL_WEIGHTS",
    "PrivacyTarget",
    "analytic_gaussian_sigma",
    "apply_excess",
    "calibrate_sigma",
    "check_calibration_range",
    "classical_gaussian_sigma",
    "gaussian_delta",
    "gaussian_dp_delta",
    "gaussian_dp_epsilon",
    "gaussian_dp_mu",
    "log_delta",
    "validate_privacy_parameters",
]

CALIBRATIONS = ("analytic", "classical")

#: Bound on the relative error of :func:`gaussian_dp_delta` against the exact profile.
#: tests/privacy/test_calibration.py measures the error against 50-digit mpmath on a grid
#: spanning epsilon in [1e-3, 50] and delta in [1e-15, 0.5] and asserts it stays 100x
#: below this value.  Calibration targets ``delta * (1 - DELTA_RELATIVE_ERROR)`` so
#: that the exact delta of the returned sigma is <= the requested delta.
DELTA_RELATIVE_ERROR = 1e-9

_SQRT2 = math.sqrt(2.0)

#: Relative allowance for the rounding of ``mu = Delta / sigma`` (and of the budget's
#: ``sqrt(sum mu_i^2)``): a calibrated sigma meets the profile even at mu times this.
MU_ROUND_UP = 1.0 + 16.0 * 2.0**-53

#: The accepted range of epsilon: ``EPSILON_RANGE[0] <= epsilon <= EPSILON_RANGE[1]``.
#: Inside it (with delta in :data:`DELTA_RANGE`) every calibration is exact to
#: :data:`DELTA_RELATIVE_ERROR` (tests/privacy/test_calibration.py checks the corners
#: against high-precision mpmath); the upper end is where a sampler's privacy excess is
#: accounted (docs/privacy.md, "Noise sampler and floating point").  Below 1e-6 a
#: release is noise whatever n is; above 1000 it is not private in any useful sense.
EPSILON_RANGE = (1e-6, 1000.0)
#: The accepted range of delta: ``DELTA_RANGE[0] <= delta < DELTA_RANGE[1]``.  The lower
#: end is where the tail terms of the sampler's approximation lemma stay below
#: ``1e-30 * delta`` (docs/privacy.md, "Noise sampler and floating point").
DELTA_RANGE = (1e-100, 1.0)
_MIN_DELTA_WITH_EXCESS = DELTA_RANGE[0]
_MAX_EPSILON_WITH_EXCESS = EPSILON_RANGE[1]


# -- validation --------------------------------------------------------------------


def validate_privacy_parameters(epsilon: float, delta: float) -> tuple[float, float]:
    """Check a user's (epsilon, delta) and return them as floats.

    The one check of a privacy target (:meth:`PrivacyTarget.of`) and of a budget's
    totals: both must lie in the accepted range, where every calibration is exact.

    Parameters
    ----------
    epsilon : float
        Must be finite and in :data:`EPSILON_RANGE` (1e-6 to 1000).
    delta : float
        Must satisfy :data:`DELTA_RANGE` ``[0] <= delta < 1`` (1e-100 to 1).

    Returns
    -------
    (float, float)
        ``(epsilon, delta)``.

    Raises
    ------
    ValueError
        Naming the offending parameter (epsilon first), its value and the range.
    """
    eps, dlt = _profile_arguments(epsilon, delta)
    low, high = EPSILON_RANGE
    if not (low <= eps <= high):
        raise ValueError(
            f"epsilon: must be between {low:g} and {high:g} (the range where the "
            f"calibration is exact), got {eps!r}"
        )
    if dlt < DELTA_RANGE[0]:
        raise ValueError(
            f"delta: must be at least {DELTA_RANGE[0]:g} (the range where the calibration "
            f"is exact), got {dlt!r}"
        )
    return eps, dlt


def _profile_arguments(epsilon: float, delta: float) -> tuple[float, float]:
    """(epsilon, delta) of the profile's functions: finite epsilon > 0, 0 < delta < 1.

    Wider than the accepted range on purpose: a budget's bookkeeping evaluates the
    profile at what is left (an epsilon far below 1e-6 for a budget nearly spent).
    """
    eps = positive_finite("epsilon", epsilon)
    dlt = real_number("delta", delta)
    if not (0.0 < dlt < 1.0):  # also rejects nan
        raise ValueError(f"delta: must satisfy 0 < delta < 1, got {dlt!r}")
    return eps, dlt


@dataclass(frozen=True)
class PrivacyTarget:
    """A release's privacy target, valid by construction: build it with :meth:`of`.

    Attributes
    ----------
    epsilon : float
        Finite and > 0.
    delta : float
        In (0, 1).
    calibration : {"analytic", "classical"}
        ``"classical"`` only with epsilon < 1, where it is proven.
    """

    epsilon: float
    delta: float
    calibration: str = "analytic"

    @classmethod
    def of(cls, epsilon: float, delta: float, calibration: str = "analytic") -> PrivacyTarget:
        """Check the parameters (one error naming the first bad one) and build the target.

        Raises
        ------
        ValueError
            Naming ``epsilon``, ``delta`` or ``calibration``.
        """
        if not (isinstance(calibration, str) and calibration in CALIBRATIONS):
            raise ValueError(
                f"calibration: unknown value {calibration!r}; expected one of "
                f"{', '.join(map(repr, CALIBRATIONS))}"
            )
        eps, dlt = validate_privacy_parameters(epsilon, delta)
        check_calibration_range(calibration, eps)
        return cls(eps, dlt, calibration)

    def sigma(self, sensitivity: float, excess: float = 0.0) -> float:
        """The noise scale of a Gaussian release of l2 ``sensitivity`` at this target."""
        eps, dlt = apply_excess(self.epsilon, self.delta, excess)
        if self.calibration == "analytic":
            return analytic_gaussian_sigma(sensitivity, eps, dlt)
        return classical_gaussian_sigma(sensitivity, eps, dlt)


# -- the exact privacy profile of the Gaussian mechanism ----------------------------


#: The 12-node Gauss-Legendre rule on [-1, 1] (nodes, weights) for the short-interval
#: integral in :func:`log_delta` (and its vectorised twin in :mod:`.accounting`).
GL_NODES, GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfcx_difference(p: float, width: float) -> float:
    """``erfcx(p) - erfcx(p + width)`` for ``p >= 0``, ``width > 0``, to full relative precision.

    The width is passed, not ``p + width``: forming ``q - p`` from a rounded ``q`` would
    lose ``ulp(q) / width`` relative accuracy.  A plain subtraction cancels when
    ``width`` is small (small mu); then integrate ``-erfcx'(t) = 2/sqrt(pi) - 2 t
    erfcx(t) > 0`` over ``[p, p + width]``: the integrand is smooth (erfcx is entire) and
    positive, so 12 Gauss-Legendre nodes reach machine precision on an interval this
    short.
    """
    if width > 0.5:
        return float(erfcx(p) - erfcx(p + width))
    half = 0.5 * width
    t = (p + half) + half * GL_NODES
    integrand = _TWO_OVER_SQRT_PI - 2.0 * t * erfcx(t)
    return float(half * np.dot(GL_WEIGHTS, integrand))


def log_delta(epsilon: float, mu: float) -> float:
    """Log of the Balle-Wang delta for GDP parameter ``mu`` (``-inf`` when it is 0).

    With ``x = mu/2 - epsilon/mu`` the profile is ``Phi(x) - e^epsilon Phi(x - mu)``.
    For ``x < 0`` (the useful range, epsilon > mu^2/2) the identity
    ``e^epsilon phi(x - mu) = phi(x)`` gives, with erfcx the scaled erfc,

        delta = e^(-x^2/2) / 2 * (erfcx(-x/sqrt2) - erfcx((mu - x)/sqrt2)),

    which avoids the cancellation of the two nearly equal terms (relative error
    below 1e-12 where the direct formula loses 1e-9 at epsilon = 1e-3).  For
    ``x >= 0`` (epsilon <= mu^2/2) see ``_log_delta_above_zero``.  Exact for every
    real epsilon, negative ones included (the accountant evaluates the profile at
    shifted epsilons: :mod:`dask_dppca.privacy.mechanisms.accounting`).

    Parameters
    ----------
    epsilon : float
        Any real number.
    mu : float
        >= 0 (``inf`` allowed).

    Returns
    -------
    float
        ``log delta(epsilon; mu)``, at most 0.
    """
    if mu == 0.0:
        return math.log(-math.expm1(epsilon)) if epsilon < 0.0 else -math.inf
    if math.isinf(mu):
        return 0.0
    x = mu / 2.0 - epsilon / mu
    if x < 0.0:
        diff = _erfcx_difference(-x / _SQRT2, mu / _SQRT2)
        if not diff > 0.0:
            return -math.inf
        return -0.5 * x * x + math.log(0.5 * diff)
    return _log_delta_above_zero(epsilon, mu, x)


def _log_delta_above_zero(epsilon: float, mu: float, x: float) -> float:
    """Log delta for ``x = mu/2 - epsilon/mu >= 0``, accurate for every mu > 0.

    Written as ``delta = [Phi(x) - Phi(x - mu)] - (e^epsilon - 1) Phi(x - mu)``.  The
    bracket is ``(erf(x/sqrt2) + erf((mu - x)/sqrt2)) / 2``: a sum of two non-negative
    terms (``x >= 0`` and ``mu - x > 0``), exact in relative terms even for a tiny mu
    (where ``Phi(x) - e^epsilon Phi(x - mu)`` evaluated directly is a difference of two
    numbers near 1/2 and loses everything: at epsilon = 1e-100 it gave delta 0).  The
    subtracted term is at most ~0.35 of the bracket here (epsilon <= mu^2/2), so the
    final subtraction loses at most a couple of bits.
    """
    bracket = 0.5 * (float(erf(x / _SQRT2)) + float(erf((mu - x) / _SQRT2)))
    if epsilon < 0.0:
        # A negative epsilon (the accountant's shifted profiles, privacy/mechanisms/accounting.py):
        # delta = bracket + (1 - e^epsilon) Phi(x - mu), two non-negative terms.
        added = math.log(-math.expm1(epsilon)) + float(log_ndtr(x - mu))
        if not bracket > 0.0:
            return added
        return float(np.logaddexp(math.log(bracket), added))
    if not bracket > 0.0:
        return -math.inf
    # log((e^epsilon - 1) Phi(x - mu)), without overflowing e^epsilon.
    log_rate = epsilon + math.log(-math.expm1(-epsilon)) if epsilon > 0.0 else -math.inf
    log_subtracted = log_rate + float(log_ndtr(x - mu))
    ratio = math.exp(log_subtracted - math.log(bracket))
    if not ratio < 1.0:  # pragma: no cover - ratio <= ~0.35 for x >= 0
        return -math.inf
    return math.log(bracket) + math.log1p(-ratio)


def gaussian_dp_delta(epsilon: float, mu: float) -> float:
    """Exact delta(epsilon) of a mu-GDP mechanism (a Gaussian with ``Delta/sigma = mu``).

    Parameters
    ----------
    epsilon : float
        Finite, >= 0.
    mu : float
        ``Delta / sigma`` >= 0 (``inf`` allowed: no privacy, delta = 1).

    Returns
    -------
    float
        ``Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu)``, in [0, 1].
    """
    eps = nonnegative_finite("epsilon", epsilon)
    m = real_number("mu", mu)
    if not m >= 0.0:
        raise ValueError(f"mu: must be >= 0, got {m!r}")
    return min(1.0, math.exp(log_delta(eps, m)))


def gaussian_delta(epsilon: float, sensitivity: float, sigma: float) -> float:
    """Exact delta of the Gaussian mechanism at ``epsilon`` (Balle & Wang 2018, Thm 8).

    Parameters
    ----------
    epsilon : float
        Finite, >= 0.
    sensitivity : float
        l2 sensitivity ``Delta`` >= 0 of the released vector.
    sigma : float
        Standard deviation of the independent Gaussian noise per coordinate, > 0.

    Returns
    -------
    float
        ``Phi(Delta/(2 sigma) - epsilon sigma/Delta)
        - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta)``.
    """
    sens = nonnegative_finite("sensitivity", sensitivity)
    sig = positive_finite("sigma", sigma)
    return gaussian_dp_delta(epsilon, sens / sig)


#: Halvings or doublings of a bracket end before this many steps: 2^2200 spans every
#: positive float from the smallest subnormal to the largest, so a root in range is
#: always bracketed in time, and an argument without one ends in an error, not a loop.
_MAX_BRACKET_STEPS = 2200


def _find_monotone_root(func: Callable[[float], float], lo: float, hi: float) -> float:
    """Root in log-space of an increasing ``func``; ``lo``/``hi`` expanded to bracket it."""

    def finite(x: float) -> float:
        # An underflowed log-delta is -inf; brentq needs finite values to interpolate.
        return float(np.clip(func(x), -1e300, 1e300))

    if not (0.0 < lo < math.inf and 0.0 < hi < math.inf):
        lo = hi = 1.0
    for _ in range(_MAX_BRACKET_STEPS):
        if not finite(lo) > 0.0:
            break
        lo /= 2.0
    for _ in range(_MAX_BRACKET_STEPS):
        if not finite(hi) < 0.0:
            break
        hi *= 2.0
    if not (lo > 0.0 and hi < math.inf and finite(lo) <= 0.0 <= finite(hi)):
        raise RuntimeError("no root of the privacy profile in the float range")
    if lo == hi:
        return lo
    root = brentq(
        lambda t: finite(math.exp(t)),
        math.log(lo),
        math.log(hi),
        xtol=1e-300,
        rtol=4 * np.finfo(float).eps,
        maxiter=500,
    )
    return math.exp(root)


def gaussian_dp_mu(epsilon: float, delta: float) -> float:
    """Largest ``mu = Delta/sigma`` whose Gaussian mechanism is (epsilon, delta)-DP.

    Solved on the floating-point profile at ``delta * (1 - DELTA_RELATIVE_ERROR)``, then
    lowered ulp by ulp until the evaluated profile is at or below that target, so the
    result is conservative for the exact profile.

    Parameters
    ----------
    epsilon : float
        > 0.
    delta : float
        In (0, 1).

    Returns
    -------
    float
    """
    eps, dlt = _profile_arguments(epsilon, delta)
    target = math.log(dlt * (1.0 - DELTA_RELATIVE_ERROR))
    # log(1.25) - log(delta), not log(1.25 / delta): the quotient overflows for a
    # subnormal delta.
    guess = eps / math.sqrt(2.0 * (math.log(1.25) - math.log(dlt))) if dlt < 0.8 else eps
    mu = _find_monotone_root(lambda m: log_delta(eps, m) - target, guess, guess)
    for _ in range(64):
        if log_delta(eps, mu) <= target:
            return mu
        mu = math.nextafter(mu, 0.0)
    raise RuntimeError("gaussian_dp_mu: failed to reach a conservative mu")  # pragma: no cover


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon at which a mu-GDP mechanism is (epsilon, delta)-DP.

    Conservative: the returned epsilon satisfies the profile at
    ``delta * (1 - DELTA_RELATIVE_ERROR)``.

    Parameters
    ----------
    mu : float
        >= 0.
    delta : float
        In (0, 1).

    Returns
    -------
    float
        0.0 when ``mu`` is 0 or already (0, delta)-DP.
    """
    m = nonnegative_finite("mu", mu)
    _, dlt = _profile_arguments(1.0, delta)
    target = math.log(dlt * (1.0 - DELTA_RELATIVE_ERROR))
    if log_delta(0.0, m) <= target:
        return 0.0
    # delta(epsilon) decreases in epsilon: find the root of target - log delta.
    eps = _find_monotone_root(lambda e: target - log_delta(e, m), max(m, 1e-3), max(m, 1e-3))
    for _ in range(64):
        if log_delta(eps, m) <= target:
            return eps
        eps = math.nextafter(eps, math.inf)
    raise RuntimeError(
        "gaussian_dp_epsilon: failed to reach a conservative epsilon"
    )  # pragma: no cover


# -- calibrations ----------------------------------------------------------------------


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest sigma making the Gaussian mechanism (epsilon, delta)-DP (Balle & Wang 2018).

    Solves ``Phi(Delta/(2s) - eps s/Delta) - e^eps Phi(-Delta/(2s) - eps s/Delta) = delta``
    for ``s`` with a root finder on the stable log-space evaluation of the left side,
    then raises the result ulp by ulp until the profile at ``mu = Delta/sigma * MU_ROUND_UP``
    is at most ``delta * (1 - DELTA_RELATIVE_ERROR)``, so the result is conservative.

    Parameters
    ----------
    sensitivity : float
        l2 sensitivity ``Delta`` > 0.
    epsilon : float
        > 0 (any value: the analytic calibration holds for every epsilon).
    delta : float
        In (0, 1).

    Returns
    -------
    float
        sigma > 0.
    """
    sens = positive_finite("sensitivity", sensitivity)
    eps, dlt = _profile_arguments(epsilon, delta)
    target = math.log(dlt * (1.0 - DELTA_RELATIVE_ERROR))
    sigma = sens / gaussian_dp_mu(eps, dlt)
    for _ in range(256):  # the division may have rounded sigma down
        # Check mu rounded up by a few ulps, so that a budget recomputing
        # sqrt(sum mu_i^2) from this sigma (rounding on its own) still accepts it.
        if log_delta(eps, sens / sigma * MU_ROUND_UP) <= target:
            return sigma
        sigma = math.nextafter(sigma, math.inf)
    raise RuntimeError(
        "analytic_gaussian_sigma: failed to reach a conservative sigma"
    )  # pragma: no cover


def classical_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The classical Gaussian calibration ``Delta sqrt(2 ln(1.25/delta)) / epsilon``.

    Dwork & Roth (2014), Theorem A.1; the calibration of the seed paper.  The theorem is
    proven only for 0 < epsilon < 1, so larger epsilon is refused.

    Parameters
    ----------
    sensitivity : float
        l2 sensitivity > 0.
    epsilon : float
        In (0, 1).
    delta : float
        In (0, 1).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        When ``epsilon >= 1`` (or any parameter is invalid).
    """
    sens = positive_finite("sensitivity", sensitivity)
    eps, dlt = _profile_arguments(epsilon, delta)
    check_calibration_range("classical", eps)
    return sens * math.sqrt(2.0 * math.log(1.25 / dlt)) / eps


def check_calibration_range(calibration: str, epsilon: float) -> None:
    """Refuse an epsilon outside the range where ``calibration`` is proven.

    The classical bound holds only for ``epsilon < 1``; the analytic one for every
    epsilon.  The estimator runs this with its other parameter checks, before any input
    is opened.

    Raises
    ------
    ValueError
        Naming ``epsilon``.
    """
    if calibration == "classical" and epsilon >= 1.0:
        raise ValueError(
            f"epsilon: the classical bound is proven only for epsilon < 1; "
            f"use calibration='analytic', got {epsilon!r}"
        )


def apply_excess(epsilon: float, delta: float, excess: float) -> tuple[float, float]:
    """(epsilon, delta) to calibrate the ideal Gaussian at, given a sampler's excess A.

    A sampler whose noise law is within a factor e^(+-A) of the ideal one (docs/privacy.md)
    turns an (eps', delta')-DP ideal mechanism into an (eps' + 2A, e^A delta' + tail)
    one; so calibrate at eps' = epsilon - 2A, delta' = delta e^-A (1 - 1e-30).

    Parameters
    ----------
    epsilon, delta : float
        The target of the release (or the budget's totals).
    excess : float
        The sampler's excess ``A`` >= 0 (0 returns ``(epsilon, delta)`` unchanged).

    Returns
    -------
    tuple of float
        ``(eps', delta')``.

    Raises
    ------
    ValueError
        If the excess leaves no room, or the target is outside the range where an
        excess is accounted.
    """
    a = nonnegative_finite("excess", excess)
    if a == 0.0:
        return epsilon, delta
    if epsilon > _MAX_EPSILON_WITH_EXCESS:
        raise ValueError(
            f"epsilon: a sampler excess is accounted only for epsilon <= "
            f"{_MAX_EPSILON_WITH_EXCESS:g}, got {epsilon!r}"
        )
    if delta < _MIN_DELTA_WITH_EXCESS:
        raise ValueError(
            f"delta: a sampler excess is accounted only for delta >= "
            f"{_MIN_DELTA_WITH_EXCESS:g}, got {delta!r}"
        )
    eps = epsilon - 2.0 * a
    if not eps > 0.0:
        raise ValueError(f"epsilon: {epsilon!r} leaves nothing after the sampler excess 2 * {a!r}")
    return eps, delta * math.exp(-a) * (1.0 - 1e-30)


def calibrate_sigma(
    sensitivity: float,
    epsilon: float,
    delta: float,
    calibration: str = "analytic",
    *,
    excess: float = 0.0,
) -> float:
    """Sigma for the Gaussian mechanism of l2 ``sensitivity`` at (epsilon, delta).

    Parameters
    ----------
    sensitivity : float
        l2 (Frobenius, through vecd) sensitivity > 0, including any sampler slack.
    epsilon, delta : float
        The privacy target.
    calibration : {"analytic", "classical"}
        See :func:`analytic_gaussian_sigma` and :func:`classical_gaussian_sigma`.
    excess : float, default 0.0
        A sampler's :meth:`~dask_dppca.privacy.mechanisms.noise.NoiseSampler.privacy_excess`: the
        ideal Gaussian is then calibrated at ``(epsilon - 2 excess, delta e^-excess)`` so
        that the sampled mechanism meets (epsilon, delta) exactly.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For an unknown ``calibration`` or invalid parameters.
    """
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration: must be one of {CALIBRATIONS}, got {calibration!r}")
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    return PrivacyTarget(eps, dlt, calibration).sigma(sensitivity, excess)
