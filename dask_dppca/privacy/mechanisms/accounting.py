"""Exact composition of mixed privacy parts, and the public rule that splits one budget.

Every release states its cost as parts (:mod:`.parts`).  Each part is dominated by a
known pair of distributions (``P``, ``Q``): a :class:`~.GaussianPart` by N(0, 1) and
N(mu, 1), a :class:`~.PureDPPart` by randomized response ``RR_eps`` (outcomes of
probability ``e^eps / (1 + e^eps)`` and ``1 / (1 + e^eps)``, swapped under ``Q``), an
:class:`~.ApproxDPPart` by the four-outcome pair of Kairouz, Oh & Viswanath (2015):
``P = (delta, (1 - delta) e^eps / (1 + e^eps), (1 - delta) / (1 + e^eps), 0)`` and ``Q``
the same reversed.  A composition of mechanisms, adaptive or not, is dominated by the
product of their pairs (Dong, Roth & Su 2022, Theorem 3.2, the tensor product of
trade-off functions), so its privacy profile is the hockey-stick divergence of the
products,

    delta(eps) = H_eps(P_1 x ... x P_m || Q_1 x ... x Q_m),

and this is the tightest statement the parts allow (no bound that uses only the parts'
guarantees can be smaller: the dominating pairs themselves are mechanisms with these
guarantees).

How it is computed, exactly.  The Gaussian parts compose to one Gaussian part with
``mu = sqrt(sum mu_i^2)`` (the product of unit-variance Gaussians, rotated).  The
discrete parts have a finite privacy-loss distribution: outcomes ``o`` with ``P``-mass
``w_o`` and loss ``L_o = log(p_o / q_o)``, plus the mass on outcomes with ``q_o = 0``
(infinite loss, from the ``delta`` atoms).  Conditioning on the discrete outcome,

    delta(eps) = P(L = inf) + sum_o w_o delta_G(eps - L_o; mu),

a finite sum of the Gaussian profile at shifted, possibly negative, epsilons
(``delta_G(e; mu) = Phi(-e/mu + mu/2) - e^e Phi(-e/mu - mu/2)``, valid for every real
``e``; ``max(0, 1 - e^e)`` when there is no Gaussian part).  Equal discrete parts are
merged by binomial counts: m parts ``RR_eps`` have m + 1 outcomes (``j`` favourable ones,
loss ``(2 j - m) eps``), so the sum has ``prod_g (m_g + 1)`` terms over the groups of
equal parts, enumerated exactly up to :data:`MAX_OUTCOMES` terms.

Beyond, a pessimistic lattice (a study ledger of many analyses with different totals:
each distinct epsilon at least doubles the count).  Each group's ``m_g + 1`` merged
losses are rounded *up* to multiples of one unit ``u`` and the groups are convolved
exactly on that lattice (sums of non-negative products: each entry keeps its relative
accuracy, and the weights are rounded up by a bound on it).  Raising a loss can only raise
``delta(eps)`` (each term ``delta_G(eps - L; mu)`` grows with ``L``; the infinite-loss
atom counts 1), so the result is never below the exact profile.  Each group raises the
discrete loss by less than ``u``, so with ``G`` groups

    delta_exact(eps) <= delta_lattice(eps) <= delta_exact(eps - slack) + 2 TAIL_MASS,

``slack = G u`` (``Composition.slack``): the epsilon reported is at most ``slack``
above the exact one (at ``delta - 2 TAIL_MASS``).  After each convolution at most
``TAIL_MASS / (2 G)`` of mass is moved from each tail, the upper one to infinite loss, the
lower one up to the lowest kept point (both raise delta), which keeps about
:data:`LATTICE_POINTS` points: ``u`` is the Hoeffding width of the discrete loss at that
tail mass around its mean, ``2 sqrt(2 log(2 G / TAIL_MASS) V)``, ``V = sum m_g eps_g^2``
(at most ``2 sum m_g eps_g``), over :data:`LATTICE_POINTS`, and at least
:data:`MIN_UNIT`.  Masses below ``e^-700``,
and products below the smallest normal double, are bounded and added to the infinite
atom.  Measured on a ledger of 200 analyses with totals in [0.3, 3] (about 600 distinct
epsilons, 3000 discrete parts): about 0.1 s to compose, a slack of 0.55 on an epsilon of
31 (under 2 %; against finer lattices the actual excess is about half the slack).  The
lattice composition is cached: a budget composes the same rows with many candidate
releases.

Floating point.  Each term is non-negative and evaluated to about 1e-13 relative
(``_log_gaussian_profile``, tested against 50-digit mpmath); the sum is inflated by
:data:`SUM_RELATIVE_ERROR`, so the reported delta is an upper bound of the exact one.

The split.  :func:`split_budget` turns one total (epsilon, delta) and public shares into
per-part parameters by one documented public rule (see there); nothing in it reads data.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import erf, erfcx, expit, gammaln, log_ndtr, logsumexp

from .calibration import GL_NODES, GL_WEIGHTS, validate_privacy_parameters
from .parts import ApproxDPPart, GaussianPart, PrivacyPart, PureDPPart

__all__ = [
    "LATTICE_POINTS",
    "MAX_OUTCOMES",
    "MIN_UNIT",
    "SPLIT_MARGIN",
    "SUM_RELATIVE_ERROR",
    "TAIL_MASS",
    "BudgetSplit",
    "Composition",
    "PlannedPart",
    "compose",
    "composed_delta",
    "composed_epsilon",
    "split_budget",
]

#: The most discrete outcomes (after merging equal parts) a composition enumerates.
MAX_OUTCOMES = 1 << 20

#: Lattice points the pessimistic composition aims for beyond :data:`MAX_OUTCOMES`
#: (its spacing is the Hoeffding width of the discrete loss over this number).
LATTICE_POINTS = 1 << 16

#: The finest lattice unit: a slack of at most 1e-5 per group is already negligible, and
#: a finer lattice only costs time.
MIN_UNIT = 1e-5

#: P-mass the pessimistic lattice may move, over all its steps, from the tails of the
#: discrete loss: the upper tail to infinite loss, the lower one up to the lowest kept
#: point (both raise delta, by at most this much).
TAIL_MASS = 1e-30

#: Below this log-mass a weight is set to zero and its mass (bounded) moved to infinity.
_LOG_TINY = -700.0

#: Relative inflation of the summed delta: covers the terms' evaluation error (~1e-13
#: each, tested) and the summation's rounding, with four orders of margin.
SUM_RELATIVE_ERROR = 1e-9

#: Relative room the split leaves below delta: a budget of exactly the same total
#: admits the whole analysis (it keeps 1e-9 for its own evaluation error).
SPLIT_MARGIN = 1e-8

_SQRT2 = math.sqrt(2.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _log_gaussian_profile(epsilon: NDArray[np.float64], mu: float) -> NDArray[np.float64]:
    """``log delta_G(epsilon; mu)`` for an array of real epsilons (negative included).

    The vectorised twin of :func:`~dask_dppca.privacy.mechanisms.calibration.log_delta` (same
    formulas, same branches; tests/privacy/test_accounting.py checks they agree and
    checks both against mpmath at negative epsilon).
    """
    e = np.asarray(epsilon, dtype=np.float64)
    out = np.empty_like(e)
    if mu == 0.0:
        with np.errstate(divide="ignore"):
            return np.where(e < 0.0, np.log(-np.expm1(np.minimum(e, 0.0))), -np.inf)
    if math.isinf(mu):
        return np.zeros_like(e)
    x = mu / 2.0 - e / mu
    low = x < 0.0
    if low.any():
        xl = x[low]
        p = -xl / _SQRT2
        width = mu / _SQRT2
        if width > 0.5:
            diff = erfcx(p) - erfcx(p + width)
        else:
            half = 0.5 * width
            t = (p[:, None] + half) + half * GL_NODES[None, :]
            diff = half * ((_TWO_OVER_SQRT_PI - 2.0 * t * erfcx(t)) @ GL_WEIGHTS)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[low] = np.where(diff > 0.0, -0.5 * xl * xl + np.log(0.5 * diff), -np.inf)
    high = ~low
    if high.any():
        xh, eh = x[high], e[high]
        bracket = 0.5 * (erf(xh / _SQRT2) + erf((mu - xh) / _SQRT2))
        tail = log_ndtr(xh - mu)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_bracket = np.log(bracket)
            negative = eh < 0.0
            added = np.log(-np.expm1(np.minimum(eh, 0.0))) + tail
            pos = np.maximum(eh, 0.0)
            log_rate = np.where(pos > 0.0, pos + np.log(-np.expm1(-pos)), -np.inf)
            ratio = np.exp(log_rate + tail - log_bracket)
            above = np.where(
                (bracket > 0.0) & (ratio < 1.0), log_bracket + np.log1p(-ratio), -np.inf
            )
            below = np.where(bracket > 0.0, np.logaddexp(log_bracket, added), added)
        out[high] = np.where(negative, below, above)
    return out


def _binomial_outcomes(m: int, eps: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Losses and log P-masses of m parts ``RR_eps``, merged by the count of favourable outcomes."""
    j = np.arange(m + 1, dtype=np.float64)
    log_a, log_b = math.log(float(expit(eps))), math.log(float(expit(-eps)))
    log_w = gammaln(m + 1.0) - gammaln(j + 1.0) - gammaln(m - j + 1.0) + j * log_a + (m - j) * log_b
    return (2.0 * j - m) * eps, log_w


@dataclass(frozen=True)
class Composition:
    """The composition of some parts, ready to report its privacy profile exactly.

    Build it with :func:`compose`.

    Attributes
    ----------
    mu : float
        The Gaussian parts composed, ``sqrt(sum mu_i^2)`` (0 without any).
    losses : ndarray
        Finite privacy losses of the discrete parts' merged outcomes.
    log_weights : ndarray
        Log of their P-masses (the same length).
    infinite : float
        P-mass of the outcomes with infinite loss (from the (epsilon, delta) parts'
        delta atoms): ``1 - prod (1 - delta_i)``.
    n_parts : int
        How many parts were composed.
    slack : float
        0 for the exact composition; beyond :data:`MAX_OUTCOMES` outcomes, the most the
        pessimistic lattice adds to the discrete loss, so that ``epsilon(delta)`` is at
        most ``slack`` above the exact value at ``delta - 2 TAIL_MASS`` (never below it).
    """

    mu: float
    losses: NDArray[np.float64]
    log_weights: NDArray[np.float64]
    infinite: float
    n_parts: int
    slack: float = 0.0

    @property
    def is_gaussian(self) -> bool:
        """True when every part is Gaussian (the profile is then the closed form)."""
        return self.losses.size == 1 and self.losses[0] == 0.0 and self.infinite == 0.0

    def delta(self, epsilon: float) -> float:
        """Exact delta(epsilon) of the composition, rounded up (an upper bound).

        Parameters
        ----------
        epsilon : float
            Any real number (>= 0 for a DP statement).

        Returns
        -------
        float
            In [0, 1].
        """
        eps = float(epsilon)
        if not math.isfinite(eps):
            raise ValueError(f"epsilon: must be finite, got {epsilon!r}")
        if self.n_parts == 0:
            return max(0.0, -math.expm1(eps))
        terms = self.log_weights + _log_gaussian_profile(eps - self.losses, self.mu)
        finite = float(np.exp(logsumexp(terms))) if np.isfinite(terms).any() else 0.0
        return min(1.0, (self.infinite + finite) * (1.0 + SUM_RELATIVE_ERROR))

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon >= 0 at which the composition is (epsilon, delta)-DP.

        Conservative: ``delta(returned) <= delta``.  ``inf`` when no epsilon is enough
        (the delta atoms alone exceed ``delta``).

        Parameters
        ----------
        delta : float
            In (0, 1).

        Returns
        -------
        float
        """
        dlt = float(delta)
        if not (0.0 < dlt < 1.0):
            raise ValueError(f"delta: must satisfy 0 < delta < 1, got {delta!r}")
        if self.delta(0.0) <= dlt:
            return 0.0
        if self.infinite * (1.0 + SUM_RELATIVE_ERROR) >= dlt:
            return math.inf
        lo, hi = 0.0, 1.0
        while self.delta(hi) > dlt:
            lo, hi = hi, 2.0 * hi
            if hi > 1e6:
                return math.inf
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if self.delta(mid) > dlt:
                lo = mid
            else:
                hi = mid
        return hi


def compose(parts: Iterable[PrivacyPart]) -> Composition:
    """The composition of ``parts`` (any mix of Gaussian, pure and approximate DP).

    Exact while the merged discrete outcomes number at most :data:`MAX_OUTCOMES`;
    beyond, the pessimistic lattice of the module docstring (never below the exact
    profile, at most ``Composition.slack`` above it in epsilon).

    Raises
    ------
    ValueError
        For an object that is not a part.
    """
    squares: list[float] = []
    pure: Counter[float] = Counter()
    approx: Counter[tuple[float, float]] = Counter()
    count = 0
    for part in parts:
        count += 1
        if isinstance(part, GaussianPart):
            squares.append(part.mu**2)
        elif isinstance(part, PureDPPart):
            pure[part.epsilon] += 1
        elif isinstance(part, ApproxDPPart):
            approx[(part.epsilon, part.delta)] += 1
        else:
            raise ValueError(f"parts: expected privacy parts, got {type(part).__name__}")
    # Group the discrete parts by epsilon: an (eps, delta) part is RR_eps after its atom.
    groups: Counter[float] = Counter(pure)
    log_keep = 0.0  # log P(no delta atom)
    for (eps, dlt), m in approx.items():
        groups[eps] += m
        log_keep += m * math.log1p(-dlt)
    losses, log_w, moved, slack = _discrete(tuple(sorted(groups.items())))
    mu = math.sqrt(math.fsum(squares)) * (1.0 + 8.0 * 2.0**-53) if squares else 0.0
    # P(L = inf): a delta atom, or (no atom and) the mass the lattice moved to infinity.
    infinite = -math.expm1(log_keep) + math.exp(log_keep) * moved
    return Composition(
        mu=mu,
        losses=losses,
        log_weights=log_w + log_keep,
        infinite=min(1.0, infinite),
        n_parts=count,
        slack=slack,
    )


def _discrete(
    groups: tuple[tuple[float, int], ...],
) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float]:
    """Losses, log P-masses, mass moved to infinite loss, and epsilon slack of ``groups``."""
    size = math.prod(m + 1 for _, m in groups)
    if size > MAX_OUTCOMES:
        # Parts of epsilon 0 (an (0, delta) part after its atom) have loss 0 only.
        return _lattice(tuple((eps, m) for eps, m in groups if eps > 0.0))
    losses = np.zeros(1)
    log_w = np.zeros(1)
    for eps, m in groups:
        g_loss, g_w = _binomial_outcomes(m, eps)
        losses = (losses[:, None] + g_loss[None, :]).ravel()
        log_w = (log_w[:, None] + g_w[None, :]).ravel()
    return losses, log_w, 0.0, 0.0


@functools.lru_cache(maxsize=4)
def _lattice(
    groups: tuple[tuple[float, int], ...],
) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float]:
    """The pessimistic lattice composition of ``groups`` (module docstring).

    Cached (its arrays read-only): a budget composes the same ledger rows with many
    candidate releases.
    """
    if not groups:  # no loss but 0: one outcome
        return np.zeros(1), np.zeros(1), 0.0, 0.0
    variance = math.fsum(m * eps * eps for eps, m in groups)
    total = math.fsum(m * eps for eps, m in groups)
    tolerance = TAIL_MASS / (2.0 * len(groups))  # per step and side
    # Hoeffding: after any step, all but ``tolerance`` of each tail lies within ``reach``
    # of that step's mean, so the trimmed array spans about ``2 reach``.
    reach = math.sqrt(2.0 * math.log(1.0 / tolerance) * variance)
    unit = max(min(2.0 * total, 2.0 * reach) / LATTICE_POINTS, MIN_UNIT)
    dist = np.ones(1)
    offset = 0  # lattice index of dist[0]
    moved = 0.0
    operations = 0
    for eps, m in groups:
        g_loss, g_w = _binomial_outcomes(m, eps)
        # Round each merged loss up to the lattice (the margin absorbs the quotient's
        # floating-point error), so no loss is ever lowered.
        index = np.ceil(g_loss / unit + 1e-7).astype(np.int64)
        weights = np.exp(g_w)
        moved += float(np.count_nonzero(g_w < _LOG_TINY)) * math.exp(_LOG_TINY)
        weights[g_w < _LOG_TINY] = 0.0
        low = int(index.min())
        kernel = np.zeros(int(index.max()) - low + 1)
        np.add.at(kernel, index - low, weights)
        where = np.flatnonzero(kernel)
        out = np.zeros(dist.size + kernel.size - 1)
        for k in where:
            out[k : k + dist.size] += kernel[k] * dist
        # Products below the smallest normal double may lose their mass: bound it.
        moved += out.size * where.size * np.finfo(np.float64).tiny
        operations += where.size + 2
        dist, shift, lost = _trim(out, tolerance)
        offset += low + shift
        moved += lost
    dist *= 1.0 + operations * 2.0**-52  # each entry's accumulated rounding, rounded up
    keep = np.flatnonzero(dist)
    losses = (offset + keep).astype(np.float64) * unit
    log_w = np.log(dist[keep])
    losses.flags.writeable = False
    log_w.flags.writeable = False
    return losses, log_w, moved, len(groups) * unit * (1.0 + 1e-6)


def _trim(dist: NDArray[np.float64], tolerance: float) -> tuple[NDArray[np.float64], int, float]:
    """Trim both tails of at most ``tolerance`` mass each, pessimistically.

    The upper tail goes to infinite loss (returned as the mass lost), the lower tail to
    the lowest kept point (a higher loss).  Returns the kept array, how many points were
    cut from below, and the mass moved to infinity (rounded up).
    """
    n_top, lost = _tail(dist[::-1], tolerance)
    kept = dist[: dist.size - n_top]
    n_low, low_mass = _tail(kept, tolerance)
    if n_low:
        kept = kept[n_low:].copy()
        kept[0] += low_mass
    return kept, n_low, lost


def _tail(values: NDArray[np.float64], tolerance: float) -> tuple[int, float]:
    """How many leading ``values`` sum to at most ``tolerance``, and their sum rounded up.

    Sums a growing window only, so the cost follows the tail, not the whole array.
    """
    window = 256
    while True:
        total = np.cumsum(values[:window])
        n = int(np.searchsorted(total, tolerance, side="right"))
        if n < total.size or total.size == values.size:
            n = min(n, values.size - 1)  # keep at least one point
            return n, float(total[n - 1]) * (1.0 + 1e-12) if n else 0.0
        window *= 4


def composed_delta(parts: Iterable[PrivacyPart], epsilon: float) -> float:
    """Exact delta(epsilon) of the composition of ``parts`` (an upper bound by rounding)."""
    return compose(parts).delta(epsilon)


def composed_epsilon(parts: Iterable[PrivacyPart], delta: float) -> float:
    """Smallest epsilon at which the composition of ``parts`` is (epsilon, delta)-DP."""
    return compose(parts).epsilon(delta)


# -- one budget, split by a public rule ---------------------------------------------------


@dataclass(frozen=True)
class PlannedPart:
    """One part of an analysis's plan before its scale is known.

    Attributes
    ----------
    stage : str
        The stage it belongs to (``"directions"``, ``"scree"``, ``"score_map"``, ...).
    name : str
        What it releases (``"scree quantiles"``).
    kind : {"gaussian", "pure", "approx"}
        The part's type once scaled (``"approx"``: an (epsilon, delta)-DP part).
    count : int
        How many identical parts (one per component, say).
    weight : float
        Its weight inside the stage (each of its ``count`` parts gets this weight).
    delta_share : float
        An ``"approx"`` part's delta, as a public fraction of the total delta, in (0, 1).
    """

    stage: str
    name: str
    kind: str
    count: int = 1
    weight: float = 1.0
    delta_share: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("gaussian", "pure", "approx"):
            raise ValueError(f"kind: expected 'gaussian', 'pure' or 'approx', got {self.kind!r}")
        share = float(self.delta_share)
        if (self.kind == "approx") != (0.0 < share < 1.0) or not math.isfinite(share):
            raise ValueError(
                f"delta_share: an 'approx' part needs one in (0, 1), others 0; got {share!r}"
            )
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count: must be a positive integer, got {self.count!r}")
        weight = float(self.weight)
        if not (math.isfinite(weight) and weight > 0.0):
            raise ValueError(f"weight: must be a finite number > 0, got {self.weight!r}")


@dataclass(frozen=True)
class BudgetSplit:
    """Per-part parameters of one analysis, found by :func:`split_budget`.

    Attributes
    ----------
    epsilon, delta : float
        The total.
    shares : dict of str to float
        Each stage's public share (they sum to 1).
    scale : float
        The rule's one scale ``t``.
    planned : tuple of PlannedPart
    parts : tuple of tuple of PrivacyPart
        For each planned part, its ``count`` scaled parts.
    """

    epsilon: float
    delta: float
    shares: dict[str, float]
    scale: float
    planned: tuple[PlannedPart, ...]
    parts: tuple[tuple[PrivacyPart, ...], ...]

    def stage_parts(self, stage: str) -> tuple[PrivacyPart, ...]:
        """Every part of one stage."""
        return tuple(
            p for plan, ps in zip(self.planned, self.parts) if plan.stage == stage for p in ps
        )

    def part(self, stage: str, name: str) -> PrivacyPart:
        """The (first) scaled part of the planned part ``stage``/``name``."""
        for plan, ps in zip(self.planned, self.parts):
            if plan.stage == stage and plan.name == name:
                return ps[0]
        raise KeyError(f"{stage}/{name}")

    @property
    def all_parts(self) -> tuple[PrivacyPart, ...]:
        """Every part of the analysis."""
        return tuple(p for ps in self.parts for p in ps)

    def composed_epsilon(self) -> float:
        """The epsilon the whole analysis spends at its delta (<= the total)."""
        return composed_epsilon(self.all_parts, self.delta)

    def table(self) -> list[dict[str, object]]:
        """One row per planned part: stage, what, mechanism kind, count and parameter."""
        rows: list[dict[str, object]] = []
        for plan, ps in zip(self.planned, self.parts):
            part = ps[0]
            param: dict[str, float]
            if isinstance(part, GaussianPart):
                param, guarantee = {"mu": part.mu}, "mu-GDP"
            elif isinstance(part, ApproxDPPart):
                param = {"epsilon": part.epsilon, "delta": part.delta}
                guarantee = "(epsilon, delta)-DP"
            else:
                param, guarantee = {"epsilon": part.epsilon}, "epsilon-DP"
            rows.append(
                {
                    "stage": plan.stage,
                    "release": plan.name,
                    "guarantee": guarantee,
                    "count": plan.count,
                    **param,
                }
            )
        return rows


def _scaled(
    planned: Sequence[PlannedPart], shares: Mapping[str, float], t: float, delta: float = 0.0
) -> tuple[tuple[PrivacyPart, ...], ...]:
    per_stage: dict[str, float] = {}
    for plan in planned:
        per_stage[plan.stage] = per_stage.get(plan.stage, 0.0) + plan.count * plan.weight
    out = []
    for plan in planned:
        m = t * math.sqrt(shares[plan.stage] * plan.weight / per_stage[plan.stage])
        part: PrivacyPart
        if plan.kind == "gaussian":
            part = GaussianPart(m)
        elif plan.kind == "approx":
            part = ApproxDPPart(m, plan.delta_share * delta)
        else:
            part = PureDPPart(m)
        out.append((part,) * plan.count)
    return tuple(out)


def split_budget(
    epsilon: float,
    delta: float,
    planned: Sequence[PlannedPart],
    shares: Mapping[str, float],
    *,
    fixed: Sequence[PrivacyPart] = (),
) -> BudgetSplit:
    """Per-part parameters that spend exactly one total (epsilon, delta).

    The public rule: stage ``s`` has share ``w_s`` (they are normalised to sum to 1);
    a part of weight ``u`` in it gets the strength ``m = t sqrt(w_s u / U_s)``, ``U_s``
    the sum of the stage's weights over its parts (count included) (a
    Gaussian part ``mu = m``, a pure part ``epsilon = m``: for small values an
    epsilon-DP part and a mu-GDP part with ``mu = epsilon`` have about the same privacy
    loss variance, so the shares are shares of ``sum m^2 = t^2``).  The one scale ``t``
    is the largest for which the composition of all parts (and ``fixed`` ones, already
    decided) is (epsilon, delta (1 - SPLIT_MARGIN))-DP, found by bisection on the exact
    accountant.  Only
    public numbers enter: the total, the shares and the plan's shape.

    Parameters
    ----------
    epsilon, delta : float
        The total.
    planned : sequence of PlannedPart
    shares : mapping of str to float, optional
        Stage -> public share (an analysis's defaults: each stage's in the registry,
        :data:`dask_dppca.analysis.stages.REGISTRY`).  Every planned stage needs a share
        > 0; shares of stages not planned are ignored.
    fixed : sequence of PrivacyPart
        Parts whose parameters are set otherwise, composed in.

    Returns
    -------
    BudgetSplit

    Raises
    ------
    ValueError
        ``shares: ...`` for a missing or non-positive share.
    """
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    stages = list(dict.fromkeys(plan.stage for plan in planned))
    given = dict(shares)
    for stage in stages:
        value = given.get(stage)
        if (
            value is None
            or not (isinstance(value, (int, float)) and math.isfinite(value))
            or value <= 0
        ):
            raise ValueError(f"shares: stage {stage!r} needs a share > 0, got {value!r}")
    total = math.fsum(float(given[stage]) for stage in stages)
    norm = {stage: float(given[stage]) / total for stage in stages}

    def fits(t: float) -> bool:
        parts = [p for ps in _scaled(planned, norm, t, dlt) for p in ps]
        return compose([*parts, *fixed]).delta(eps) <= dlt * (1.0 - SPLIT_MARGIN)

    lo, hi = 0.0, 1.0
    while fits(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:  # pragma: no cover - no finite total allows this
            break
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
    if not lo > 0.0:
        raise ValueError(
            f"epsilon: the total (epsilon={eps:g}, delta={dlt:g}) leaves no room after the "
            "fixed parts"
        )
    return BudgetSplit(eps, dlt, norm, lo, tuple(planned), _scaled(planned, norm, lo, dlt))
