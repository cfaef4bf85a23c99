"""A private coordinate-wise median: one bound-free private quantile per feature.

The centre a curator publishes beside the directions.  Each of the ``d`` columns gets
the bound-free quantile of :mod:`.quantile` at level 1/2 over the public signed grid
(no data range needed); its exact statistic is the column's counts
``c_jt = #{i : x_ij <= t}`` for every candidate ``t`` (a NaN counted as +inf).

Sensitivity (docs/privacy.md, "The coordinate-wise median"): replacing one record moves
every count of a column by at most 1, all in the same direction, so each column's scan
is ``epsilon_c``-DP (:class:`~.quantile.PrivateQuantile`); the ``d`` columns are ``d``
pure parts of ``epsilon_c`` each, composed exactly with the rest of the analysis.  The
output is ``d`` public grid values, never a noisy number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...validation import integer_at_least
from .contract import given_noise
from .laplace import IntegerNoise
from .parts import PrivacyPart
from .quantile import DEFAULT_STEPS_PER_OCTAVE, PrivateQuantile

__all__ = ["CoordinateMedian"]


@dataclass(frozen=True)
class CoordinateMedian:
    """The pure-DP median of each of ``n_features`` columns (public parameters only).

    Parameters
    ----------
    n_samples : int
        ``n`` (public under replace-one neighbours).
    n_features : int
        ``d``: one quantile release per column.
    epsilon : float
        Each column's cost (the whole costs ``n_features`` parts of it).
    steps_per_octave : int, default 32
        The grid's resolution (2.2 % relative).
    """

    n_samples: int
    n_features: int
    epsilon: float
    steps_per_octave: int = DEFAULT_STEPS_PER_OCTAVE

    def __post_init__(self) -> None:
        integer_at_least("n_features", self.n_features, 1)
        self.column  # noqa: B018 -- validates n, epsilon and the grid now

    @property
    def column(self) -> PrivateQuantile:
        """One column's release: the median over the signed grid at ``epsilon``."""
        return PrivateQuantile(self.n_samples, 0.5, self.epsilon, True, self.steps_per_octave)

    @property
    def candidates(self) -> NDArray[np.float64]:
        """The public grid; the exact statistic counts each column at or below each value."""
        return self.column.candidates

    @property
    def planned_draws(self) -> int:
        """The noise draws of the ``d`` scans (:attr:`.PrivateQuantile.planned_draws`)."""
        return int(self.n_features) * self.column.planned_draws

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One pure-DP part per column."""
        return self.column.parts * int(self.n_features)

    def release(self, exact: ArrayLike, sampler: IntegerNoise | None = None) -> NDArray[np.float64]:
        """The ``d`` private medians from ``#{x_j <= t}`` (shape (d, G)), on the trusted worker.

        Parameters
        ----------
        exact : array of int, shape (d, G)
            The exact counts of every column at or below every candidate.
        sampler : IntegerNoise
            Discrete Laplace noise (private: the OpenDP-backed sampler); required.

        Returns
        -------
        ndarray, shape (d,)
            Grid values (``+inf`` only through the noise).
        """
        noise = given_noise(self, sampler, IntegerNoise)
        counts = np.asarray(exact)
        if counts.ndim != 2 or counts.shape[0] != self.n_features:
            raise ValueError(
                f"exact_counts: expected {self.n_features} rows of counts, got {counts.shape}"
            )
        column = self.column
        return np.array([column.release(row, noise) for row in counts], dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """The public record: everything needed to re-derive the cost."""
        return {
            "mechanism": "bound-free private quantile per column (AboveThreshold, discrete "
            "Laplace on counts)",
            "guarantee": "epsilon-DP",
            "epsilon": self.epsilon,
            "count": int(self.n_features),
            "sensitivity": 1,
            "scale": self.column.noise_scale / self.column.multiplier,
            "column": self.column.describe(),
        }
