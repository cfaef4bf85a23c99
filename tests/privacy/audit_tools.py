"""Black-box audits of the score map's mechanisms: an optimal test on worst-case neighbours,
Clopper-Pearson bounds on its error rates, and the privacy they certify.

Each audit chooses the test (a threshold on a scalar statistic of the output) on one set
of draws and certifies on fresh ones, so the certified bound holds with confidence
``1 - ALPHA`` whatever was chosen.  Nothing the mechanism reports enters: the statistic is
fixed by the auditor from the two neighbouring data sets.

* :func:`epsilon_lower_bound`: for pure or approximate DP, the (epsilon, delta) inequality
  ``P(E | S) <= e^eps P(E | S') + delta`` on the event ``E = {statistic > t}`` (both ways).
* :func:`mu_lower_bound`: for mu-Gaussian DP, the trade-off inequality
  ``FNR >= Phi(Phi^-1(1 - FPR) - mu)`` of every test, so
  ``mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import stats

#: P(a correct mechanism is flagged) <= ALPHA; each of the two one-sided bounds gets half.
ALPHA = 1e-3
ALPHA_EACH = ALPHA / 2
CANDIDATE_QUANTILES = np.linspace(0.01, 0.99, 99)


def upper(k: int, n: int, alpha: float = ALPHA_EACH) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper bound on a binomial rate."""
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def lower(k: int, n: int, alpha: float = ALPHA_EACH) -> float:
    """One-sided (1 - alpha) Clopper-Pearson lower bound on a binomial rate."""
    return 0.0 if k <= 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


def epsilon_bound(a: np.ndarray, b: np.ndarray, t: float, delta: float) -> float:
    """The epsilon certified by the events ``{stat > t}`` and ``{stat <= t}``, both ways."""
    best = -math.inf
    for x, y in ((a, b), (b, a)):
        for event in (lambda v: v > t, lambda v: v <= t):
            hi = upper(int(np.sum(event(x))), x.size)  # P(E | x-side) at most this
            lo = lower(int(np.sum(event(y))), y.size)  # P(E | y-side) at least this
            if lo - delta > 0 and hi > 0:
                best = max(best, math.log((lo - delta) / hi))
    return best


def mu_bound(a: np.ndarray, b: np.ndarray, t: float) -> float:
    """The mu certified by the test "b-side when stat > t" (``a``: the null side)."""
    fpr = upper(int(np.sum(a > t)), a.size)
    fnr = upper(int(np.sum(b <= t)), b.size)
    if fpr >= 1.0 or fnr >= 1.0:
        return -math.inf
    return float(stats.norm.isf(fpr) - stats.norm.ppf(fnr))


def audit(
    draw: Callable[[int, int], np.ndarray],
    n_choose: int,
    n_certify: int,
    bound: Callable[[np.ndarray, np.ndarray, float], float],
) -> float:
    """``draw(side, n)`` gives n statistics on neighbour ``side`` (0 or 1); the bound
    certified on fresh draws at the threshold that certifies most on the first ones."""
    a, b = draw(0, n_choose), draw(1, n_choose)
    pooled = np.concatenate([a, b])
    candidates = np.unique(np.concatenate([np.quantile(pooled, CANDIDATE_QUANTILES), pooled]))
    threshold = max(candidates, key=lambda t: bound(a, b, t))
    return bound(draw(0, n_certify), draw(1, n_certify), threshold)
