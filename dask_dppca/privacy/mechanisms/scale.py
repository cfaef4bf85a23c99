"""Private robust scaling: per column a private median as the centre and a private
quantile range as the scale, by one public rule.

A real table is in its own units (age in years beside income in dollars); PCA of it
follows the largest unit.  Scaling each column by its own spread puts the columns on one
scale, but the spread of the data is private: the centre and scale are released here,
each a quantile of :mod:`.quantile` (AboveThreshold over the public signed grid, no bounds
needed), and the public rule that turns the released quantiles into a scale is
post-processing (:func:`robust_scaling`).

The exact statistic is one count matrix, ``c_kj = #{i : x_ik <= t_j}`` for every column
``k`` and candidate ``t_j`` (one pass over the records; a NaN counted as +inf), and the
release draws :data:`LEVELS` quantiles of every column from it, each its own
AboveThreshold scan with its own noise.  Sensitivity (docs/privacy.md, "Private robust
scaling"): replacing one record moves every count of a column by at most 1, all in one
direction (for the scans from the top, ``n - c_kj`` too), so each scan is
``epsilon_q``-DP whatever the data; the stage is ``len(LEVELS) d`` pure parts of
``epsilon_q``, composed exactly with the rest of the analysis.  The quantiles below the
median are scanned from the top (:class:`~.quantile.PrivateQuantile`'s ``from_top``), so
that no scan starts among the empty candidates below the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...validation import integer_at_least, real_number
from .contract import given_noise
from .laplace import IntegerNoise
from .parts import PrivacyPart
from .quantile import DEFAULT_ACCURACY_BETA, DEFAULT_STEPS_PER_OCTAVE, PrivateQuantile

__all__ = [
    "LEVELS",
    "MIN_RANGE_RATIO",
    "MIN_WIDTH",
    "RANGES",
    "RobustScale",
    "RobustScaling",
    "original_loadings",
    "robust_scaling",
]

#: The quantiles released per column: the centre, then the ranges of :data:`RANGES`.
LEVELS = (0.5, 0.25, 0.75, 0.05, 0.95, 0.01, 0.99)

#: The public rule's ranges, in the order tried: the first whose released ends give a
#: finite, positive width (and not below :data:`MIN_RANGE_RATIO` of the next range's) is
#: the column's scale; none: a scale of 1 (said in a notice).
RANGES = ((0.25, 0.75), (0.05, 0.95), (0.01, 0.99))

#: A range narrower than this share of the next, wider, released range counts as
#: collapsed.  The grid is fine at every magnitude, so between an atom (a count column's
#: zeros) and the next value lie tens of thousands of tiny candidates (2^-1022 to 1)
#: whose counts all sit at the atom's: a scan for a quantile just above the atom can stop
#: among them and release 1e-308 for what is 1.  Scaled by such a width, the column's
#: other values would be 10^300 and own every direction.  A true width a million times
#: narrower than the next range would do the same (its rare values would dominate), so
#: the wider range serves both better.
MIN_RANGE_RATIO = 2.0**-20

#: A width below this (about 7e-155) counts as collapsed whatever the next range: when
#: every range of a count column stops among the tiny candidates (q99 too: 95 % zeros and
#: the rest 1 at n = 10 000), all are 1e-308 to 1e-270.  No table's spread is this small
#: in any real unit; a column that is should be multiplied by a PUBLIC constant first.
MIN_WIDTH = 2.0**-512


@dataclass(frozen=True)
class RobustScaling:
    """A released scaling (post-processing of :class:`RobustScale`'s quantiles).

    Attributes
    ----------
    centre, scale : ndarray, shape (d,)
        Later stages read ``(x - centre) / scale``; both finite, ``scale > 0``.
    rule : list of str
        Per column, what its scale is: ``"q75-q25"``, ``"q95-q5"``, ``"q99-q1"`` or ``"1"``
        (every range collapsed); ``centre`` says ``"0"`` there when the median was not
        finite (``rule`` then reads ``"... centre 0"``).
    quantiles : ndarray, shape (d, len(LEVELS))
        The released quantiles, in :data:`LEVELS` order (sorted per column: a monotone
        rearrangement of released values).
    """

    centre: NDArray[np.float64]
    scale: NDArray[np.float64]
    rule: list[str]
    quantiles: NDArray[np.float64]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the released values and the rule per column."""
        return {
            "centre": [float(v) for v in self.centre],
            "scale": [float(v) for v in self.scale],
            "rule": list(self.rule),
            "levels": list(LEVELS),
            "quantiles": [[float(v) for v in row] for row in self.quantiles],
        }

    def collapsed(self) -> list[int]:
        """Columns whose interquartile range collapsed (their scale is a wider range, or 1)."""
        return [k for k, rule in enumerate(self.rule) if not rule.startswith("q75-q25")]


def original_loadings(directions: ArrayLike, scale: ArrayLike) -> NDArray[np.float64]:
    """Directions of scaled records in the original units: ``v / scale``, renormalised.

    A direction ``v`` of the records ``(x - c) / s`` is the linear form
    ``sum_k v_k (x_k - c_k) / s_k`` of the original columns, whose coefficients are
    ``v_k / s_k`` (post-processing of released values).

    Parameters
    ----------
    directions : array_like, shape (k, d)
    scale : array_like, shape (d,)

    Returns
    -------
    ndarray, shape (k, d)
        Unit rows (a zero row stays zero).
    """
    v = np.array(directions, dtype=np.float64, ndmin=2) / np.asarray(scale, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit: NDArray[np.float64] = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    return unit


def _level_name(q: float) -> str:
    return f"q{round(q * 100):d}"


def robust_scaling(quantiles: ArrayLike, resolved: Sequence[bool] | None = None) -> RobustScaling:
    """The public rule: centre = median, scale = the first positive finite range of
    :data:`RANGES` (at least :data:`MIN_WIDTH` and not below :data:`MIN_RANGE_RATIO` of
    the next), else 1; a non-finite median is replaced by 0.

    Post-processing of released quantiles only (free).  Each column's quantiles are
    first sorted into :data:`LEVELS`' order (released values may cross under the noise).

    Parameters
    ----------
    quantiles : array_like, shape (d, len(LEVELS))
        Released quantiles in :data:`LEVELS` order.
    resolved : sequence of bool, optional
        Per level (:data:`LEVELS` order), whether the release can locate it
        (:meth:`RobustScale.resolved_levels`, public): a range with an unresolved end is
        skipped.  Default: every level.

    Returns
    -------
    RobustScaling
    """
    values = np.array(quantiles, dtype=np.float64, ndmin=2)
    if values.shape[1] != len(LEVELS):
        raise ValueError(f"quantiles: expected {len(LEVELS)} per column, got {values.shape}")
    order = np.argsort(LEVELS)
    ranked = np.empty_like(values)
    ranked[:, order] = np.sort(values[:, order], axis=1)  # NaN (never released) last
    at = {q: ranked[:, i] for i, q in enumerate(LEVELS)}
    d = values.shape[0]
    usable = dict(zip(LEVELS, [True] * len(LEVELS) if resolved is None else list(resolved)))
    ranges = [(lo, hi) for lo, hi in RANGES if usable[lo] and usable[hi]]
    centre, scale, rule = np.zeros(d), np.ones(d), []
    for k in range(d):
        said = "1"
        with np.errstate(over="ignore", invalid="ignore"):
            widths = [float(at[hi][k] - at[lo][k]) for lo, hi in ranges]
        for i, ((lo, hi), width) in enumerate(zip(ranges, widths)):
            wider = [w for w in widths[i + 1 : i + 2] if math.isfinite(w) and w >= MIN_WIDTH]
            if (
                math.isfinite(width)
                and width >= MIN_WIDTH
                and all(width >= MIN_RANGE_RATIO * w for w in wider)
            ):
                scale[k], said = width, f"{_level_name(hi)}-{_level_name(lo)}"
                break
        median = float(at[0.5][k])
        if math.isfinite(median):
            centre[k] = median
        else:
            said += ", centre 0"
        rule.append(said)
    return RobustScaling(centre, scale, rule, ranked)


@dataclass(frozen=True)
class RobustScale:
    """The pure-DP quantiles of :data:`LEVELS` for each of ``n_features`` columns.

    Parameters
    ----------
    n_samples : int
        ``n`` (public under replace-one neighbours).
    n_features : int
        ``d``.
    epsilon : float
        Each quantile's cost (the whole costs ``len(LEVELS) n_features`` parts of it).
    steps_per_octave : int, default 32
        The grid's resolution (2.2 % relative).
    """

    n_samples: int
    n_features: int
    epsilon: float
    steps_per_octave: int = DEFAULT_STEPS_PER_OCTAVE

    def __post_init__(self) -> None:
        integer_at_least("n_features", self.n_features, 1)
        self.quantile_releases  # noqa: B018 -- validates n, epsilon and the grid now

    @property
    def quantile_releases(self) -> tuple[PrivateQuantile, ...]:
        """One column's releases, in :data:`LEVELS` order (below the median: from the top)."""
        return tuple(
            PrivateQuantile(
                self.n_samples, q, self.epsilon, True, self.steps_per_octave, from_top=q < 0.5
            )
            for q in LEVELS
        )

    @property
    def candidates(self) -> NDArray[np.float64]:
        """The public grid; the exact statistic counts each column at or below each value."""
        return self.quantile_releases[0].candidates

    @property
    def planned_draws(self) -> int:
        """The noise draws of every column's scans (:attr:`.PrivateQuantile.planned_draws`)."""
        return int(self.n_features) * sum(q.planned_draws for q in self.quantile_releases)

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One pure-DP part per quantile of every column."""
        one = tuple(p for q in self.quantile_releases for p in q.parts)
        return one * int(self.n_features)

    def rank_errors(self, beta: float = DEFAULT_ACCURACY_BETA) -> dict[str, float]:
        """Each level's rank bound (:meth:`~.quantile.PrivateQuantile.rank_error`), in
        records, with probability ``1 - beta`` each.
        """
        return {_level_name(q.quantile): q.rank_error(beta) for q in self.quantile_releases}

    def resolved_levels(self, beta: float = DEFAULT_ACCURACY_BETA) -> tuple[bool, ...]:
        """Per level, whether the noise at the level itself keeps it on its side of the
        data (public): ``2 (t / s_c) ln(4 / beta)`` records, the threshold's and the
        target candidate's noise each within ``(t / s_c) ln(4 / beta)``, below
        ``min(q, 1 - q) n`` (``q`` the quantile aimed at).

        A level that is not (q99 at n = 10 000 and d = 20: 100 records from the top, a
        noise scale of 160) is placed by luck: it stops anywhere in a run of tied counts,
        such as the tiny candidates above a column's zeros, so the rule does not read it
        (:func:`robust_scaling`'s ``resolved``).  Unlike :meth:`rank_errors` this leaves
        out the union over every candidate: the rule needs where a level typically lands,
        not the guarantee (post-processing either way).
        """
        b = real_number("beta", beta)
        if not 0.0 < b < 1.0:
            raise ValueError(f"beta: must be in (0, 1), got {beta!r}")
        n = self.n_samples
        return tuple(
            2.0 * q.noise_scale / q.multiplier * math.log(4.0 / b)
            < min(q.target_quantile, 1.0 - q.target_quantile) * n
            for q in self.quantile_releases
        )

    def useless_levels(self, beta: float = DEFAULT_ACCURACY_BETA) -> list[str]:
        """The levels whose rank bound reaches their scan's start (public)."""
        return [_level_name(q.quantile) for q in self.quantile_releases if q.is_useless(beta)]

    def release(self, exact: ArrayLike, sampler: IntegerNoise | None = None) -> NDArray[np.float64]:
        """The ``d x len(LEVELS)`` private quantiles from ``#{x_k <= t}`` (shape (d, G)).

        Parameters
        ----------
        exact : array of int, shape (d, G)
            The exact counts of every column at or below every candidate.
        sampler : IntegerNoise
            Discrete Laplace noise (private: the OpenDP-backed sampler); required.

        Returns
        -------
        ndarray, shape (d, len(LEVELS))
            Grid values (``+-inf`` only through the noise), in :data:`LEVELS` order.
        """
        noise = given_noise(self, sampler, IntegerNoise)
        counts = np.asarray(exact)
        if counts.ndim != 2 or counts.shape[0] != self.n_features:
            raise ValueError(
                f"exact_counts: expected {self.n_features} rows of counts, got {counts.shape}"
            )
        releases = self.quantile_releases
        values: NDArray[np.float64] = np.array(
            [[q.release(row, noise) for q in releases] for row in counts], dtype=np.float64
        )
        return values

    def describe(self) -> dict[str, Any]:
        """The public record: everything needed to re-derive the cost and the accuracy."""
        one = self.quantile_releases[0]
        return {
            "mechanism": "bound-free private quantiles per column (AboveThreshold, discrete "
            "Laplace on counts; below the median scanned from the top)",
            "guarantee": "epsilon-DP",
            "epsilon": self.epsilon,
            "count": len(LEVELS) * int(self.n_features),
            "levels": list(LEVELS),
            "sensitivity": 1,
            "scale": one.noise_scale / one.multiplier,
            "rank_error_95": self.rank_errors(),
            "target_quantiles": {
                _level_name(q.quantile): q.target_quantile for q in self.quantile_releases
            },
            "rule": "centre q50; scale q75-q25, else q95-q5, else q99-q1, else 1",
            "n_samples": int(self.n_samples),
        }
