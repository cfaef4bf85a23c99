"""Private scree values along released directions: the mechanisms (no Dask).

Along the released private directions ``v_1..v_k`` (public after their release) the
scree value of component ``l`` is the variance of the scores ``v_l^T x``.  Every
statistic here is a mean over the *pairs* of the scree design
(:mod:`dask_dppca.kernel.scree_stats`) of ``s_ij = (v_l^T (x_i - x_j))^2 / 2``, whose
expectation is that variance: no centre is needed, private or not (a translation of
the data changes no pair).  One record's change moves at most ``D`` (the design's
largest degree) of the ``|P|`` pair terms; docs/privacy.md, "Scree values", has the
arguments.

The stages, each a release on the exact totals (computed on the trusted worker):

1. :class:`PairQuantiles` (pure epsilon-DP, the exponential mechanism through OpenDP's
   ``make_noisy_max``): for each component, and for the trace, a private quantile of
   ``|v^T (x_i - x_j)|`` (``||x_i - x_j||``) on the public log grid ``2^(j/64)``.  The
   median gives the *robust* scree value ``(Q / z_0.75)^2 / 2`` (consistent at the
   Gaussian; its ratios are consistent for every elliptical law, Cauchy included), and
   the scale from which the other estimators' constants are set: nothing tuned to the
   data by a user.
2. :class:`GaussianStatistic` (mu-GDP): the clipped mean of ``min(s, C_l)`` with
   ``C_l = CLIP_MULTIPLE x robust_l`` (and the trace's clipped mean for the PVE over all
   d), the winsorized mean of ``min(s, U_l)`` with ``U_l`` set by the private ``1 -
   WINSOR_LEVEL`` quantile of ``|dy|`` (:func:`winsorizing_level`), and the noisy step of
   the Huber estimator (threshold ``HUBER_MULTIPLE x robust_l``, started at the robust
   value; its terms' range is :func:`huber_ranges`).
3. Further Huber steps, one Gaussian release each (none by default).

Each release scales its entries by their sensitivity, adds i.i.d. Gaussian noise of
``sigma = sqrt(m) / mu`` from a float-safe sampler (:mod:`.noise`) and scales back:
every entry's noise is proportional to its own range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import chdtr, chdtrc, ndtri

from ...kernel.scree_stats import grid_values
from .contract import own_noise
from .laplace import Selector, opendp_selector
from .noise import NoiseSampler
from .parts import GaussianPart, PrivacyPart, PureDPPart

__all__ = [
    "CLIP_MULTIPLE",
    "HUBER_MULTIPLE",
    "METHODS",
    "WINSOR_FACTOR",
    "WINSOR_LEVEL",
    "GaussianStatistic",
    "PairQuantiles",
    "gaussian_consistent_winsorized",
    "huber_ranges",
    "monotone",
    "opendp_selector",
    "robust_from_quantile",
    "robust_from_quantiles",
    "scree_floor",
    "scree_scales",
    "winsorizing_level",
]

#: Scree methods a user may ask for ("robust" costs nothing beyond stage 1).
METHODS = ("clipped", "winsorized", "huber", "robust")
#: Clip level of the clipped mean, in robust scree values (chi^2_1 exceeds 9 with
#: probability 0.0027: the clipping bias at the Gaussian is below 0.1 %).
CLIP_MULTIPLE = 9.0
#: Huber threshold in robust scree values: the clip's multiple, for the clip's reason.
#: The pair terms are >= 0 and the step starts at the robust value ``m <= tau``, so the
#: lower clamp never binds and a step from ``m`` is ``E min(s, m + tau) - m``: its bias
#: is the tail beyond ``m + tau`` (at the Gaussian ``P(chi^2_1 > 10) = 0.16 %``) and its
#: noise is proportional to ``tau + m`` (:func:`huber_ranges`), the clip's trade-off.
HUBER_MULTIPLE = 9.0
#: The winsorized mean's level ``1 - WINSOR_LEVEL`` quantile of ``|dy|`` is released:
#: the noisy max places a quantile only where its tail holds many times the noise scale
#: in pairs (about ``2 D ln(256) / epsilon``, some 6 % of ``|P|`` at n = 5000 and the
#: default split); at 0.9 the tail holds 10 %, a higher level often lands deep in the tail.
WINSOR_LEVEL = 0.1
#: The winsorizing level ``U = (WINSOR_FACTOR Q)^2 / 2`` from the released quantile ``Q``
#: (:func:`winsorizing_level`): at the Gaussian ``Q = z_0.95 sqrt(2 lambda)``, and the
#: factor ``sqrt(CLIP_MULTIPLE) / z_0.95`` (1.824) puts ``U`` at the clip level ``9
#: lambda``; set from the upper quantile, not the median, it moves up with a heavier tail.
# scipy.special's functions, not scipy.stats' distributions (the same values: those are
# their implementations): importing scipy.stats costs a worker half a second at its
# first release.
WINSOR_FACTOR = math.sqrt(CLIP_MULTIPLE) / float(ndtri(1.0 - WINSOR_LEVEL / 2.0))
_Z75 = float(ndtri(0.75))
_Z95 = float(ndtri(1.0 - WINSOR_LEVEL / 2.0))
#: Grid points a row's later quantile searches above the previous one (4 octaves).
WINDOW = 4 * 64


def _fraction(q: float) -> Fraction:
    """A level as the fraction of small denominator it stands for (0.9: 9/10)."""
    return Fraction(q).limit_denominator(1000)


def opendp_epsilon(sensitivity: int, scale: float) -> float:
    """Epsilon OpenDP's privacy map gives ``make_noisy_max`` at this score sensitivity."""
    from opendp.domains import atom_domain, vector_domain
    from opendp.measurements import make_noisy_max
    from opendp.measures import max_divergence
    from opendp.metrics import linf_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    measurement = make_noisy_max(
        vector_domain(atom_domain(T="i64")), linf_distance(T="i64"), max_divergence(), scale
    )
    return float(measurement.map(int(sensitivity)))  # type: ignore[no-untyped-call]


def robust_from_quantile(q: float) -> float:
    """The robust scree value of a released median ``Q`` of ``|dy|``: ``(Q / z_0.75)^2 / 2``.

    At the Gaussian ``dy ~ N(0, 2 lambda)``, so the median of ``|dy|`` is
    ``sqrt(2 lambda) z_0.75``.
    """
    return (q / _Z75) ** 2 / 2.0


def robust_from_quantiles(median: float, upper: float) -> float:
    """The robust scree value of the released median and ``1 - WINSOR_LEVEL`` quantile of
    ``|dy|``: ``((Q_0.5 + Q_0.9) / (z_0.75 + z_0.95))^2 / 2``.

    At the Gaussian ``|dy| ~ |N(0, 2 lambda)|`` has the quantiles ``sqrt(2 lambda)
    z_0.75`` and ``sqrt(2 lambda) z_0.95``, so the constant ``z_0.75 + z_0.95 = 2.3194``
    (analytic, like the MAD's 1.4826) makes it consistent there; its ratios are
    consistent for every elliptical law (each ``|v^T dx|`` is one law scaled).  Why not
    the median alone (:func:`robust_from_quantile`, which IS consistent at the normal): a
    scale mixture of normals (clusters of unequal spread; the t laws) puts more of its
    mass near 0 and in the tails than the normal of the same variance, so a median-based
    value is low (for a Laplace ``dy`` of variance 1 it is ``(ln 2 / (sqrt 2
    z_0.75))^2 = 0.53``) while the two laws' quantiles cross near the 0.9 level (Laplace:
    ``exp(-sqrt 2 t) = 2 (1 - Phi(t))`` at ``t = 1.68``, level 0.907).  The sum weighs
    the 0.9 level by its size (71 %) and averages two releases' noise.  Its breakdown is
    10 % of the pairs (about 5 % of the records), not the median's 50 %.
    """
    return ((median + upper) / (_Z75 + _Z95)) ** 2 / 2.0


def scree_floor(trace_median: float, n_features: int) -> float:
    """``Q_trace^2 / (2 d)``: the released median of ``||dx||`` spread over the ``d``
    features (about the mean eigenvalue; post-processing).
    """
    return float(trace_median) ** 2 / (2.0 * n_features)


def scree_scales(released: Sequence[Sequence[float]], n_features: int) -> NDArray[np.float64]:
    """The scale of each component's pair terms that the clip (``CLIP_MULTIPLE`` times it)
    and the Huber threshold are set from: post-processing of the released quantiles.

    The largest of the median's Gaussian-consistent value (:func:`robust_from_quantile`),
    the upper level's (``(Q_0.9 / z_0.95)^2 / 2``, when released) and the floor
    ``Q_trace^2 / (2 d)``, ``Q_trace`` the released median of ``||dx||`` (about the mean
    eigenvalue).  At the Gaussian the first two agree and the floor is at most the mean
    eigenvalue, so the clip stays about ``CLIP_MULTIPLE`` times the component's value.
    On a discrete or zero-inflated column most pairs differ by nearly nothing along a
    direction that loads on it, and the median's value is nearly 0 where the variance is
    carried by the few pairs that differ: the upper level (10 % of the pairs) and the
    floor (the table's typical spread per feature) keep the clip above those pairs' terms.

    Parameters
    ----------
    released : sequence of sequences of float
        :meth:`PairQuantiles.release`'s rows: per component ``[Q_0.5]`` or ``[Q_0.5,
        Q_0.9]``, then the trace's ``[Q_0.5]``.
    n_features : int
        d (public).
    """
    rows = [list(r) for r in released]
    floor = scree_floor(rows[-1][0], n_features)
    scales = []
    for row in rows[:-1]:
        candidates = [robust_from_quantile(row[0]), floor]
        if len(row) > 1:
            candidates.append((row[1] / _Z95) ** 2 / 2.0)
        scales.append(max(candidates))
    return np.asarray(scales, dtype=np.float64)


def winsorizing_level(q: float) -> float:
    """The winsorizing level ``(WINSOR_FACTOR Q)^2 / 2`` of the pair terms.

    ``Q`` is a released quantile of ``|dy|``: post-processing of that release.
    """
    return (WINSOR_FACTOR * q) ** 2 / 2.0


def huber_ranges(centre: NDArray[np.float64], tau: NDArray[np.float64]) -> NDArray[np.float64]:
    """Width of the range of the Huber step's terms ``clamp(dy^2/2 - m, -tau, tau)``.

    The pair terms ``s = dy^2/2`` are ``>= 0`` (and ``fl(s - m) >= fl(0 - m) = -m``: the
    rounding is monotone), so a term lies in ``[max(-m, -tau), tau]``: width ``tau +
    clip(m, 0, tau)`` (``tau`` when ``m <= 0``), never more than ``2 tau``.  ``m`` and
    ``tau`` are public (released before); a non-finite term is set to ``tau``, inside.
    """
    t = np.asarray(tau, dtype=np.float64)
    return np.asarray(t + np.clip(np.asarray(centre, dtype=np.float64), 0.0, t), dtype=np.float64)


@dataclass(frozen=True)
class PairQuantiles:
    """Private quantiles of pair statistics on the public grid: one exponential
    mechanism per (row, level).

    The utility of grid point ``t_j`` for level ``q = a / b`` is minus the distance from
    the rank ``q N'`` to the ranks of bin ``j`` among the ``N'`` pairs that differ
    (``|dy| > 0``: outside the grid's bin 0), in ``1 / b`` pair (:meth:`utilities`): a
    quantile of the differing pairs.  One record changes at most
    ``D`` pairs, each moving a utility by at most ``b``, so every utility moves by at most
    ``b D``; OpenDP's noisy max at scale ``2 b D / epsilon`` is epsilon-DP (its own
    privacy map: ``opendp_epsilon``).  On continuous data no pair ties, ``N' = |P|``,
    and this is the quantile of all pairs (its utilities ``b`` times ``-|N(<= t_j) -
    q |P||`` below the target, the previous point's above it).

    Attributes
    ----------
    levels : tuple of tuple of float
        For each row of the histogram, the levels released.
    epsilon : float
        Of each release.
    n_pairs, max_degree : int
        The design's ``|P|`` and ``D`` (public).
    selector : callable
        The noisy arg-max (OpenDP by default; tests inject others).
    n_features : int, optional
        d (public): the last row is the trace's, released first, and it widens the later
        levels' windows (:meth:`release`).
    """

    levels: tuple[tuple[float, ...], ...]
    epsilon: float
    n_pairs: int
    max_degree: int
    selector: Selector = field(default=opendp_selector, compare=False)
    n_features: int | None = None

    def __post_init__(self) -> None:
        for row in self.levels:
            for q in row:
                if not 0.0 < q < 1.0:
                    raise ValueError(f"levels: must be in (0, 1), got {q!r}")
                if float(_fraction(q)) != q:
                    raise ValueError(f"levels: expected a fraction a/b with b <= 1000, got {q!r}")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"epsilon: must be > 0, got {self.epsilon!r}")

    @property
    def sensitivity(self) -> int:
        """One record's largest change of a utility: ``b D`` (``b`` the denominator)."""
        return self.denominator * self.max_degree

    @property
    def scale(self) -> float:
        """The noise scale ``2 b D / epsilon`` of each noisy max."""
        return 2.0 * self.sensitivity / self.epsilon

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One pure part per (row, level)."""
        return tuple(PureDPPart(self.epsilon) for row in self.levels for _ in row)

    @property
    def denominator(self) -> int:
        """The levels' common denominator ``b`` (each level ``q = a / b``): the utilities
        are integers in units of ``1 / b`` pair.
        """
        return math.lcm(*(_fraction(q).denominator for row in self.levels for q in row))

    def utilities(self, counts: NDArray[np.int64], q: float) -> NDArray[np.int64]:
        """Integer utilities of the grid points for level ``q`` (public function of counts).

        With ``q = a / b``, ``N'`` the count of the pairs that differ (outside bin 0,
        which holds the ties, ``|dy| = 0``) and ``L_j``, ``R_j`` the counts of those at
        most the grid point before ``t_j`` and at most ``t_j``: ``-max(0, a N' - b R_j,
        b L_j - a N')``, minus the distance (in ``1 / b`` pair) from the target rank
        ``q N'`` to bin ``j``'s ranks ``[L_j, R_j]``.  So the level is a quantile of the
        differing pairs (on discrete or zero-inflated columns most pairs tie and a
        quantile of all pairs is 0), and a bin holding the target rank has utility 0
        even when the values are an atom (a discrete column).  A pair contributes ``0``
        (tie), ``b - a`` or ``-a`` to ``b R_j - a N'`` (and to ``b L_j - a N'``): one
        pair's change moves a utility by at most ``b``, one record's by at most ``b D``.
        """
        counts = np.asarray(counts, dtype=np.int64)
        fraction = _fraction(q)
        b = self.denominator
        a = fraction.numerator * (b // fraction.denominator)
        differing = np.cumsum(counts[1:])
        target = a * int(differing[-1])
        at_most = b * np.concatenate([[0], differing])
        below = b * np.concatenate([[0, 0], differing[:-1]])
        distance = np.maximum(0, np.maximum(target - at_most, below - target))
        return np.asarray(-distance, dtype=np.int64)

    def release(
        self, exact: NDArray[np.int64], sampler: Selector | None = None
    ) -> list[list[float]]:
        """The released grid values, ``[row][level]``, of the exact histograms ``exact``
        (one row per direction, then the trace's), drawn by :attr:`selector` (``sampler``:
        None or that same selector).

        A row's first level searches the whole grid; each later level searches the
        ``WINDOW`` grid points from the previous level's released point up (a
        window set by a released value: post-processing, and far fewer candidates, so
        a tail quantile is not lost among thousands of equally bad far points).  With
        ``n_features``, the last row (the trace's) is released first, and a window
        reaches at least ``WINDOW`` points above ``Q_tr / sqrt(d)`` (the released median
        of ``||dx||`` spread over the features): along a zero-inflated column the median
        of ``|dy|`` is the other columns' tiny leak, and the 0.9 level lies octaves above.
        """
        select = own_noise(self, self.selector, sampler)
        grid = grid_values()
        rows = list(np.asarray(exact))
        out: list[list[float]] = [[] for _ in rows]
        reach = 0  # the window's least top: the trace's spread per feature, when given
        order = list(range(len(rows)))
        if self.n_features is not None:  # the trace (the last row) first
            order = order[-1:] + order[:-1]
        for number in order:
            row, levels = rows[number], self.levels[number]
            released: list[float] = []
            lo, hi = 0, grid.size
            for q in levels:
                utility = self.utilities(row, q)[lo:hi]
                index = lo + select(utility, self.scale)
                released.append(float(grid[index]))
                lo, hi = index, min(grid.size, max(index, reach) + WINDOW + 1)
            if self.n_features is not None and number == len(rows) - 1:
                typical = released[0] / math.sqrt(self.n_features)
                reach = int(np.searchsorted(grid, typical))
            out[number] = released
        return out

    def describe(self) -> dict[str, Any]:
        """Public record of the mechanism."""
        return {
            "mechanism": "exponential mechanism (OpenDP make_noisy_max) on the grid 2^(j/64)",
            "guarantee": "epsilon-DP",
            "epsilon": self.epsilon,
            "count": sum(len(row) for row in self.levels),
            "sensitivity": self.sensitivity,
            "sensitivity_units": (
                f"1/{self.denominator} pair counts (the design's max degree x {self.denominator})"
            ),
            "scale": self.scale,
        }


@dataclass(frozen=True)
class GaussianStatistic:
    """A vector of pair sums released with Gaussian noise (mu-GDP).

    Entry ``i`` is a sum over the pairs of terms in a range of width ``ranges[i]``, so
    one record moves it by at most ``D ranges[i]`` (plus the float slack).  The entries
    are divided by that sensitivity (each then moves by at most 1, the vector by
    ``sqrt(m)`` in l2), noised at ``sigma = sqrt(m) / mu`` and multiplied back, then
    divided by ``|P|``.

    Attributes
    ----------
    name : str
    ranges : tuple of float
        Width of each entry's term range (public, or released before).
    mu : float
    n_pairs, max_degree : int
    slack : float
        Float room per unit of range (:func:`~dask_dppca.kernel.scree_stats.summation_slack`).
    sampler : NoiseSampler
    """

    name: str
    ranges: tuple[float, ...]
    mu: float
    n_pairs: int
    max_degree: int
    slack: float
    sampler: NoiseSampler

    @property
    def sensitivities(self) -> NDArray[np.float64]:
        """Per-entry sensitivity of the sums (with the float slack and the division's).

        ``release`` divides each sum ``a`` (at most ``|P| r`` in size) by this ``s``; each
        quotient is rounded by at most ``u |a| / s <= u |P| r / s`` (``u = 2^-53``), so two
        neighbours' quotients differ by at most ``(r (D + slack) + 2 u |P| r) / s``: the
        ``2 u |P|`` term keeps that at most 1 (docs/privacy.md, "Scree values").
        """
        r = np.asarray(self.ranges, dtype=np.float64)
        division = 2.0 * 2.0**-53 * float(self.n_pairs) * (1.0 + 1e-6)
        return r * (self.max_degree + self.slack + division) * (1.0 + 4.0 * 2.0**-53)

    @property
    def sigma(self) -> float:
        """Noise of the scaled entries."""
        m = len(self.ranges)
        return math.sqrt(m) * (1.0 + 2.0**-50) / self.mu

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One Gaussian part."""
        return (GaussianPart(self.mu),)

    def release(
        self, exact: NDArray[np.float64], sampler: NoiseSampler | None = None
    ) -> NDArray[np.float64]:
        """Noisy means over the pairs, from the exact (once-rounded) sums ``exact``, the
        noise from the statistic's own sampler (``sampler``: None or that same one).
        """
        noise = own_noise(self, self.sampler, sampler)
        sens = self.sensitivities
        scaled = np.asarray(exact, dtype=np.float64) / sens
        noisy = noise.add_noise(scaled, self.sigma)
        return noisy * sens / float(self.n_pairs)

    def describe(self) -> dict[str, Any]:
        """Public record of the mechanism."""
        return {
            "mechanism": "Gaussian (scaled entries)",
            "guarantee": "mu-GDP",
            "mu": self.mu,
            "entries": len(self.ranges),
            "sensitivity": [float(s) / self.n_pairs for s in self.sensitivities],
            "sigma": [self.sigma * float(s) / self.n_pairs for s in self.sensitivities],
            "sampler": type(self.sampler).__name__,
        }


def gaussian_consistent_winsorized(mean: float, upper: float) -> float:
    """The lambda whose Gaussian pair terms have this winsorized mean (post-processing).

    For ``s = lambda chi^2_1``, ``E min(s, U) = lambda F_3(U / lambda) + U (1 - F_1(U /
    lambda))`` (F_m the chi^2_m distribution function), increasing in lambda up to
    ``U``; solved by bisection.  A released mean at or above ``U`` (noise) is returned
    as it is.
    """
    if not (upper > 0 and mean > 0) or mean >= upper:
        return float(mean)

    def winsorized(lam: float) -> float:
        c = upper / lam
        return float(lam * chdtr(3, c) + upper * chdtrc(1, c))

    lo, hi = mean, mean
    while winsorized(hi) < mean:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if winsorized(mid) < mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def monotone(values: Sequence[float]) -> NDArray[np.float64]:
    """Non-increasing, non-negative post-processing (isotonic least squares, PAVA)."""
    y = np.maximum(np.asarray(values, dtype=np.float64), 0.0)
    blocks: list[list[float]] = []  # [mean, weight]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    out = np.concatenate([np.full(int(w), m) for m, w in blocks]) if blocks else y
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)
