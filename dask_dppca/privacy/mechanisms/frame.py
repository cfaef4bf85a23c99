"""The score map's private frame: a centre and a half-width per axis, from private quantiles.

Never the data's min or max (docs/privacy.md, "Score maps"): the centre of each axis is
the private median of its scores, the half-width ``inflation`` times the private
``radius_quantile``-quantile of ``|y - centre|`` on that axis, all four from
:class:`~.quantile.PrivateQuantile` (pure epsilon-DP, no bounds).  The two centres are
released first (one pass over the scores), the two radii from the deviations about the
released centres (a second pass); the frame is post-processing of the four releases.
So :class:`FrameMechanism` is a composite (:class:`~.contract.CompositeMechanism`): its
sub-mechanisms are the four quantiles, each a :class:`~.contract.Mechanism`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...validation import integer_at_least, positive_finite, real_number
from .parts import PrivacyPart
from .quantile import DEFAULT_STEPS_PER_OCTAVE, PrivateQuantile

__all__ = [
    "DEFAULT_INFLATION",
    "DEFAULT_RADIUS_QUANTILE",
    "DEFAULT_RADIUS_STEPS_PER_OCTAVE",
    "Frame",
    "FrameMechanism",
]

#: The radius quantile, its grid and its inflation: the frame aims at every point within
#: ``inflation`` times the ``0.97``-quantile of each axis' deviation from the centre, on a
#: grid of 2 candidates per factor 2 (coverage measured in benchmarks/bench_score_map.py).
#: Why 0.97 (docs/privacy.md, "The frame"): the frame is drawn for the bulk.  A target in
#: the top 1 % is owned by a 1 % contamination of gross outliers (the frame then spans the
#: outliers and the bulk falls in a few cells); at 0.97, up to about 2 % of gross outliers
#: per axis stay in the out-of-frame cell, where the map reports their (noisy) number.  The
#: price on a tail with no gap: a Cauchy axis leaves about 1.5 % outside (1.5 times the 0.97
#: quantile is the 0.98 one, a little more after the grid's rounding up).
#: Why the grid (same section): the AboveThreshold scan stops early, about ``ln(L) t / s_c``
#: ranks below its target, ``L`` the candidates whose counts sit within a few noise scales
#: below it; a heavy tail spreads the top ranks over octaves, so on a 32-step grid ``L`` is
#: about 75 there against about 15 for a Gaussian; on 2 steps per octave ``L`` is a handful
#: (the radius is rounded up by at most a factor sqrt 2, harmless for a frame).
#: When ``n epsilon`` is small the radius aims lower still (``PrivateQuantile``'s
#: ``top_margin``: a target too close to n blows the frame up by octaves), e.g. at the
#: 0.949 quantile at n = 5000 and the benchmark's frame budget.
DEFAULT_RADIUS_QUANTILE = 0.97
DEFAULT_RADIUS_STEPS_PER_OCTAVE = 2
DEFAULT_INFLATION = 1.5

#: Bounds that keep every edge and every width finite (post-processing of the release):
#: |centre| <= 2^1020, max(2^-1000, 2^-40 |centre|) <= half-width <= 2^1020 (a half-width
#: below the centre's float resolution would make every bin empty).
_MAX_ABS = 2.0**1020
_MIN_HALF_WIDTH = 2.0**-1000


@dataclass(frozen=True)
class Frame:
    """A released, public rectangle: ``centre[k] +- half_width[k]`` on axis k.

    Attributes
    ----------
    centre : tuple of float
        ``(c_x, c_y)``.
    half_width : tuple of float
        ``(h_x, h_y)``, > 0.
    """

    centre: tuple[float, float]
    half_width: tuple[float, float]

    @classmethod
    def from_release(
        cls, centre: tuple[float, float], radius: tuple[float, float], inflation: float
    ) -> Frame:
        """The frame of released centres and radii, kept finite (post-processing)."""
        c = tuple(float(np.clip(v, -_MAX_ABS, _MAX_ABS)) for v in centre)
        h = tuple(
            float(
                np.clip(
                    inflation * r if math.isfinite(r) else _MAX_ABS,
                    max(_MIN_HALF_WIDTH, abs(x) * 2.0**-40),
                    _MAX_ABS,
                )
            )
            for x, r in zip(c, radius)
        )
        return cls((c[0], c[1]), (h[0], h[1]))

    @property
    def xlim(self) -> tuple[float, float]:
        """``(c_x - h_x, c_x + h_x)``."""
        return (self.centre[0] - self.half_width[0], self.centre[0] + self.half_width[0])

    @property
    def ylim(self) -> tuple[float, float]:
        """``(c_y - h_y, c_y + h_y)``."""
        return (self.centre[1] - self.half_width[1], self.centre[1] + self.half_width[1])

    def edges(self, bins: tuple[int, int]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The grid's bin edges per axis: ``m + 1`` equally spaced, increasing values."""
        mx = integer_at_least("bins[0]", bins[0], 1)
        my = integer_at_least("bins[1]", bins[1], 1)
        return np.linspace(*self.xlim, mx + 1), np.linspace(*self.ylim, my + 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"centre": list(self.centre), "half_width": list(self.half_width)}


@dataclass(frozen=True)
class FrameMechanism:
    """The four quantile releases of a frame, each at ``epsilon / 4`` (public parameters).

    Parameters
    ----------
    n_samples : int
    epsilon : float
        The frame's whole cost (pure DP; four parts of ``epsilon / 4``).
    radius_quantile : float, default 0.97
    inflation : float, default 1.5
        Half-width = inflation x radius, >= 1.
    steps_per_octave : int, default 32
        The centres' grid.
    radius_steps_per_octave : int, default 2
        The radii's grid (coarse: see ``DEFAULT_RADIUS_STEPS_PER_OCTAVE``).
    """

    n_samples: int
    epsilon: float
    radius_quantile: float = DEFAULT_RADIUS_QUANTILE
    inflation: float = DEFAULT_INFLATION
    steps_per_octave: int = DEFAULT_STEPS_PER_OCTAVE
    radius_steps_per_octave: int = DEFAULT_RADIUS_STEPS_PER_OCTAVE

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_samples", integer_at_least("n_samples", self.n_samples, 1))
        object.__setattr__(self, "epsilon", positive_finite("epsilon", self.epsilon))
        q = real_number("radius_quantile", self.radius_quantile)
        if not 0.0 < q < 1.0:
            raise ValueError(f"radius_quantile: must be in (0, 1), got {q!r}")
        inflation = positive_finite("inflation", self.inflation)
        if inflation < 1.0:
            raise ValueError(f"inflation: must be >= 1, got {inflation!r}")
        object.__setattr__(self, "radius_quantile", q)
        object.__setattr__(self, "inflation", inflation)
        self.centre, self.radius  # noqa: B018 -- validates both grids now, by name

    @property
    def centre(self) -> PrivateQuantile:
        """The median of one axis' scores (signed grid), ``epsilon / 4``."""
        return PrivateQuantile(self.n_samples, 0.5, self.epsilon / 4.0, True, self.steps_per_octave)

    @property
    def radius(self) -> PrivateQuantile:
        """The ``radius_quantile`` of one axis' ``|y - c|`` (non-negative grid), ``epsilon / 4``."""
        return PrivateQuantile(
            self.n_samples,
            self.radius_quantile,
            self.epsilon / 4.0,
            False,
            self.radius_steps_per_octave,
        )

    @property
    def mechanisms(self) -> Mapping[str, PrivateQuantile]:
        """The four releases in order: the centres of both axes (one pass over the
        scores), then the radii about the released centres (a second pass).
        """
        centre, radius = self.centre, self.radius
        return {"centre x": centre, "centre y": centre, "radius x": radius, "radius y": radius}

    @property
    def planned_draws(self) -> int:
        """The noise draws of the four scans (:attr:`.PrivateQuantile.planned_draws`)."""
        return sum(mechanism.planned_draws for mechanism in self.mechanisms.values())

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """Four pure-DP parts: centre x, centre y, radius x, radius y."""
        return tuple(p for mechanism in self.mechanisms.values() for p in mechanism.parts)

    def frame(self, centre: tuple[float, float], radius: tuple[float, float]) -> Frame:
        """The frame of the four released values (post-processing)."""
        return Frame.from_release(centre, radius, self.inflation)

    def describe(self) -> dict[str, Any]:
        """The public record."""
        return {
            "epsilon": self.epsilon,
            "radius_quantile": self.radius_quantile,
            "inflation": self.inflation,
            "radius_steps_per_octave": self.radius_steps_per_octave,
            "centre": self.centre.describe(),
            "radius": self.radius.describe(),
        }
