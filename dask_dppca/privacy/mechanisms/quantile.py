"""A bound-free private quantile: AboveThreshold over a public geometric grid (docs/privacy.md).

No data range is needed (Durfee 2023, "unbounded quantile estimation"): the candidates
are a public grid that covers every float64, fine near every scale,

    magnitudes  2^(j / s) for 2^-1022 <= 2^(j / s) < 2^1024   (s steps per octave),

signed (``-max, ..., -2^-1022, 0, 2^-1022, ..., max, +inf``) or non-negative
(``0, 2^-1022, ..., max, +inf``).  The exact statistic is the vector of counts
``c_j = #{i : y_i <= t_j}`` (a NaN counts as +inf: a bounded treatment, the same for
every non-finite value).  AboveThreshold scans the candidates upwards and releases the
first ``t_j`` with

    s_c c_j + nu_j >= T + rho,     T = floor(s_c q n),

``rho``, ``nu_j`` discrete Laplace of integer scales ``t_1 = t_2`` (:mod:`.laplace`), the
counts multiplied by the public integer ``s_c``.  Under replace-one neighbours every
``c_j`` moves by at most 1 and all in the same direction (the record moves from one value
to another: the counts between them go up, or all go down), so the monotone-query
analysis (Lyu, Su & Li 2017) gives ``s_c / t_1 + s_c / t_2 <= epsilon``: pure
epsilon-DP, whatever the number of candidates.  The output is a candidate (a public
value), never a noisy number.

The guarantee does not depend on how many candidates are scanned; the accuracy does: a
long run of candidates whose counts sit just below ``T`` stops the scan early, about
``ln(run length) t / s_c`` ranks below ``q n``.  Near the top the opposite can happen: no
count exceeds ``n``, so a target within a few noise scales of ``n`` is missed whenever the
threshold's noise lands above the counts, and the scan then runs on through candidates
whose counts are all ``n`` until one query's noise is as large: octaves too high (1e121
was seen).  So the target rank is kept ``top_margin`` noise scales below ``n`` (public:
it depends on ``n`` and epsilon only), where an overshoot of ``k`` candidates has
probability about ``e^-top_margin / k``.  Nothing here knows about Dask; the
counts are :func:`dask_dppca.kernel.score_stats.count_at_most`'s, computed block by
block (held sparse: :func:`~dask_dppca.kernel.score_stats.at_most_positions`) and added
up (one pass).

A low quantile has the opposite problem at the bottom: the scan from ``-max`` passes
tens of thousands of candidates below every record (count 0), and when ``q n`` is only a
few noise scales it stops among them (``-1e308`` at n = 300).  ``from_top`` scans down
from ``+inf`` instead, over ``n - c_j`` (the records above each candidate, again monotone
with sensitivity 1, so the same guarantee), towards ``(1 - q) n``: the scan's target is
then at least ``n / 2`` records from where it starts.  :meth:`PrivateQuantile.rank_error`
states the accuracy from public parameters only; :meth:`PrivateQuantile.is_useless` says
when the scan may stop before it meets any record (the release may then be anything).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...validation import integer_at_least, real_number
from .contract import given_noise
from .laplace import IntegerNoise, integer_scale
from .parts import PrivacyPart, PureDPPart

__all__ = [
    "DEFAULT_ACCURACY_BETA",
    "DEFAULT_STEPS_PER_OCTAVE",
    "DEFAULT_TOP_MARGIN",
    "PrivateQuantile",
    "batched_draws",
    "quantile_candidates",
]

#: Candidates per factor of two: a relative resolution of 2^(1/32) - 1 = 2.2 %.
DEFAULT_STEPS_PER_OCTAVE = 32

#: The target rank stays this many noise scales (``t / s_c`` ranks) below ``n``: the
#: threshold's noise then exceeds the room left with probability ``e^-6 / 2 = 0.12 %``,
#: and an overshoot of ``k`` candidates past the top has probability about ``e^-6 / k``
#: (module docstring; docs/privacy.md, "Accuracy").
DEFAULT_TOP_MARGIN = 6.0

#: The failure probability of the accuracy bound stated in plans, notices and records.
DEFAULT_ACCURACY_BETA = 0.05

#: Candidates scanned in the first batch of noise draws, doubled batch after batch up to
#: ``_MAX_BATCH`` (the scan stops at the first hit; unused draws are discarded).
_FIRST_BATCH = 1024
_MAX_BATCH = 65536


def _batches(size: int) -> Iterator[tuple[int, int]]:
    """A scan's batches over ``size`` candidates, ``(start, stop)``: ``_FIRST_BATCH``,
    doubled up to ``_MAX_BATCH``, the last cut at the grid's end (the release draws each
    batch's noise at once; :func:`batched_draws` counts them).
    """
    start, batch = 0, _FIRST_BATCH
    while start < size:
        stop = min(start + batch, size)
        yield start, stop
        start, batch = stop, min(2 * batch, _MAX_BATCH)


def batched_draws(stop: int, size: int) -> int:
    """The candidates' noise draws of a scan over ``size`` candidates that stops at
    position ``stop``: its whole batches up to the one holding ``stop``.
    """
    drawn = 0
    for _, drawn in _batches(size):
        if drawn > stop:
            break
    return drawn


@functools.lru_cache(maxsize=8)
def _candidates(signed: bool, steps_per_octave: int) -> NDArray[np.float64]:
    s = steps_per_octave
    exponents = np.arange(-1022 * s, 1024 * s) / s
    magnitudes = np.unique(np.exp2(exponents))
    magnitudes = magnitudes[np.isfinite(magnitudes)]
    top = np.array([np.finfo(np.float64).max])
    positive = np.concatenate([magnitudes[magnitudes < top[0]], top])
    parts = [np.zeros(1), positive, np.array([np.inf])]
    if signed:
        parts.insert(0, -positive[::-1])
    grid = np.concatenate(parts)
    grid.setflags(write=False)
    return grid


def quantile_candidates(
    signed: bool = True, steps_per_octave: int = DEFAULT_STEPS_PER_OCTAVE
) -> NDArray[np.float64]:
    """The public, increasing candidate grid of :class:`PrivateQuantile` (read-only).

    Parameters
    ----------
    signed : bool, default True
        Both signs (for a centre) or non-negative only (for a radius).
    steps_per_octave : int, default 32
        Candidates per factor of two, in [1, 1024].

    Returns
    -------
    ndarray, shape (G,)
        Strictly increasing; ends with ``float64 max`` and ``+inf``.
    """
    steps = integer_at_least("steps_per_octave", steps_per_octave, 1)
    if steps > 1024:
        raise ValueError(f"steps_per_octave: must be <= 1024, got {steps}")
    return _candidates(bool(signed), steps)


@dataclass(frozen=True)
class PrivateQuantile:
    """The epsilon-DP ``quantile``-quantile of ``n_samples`` values, no bounds needed.

    Built from public parameters only; :meth:`release` is the one step that sees the exact
    counts (on the trusted worker) and draws noise.

    Parameters
    ----------
    n_samples : int
        ``n`` (public under replace-one neighbours).
    quantile : float
        ``q`` in (0, 1).
    epsilon : float
        The whole cost, split evenly between the threshold and the queries.
    signed : bool, default True
        Candidates of both signs, or non-negative only.
    steps_per_octave : int, default 32
        Grid resolution.
    top_margin : float, default 6.0
        The target rank is ``min(q n, max(n - top_margin t / s_c, n / 2))``: one the
        noise lets the scan reach (module docstring).
    from_top : bool, default False
        Scan downwards from ``+inf`` over ``n - c_j`` (the records above each candidate)
        towards the ``(1 - q) n`` records above the quantile: for ``q < 1/2`` the scan's
        target is then at least ``n / 2`` records from where it starts, so the long run
        of empty candidates below the data cannot stop it early (module docstring).  The
        release is the candidate above the one the scan stops at: the first ``t_j`` with
        ``c_j > q n``, as the upward scan's.  ``-inf`` only through the noise.

    Attributes
    ----------
    multiplier : int
        ``s_c``, the counts' public integer factor.
    noise_scale : int
        ``t`` of the threshold's and the queries' discrete Laplace noise.
    """

    n_samples: int
    quantile: float
    epsilon: float
    signed: bool = True
    steps_per_octave: int = DEFAULT_STEPS_PER_OCTAVE
    top_margin: float = DEFAULT_TOP_MARGIN
    from_top: bool = False
    multiplier: int = field(init=False)
    noise_scale: int = field(init=False)

    def __post_init__(self) -> None:
        n = integer_at_least("n_samples", self.n_samples, 1)
        q = real_number("quantile", self.quantile)
        if not 0.0 < q < 1.0:
            raise ValueError(f"quantile: must be in (0, 1), got {q!r}")
        eps = real_number("epsilon", self.epsilon)
        multiplier, noise_scale = integer_scale(eps / 2.0)  # threshold and queries
        if multiplier * n >= 2**61:
            raise ValueError(f"n_samples: {n} is too large for the integer scan")
        quantile_candidates(self.signed, self.steps_per_octave)  # validates the grid
        margin = real_number("top_margin", self.top_margin)
        if not 0.0 <= margin <= 1e6:
            raise ValueError(f"top_margin: must be in [0, 1e6], got {margin!r}")
        object.__setattr__(self, "top_margin", margin)
        object.__setattr__(self, "n_samples", n)
        object.__setattr__(self, "quantile", q)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "signed", bool(self.signed))
        object.__setattr__(self, "from_top", bool(self.from_top))
        object.__setattr__(self, "multiplier", multiplier)
        object.__setattr__(self, "noise_scale", noise_scale)

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """The cost: one epsilon-DP part (AboveThreshold, monotone counts)."""
        return (PureDPPart(self.epsilon),)

    @property
    def candidates(self) -> NDArray[np.float64]:
        """The public grid; the exact statistic is ``#{y <= t}`` for each of them."""
        return quantile_candidates(self.signed, self.steps_per_octave)

    @property
    def planned_draws(self) -> int:
        """The noise draws of a scan that stops at the candidate 1 (public: the grid).

        The release draws the threshold's noise and then the candidates' in batches
        (``_FIRST_BATCH``, doubled up to ``_MAX_BATCH``) until one passes.  The
        grid spans ``2^-1022 .. 2^1024``, so a quantile of ordinary magnitude stops within
        a few thousand of its ~10^5 candidates of 1 (a negative one sooner, or from the
        top later): the scan's work is set by the grid, hardly by the data.  What a plan
        counts (the trusted worker's time; the count is never a release).
        """
        grid = self.candidates
        one = int(np.searchsorted(grid, 1.0))  # the first candidate at or above 1
        # From the top the scan stops at the first candidate below 1 (all records above).
        stop = grid.size - one if self.from_top else one
        return 1 + batched_draws(stop, grid.size)

    @property
    def threshold(self) -> int:
        """``T``, the scaled target count (public).

        ``floor(s_c q n)``, kept ``top_margin`` noise scales below ``s_c n`` (but not
        below ``s_c n / 2``).
        """
        s, n = self.multiplier, self.n_samples
        reachable = max(s * n - self.top_margin * self.noise_scale, s * n / 2.0)
        return math.floor(min(s * self._scanned_quantile * n, reachable))

    @property
    def _scanned_quantile(self) -> float:
        """The share of records the scan counts up to: ``q``, or ``1 - q`` from the top."""
        return 1.0 - self.quantile if self.from_top else self.quantile

    @property
    def target_quantile(self) -> float:
        """The quantile actually aimed at: ``T / (s_c n)`` (``quantile`` or less), or
        ``1 - T / (s_c n)`` from the top (``quantile`` or more).
        """
        share = self.threshold / (self.multiplier * self.n_samples)
        return 1.0 - share if self.from_top else share

    def rank_error(self, beta: float = DEFAULT_ACCURACY_BETA) -> float:
        """``alpha``: with probability at least ``1 - beta`` the release is between the
        records of ranks ``r - alpha`` and ``r + alpha``, ``r`` the target rank.

        From the discrete Laplace tails ``P(|Y| >= k) < 2 e^(-k / t)``: the threshold's
        noise is below ``t ln(4 / beta)`` and every one of the ``G`` candidates' below
        ``t ln(4 G / beta)`` together with probability ``1 - beta``; the scan then stops
        at a candidate whose count is within their sum of ``s_c r``, and not before one
        is (docs/privacy.md, "Accuracy").  Public: ``n``, epsilon, the grid and ``beta``.

        Parameters
        ----------
        beta : float, default 0.05
            The probability the bound may fail, in (0, 1).

        Returns
        -------
        float
            In records (ranks).
        """
        b = real_number("beta", beta)
        if not 0.0 < b < 1.0:
            raise ValueError(f"beta: must be in (0, 1), got {beta!r}")
        size = self.candidates.size
        return self.noise_scale / self.multiplier * (math.log(4 / b) + math.log(4 * size / b))

    @property
    def stop_before_data_probability(self) -> float:
        """The probability that the scan stops before it meets any record, at most.

        The worst case (public: ``n``, epsilon, the grid) is every candidate the scan can
        pass before the data having count 0: it stops there when one of the ``G``
        queries' noise reaches ``T + rho``, with probability
        ``sum_rho P(rho) (1 - (1 - P(nu >= T + rho))^G)``, summed over the threshold's
        noise exactly (integers within 60 scales; beyond 2000 the continuous law, whose
        tails the discrete one's match to 1e-3).  Such a release is a grid value below
        (from the top: above) every record: ``-1e308`` at n = 300.
        """
        t, size, level = float(self.noise_scale), self.candidates.size, float(self.threshold)
        q = math.exp(-1.0 / t)
        if t <= 2000:
            rho = np.arange(-math.ceil(60 * t), math.ceil(60 * t) + 1, dtype=np.float64)
            weight = (1 - q) / (1 + q) * np.exp(-np.abs(rho) / t)
        else:  # the continuous law on a fine grid
            rho = np.linspace(-60 * t, 60 * t, 240_001)
            weight = np.exp(-np.abs(rho) / t) * (rho[1] - rho[0]) / (2 * t)
        x = level + rho  # a query's noise must reach this
        with np.errstate(over="ignore"):
            tail = np.where(
                x >= 0, np.exp(-np.maximum(x, 0) / t) / (1 + q), 1 - q ** (1 - x) / (1 + q)
            )
        stops = -np.expm1(size * np.log1p(-np.clip(tail, 0.0, 1.0 - 1e-16)))
        return float(min(1.0, np.sum(weight * stops)))

    def is_useless(self, beta: float = DEFAULT_ACCURACY_BETA) -> bool:
        """Whether the scan may stop before it meets any record with probability at least
        ``beta`` (:attr:`stop_before_data_probability`): the release is then as likely
        as that a grid value below (from the top: above) every record.
        """
        return self.stop_before_data_probability >= beta

    @property
    def realised_epsilon(self) -> float:
        """``2 s_c / t``: what the integer scales actually cost (<= epsilon)."""
        return 2.0 * self.multiplier / self.noise_scale

    def release(self, exact: ArrayLike, sampler: IntegerNoise | None = None) -> float:
        """The first candidate whose noisy count reaches the noisy threshold.

        Parameters
        ----------
        exact : array of int, shape (G,)
            The exact counts ``#{i : y_i <= t_j}`` for each candidate ``t_j`` (NaN
            counted as +inf).
        sampler : IntegerNoise
            Discrete Laplace noise (private: :class:`~.laplace.DiscreteLaplaceSampler`);
            required.

        Returns
        -------
        float
            A candidate; ``+inf`` when no candidate is accepted (possible only through the
            noise).
        """
        noise = given_noise(self, sampler, IntegerNoise)
        counts = np.asarray(exact)
        grid = self.candidates
        if counts.shape != grid.shape or not np.issubdtype(counts.dtype, np.integer):
            raise ValueError(
                f"exact_counts: expected integers of shape {grid.shape}, got "
                f"{counts.dtype} {counts.shape}"
            )
        counted = counts.astype(np.int64)
        if self.from_top:  # records above each candidate, from the top candidate down
            counted = np.int64(self.n_samples) - counted[::-1]
        scaled = counted * np.int64(self.multiplier)
        level = self.threshold + int(noise.draw(self.noise_scale, 1)[0])
        for start, stop in _batches(grid.size):
            noisy = scaled[start:stop] + noise.draw(self.noise_scale, stop - start)
            hits = np.flatnonzero(noisy >= level)
            if hits.size:
                return self._candidate(start + int(hits[0]))
        return -math.inf if self.from_top else math.inf

    def _candidate(self, scanned: int) -> float:
        """The released candidate for the scan's stop at position ``scanned``: that one,
        or from the top the one above it (the first with more than ``q n`` at or below).
        """
        grid = self.candidates
        if not self.from_top:
            return float(grid[scanned])
        above = grid.size - scanned  # the increasing index of the stop, plus one
        return float(grid[above]) if above < grid.size else math.inf

    def describe(self) -> dict[str, Any]:
        """The public record: everything needed to re-derive the cost."""
        return {
            "mechanism": "AboveThreshold over a public geometric grid (monotone counts)",
            "quantile": self.quantile,
            "n_samples": self.n_samples,
            "epsilon": self.epsilon,
            "realised_epsilon": self.realised_epsilon,
            "sensitivity": 1,
            "sensitivity_units": "counts, all moving in one direction (monotone)",
            "multiplier": self.multiplier,
            "noise_scale": self.noise_scale,
            "laplace_scale_counts": self.noise_scale / self.multiplier,
            "signed": self.signed,
            "steps_per_octave": self.steps_per_octave,
            "top_margin": self.top_margin,
            "target_quantile": self.target_quantile,
            "neighbours": "replace-one",
            "rank_error_95": self.rank_error(),
            **({"from_top": True} if self.from_top else {}),
        }
