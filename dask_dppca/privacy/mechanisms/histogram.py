"""Private histograms of the scores on a public grid, and synthetic points from them.

The exact statistic is the integer matrix ``counts[g, cell]``: one row per group of the
PUBLIC label domain (plus "other"), one column per cell of the ``m_x x m_y`` grid of the
released frame (x fastest) and a last column for the scores outside the frame
(:func:`dask_dppca.kernel.score_stats.histogram_counts`).  Under replace-one neighbours
one record leaves one (group, cell) and enters another: two entries move by one, so the
matrix has l2 sensitivity ``sqrt 2`` and l1 sensitivity 2, groups or not (parallel
composition over the groups is this one release; docs/privacy.md, "Score maps").

* :class:`AdditiveHistogram`: Gaussian noise of scale ``sqrt(2) / mu`` on every entry
  (mu-GDP), from a float-safe :class:`~.noise.NoiseSampler`; integer counts lie on every
  lattice those samplers use, so no input rounding enters.
* :class:`SparseHistogram`: Karwa-Vadhan stability histogram: discrete Laplace noise on
  the non-empty entries only, entries below a threshold set to zero; (epsilon, delta)-DP.
* :func:`synthetic_points`: points drawn from a released histogram (post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...validation import integer_at_least, positive_finite, real_number
from .calibration import gaussian_dp_mu
from .contract import given_noise
from .frame import Frame
from .laplace import IntegerNoise, integer_scale
from .noise import NoiseSampler
from .parts import ApproxDPPart, GaussianPart, PrivacyPart

__all__ = [
    "AdditiveHistogram",
    "GroupCounts",
    "NoisyHistogram",
    "SparseHistogram",
    "allocate",
    "synthetic_points",
]

_SQRT2 = math.sqrt(2.0)
#: sigma stays below this so that every lattice step of the project's samplers is <= 1
#: (LatticeSampler: sigma / 2^30 at the coarsest) and integer counts need no rounding.
_MAX_SIGMA = 2.0**30


def _bins(bins: Any) -> tuple[int, int]:
    try:
        mx, my = bins
    except (TypeError, ValueError):
        raise ValueError(f"bins: must be two integers (m_x, m_y), got {bins!r}") from None
    return integer_at_least("bins[0]", mx, 1), integer_at_least("bins[1]", my, 1)


def _check_counts(counts: ArrayLike, shape: tuple[int, int]) -> NDArray[np.int64]:
    c = np.asarray(counts)
    if c.shape != shape or not np.issubdtype(c.dtype, np.integer):
        raise ValueError(
            f"exact_counts: expected integers of shape {shape}, got {c.dtype} {c.shape}"
        )
    return c.astype(np.int64)


@dataclass(frozen=True)
class NoisyHistogram:
    """A released histogram (public): noisy counts per group and cell.

    Attributes
    ----------
    counts : ndarray, shape (n_groups, m_x m_y + 1)
        Noisy counts, x fastest; the last column is the out-of-frame cell.  Unclipped
        for the additive histogram (unbiased), zero or above the threshold for the sparse one.
    bins : (int, int)
    method : str
        ``"additive"`` or ``"sparse"``.
    sigma : float or None
        The noise's standard deviation per entry (public; the additive histogram's).

    Every view below may drop the entries under a ``floor`` (in counts, e.g. two sigma):
    post-processing of the release, free, which removes most of the mass the noise puts
    in empty cells (benchmarks/bench_score_map.py measures it).
    """

    counts: NDArray[np.float64]
    bins: tuple[int, int]
    method: str
    sigma: float | None = None

    @property
    def n_groups(self) -> int:
        """Rows of ``counts``."""
        return int(self.counts.shape[0])

    def floor(self, sigmas: float) -> float:
        """``sigmas`` times the noise's sigma (0 for a histogram without one)."""
        return float(sigmas) * (self.sigma or 0.0)

    def kept(self, floor: float = 0.0) -> NDArray[np.float64]:
        """The counts with every entry below ``floor`` set to 0, clipped at 0."""
        kept: NDArray[np.float64] = np.where(self.counts >= floor, self.counts, 0.0)
        return np.clip(kept, 0.0, None)

    def probabilities(self, floor: float = 0.0) -> NDArray[np.float64]:
        """Counts below ``floor`` set to 0, clipped at 0 and normalised per group over all
        cells (out-of-frame included); a group with no positive count gets zeros
        (post-processing).
        """
        clipped = self.kept(floor)
        totals = clipped.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(totals > 0, clipped / np.where(totals > 0, totals, 1.0), 0.0)

    def grid(self, group: int | None = None, floor: float = 0.0) -> NDArray[np.float64]:
        """The in-frame counts (below ``floor``: 0) clipped at 0 as an ``(m_y, m_x)`` image
        (row = y bin); summed over groups when ``group`` is None.
        """
        mx, my = self.bins
        kept = self.kept(floor)
        rows = kept if group is None else kept[group : group + 1]
        image: NDArray[np.float64] = rows[:, : mx * my].sum(axis=0)
        return image.reshape(my, mx)

    def out_of_frame(self) -> NDArray[np.float64]:
        """The noisy out-of-frame count of each group, clipped at 0."""
        out: NDArray[np.float64] = np.clip(self.counts[:, -1], 0.0, None)
        return out

    def group_sizes(self) -> NDArray[np.float64]:
        """Noisy group sizes: each group's noisy counts summed (out-of-frame included),
        clipped at 0: post-processing, never the exact sizes.
        """
        sizes: NDArray[np.float64] = np.clip(self.counts.sum(axis=1), 0.0, None)
        return sizes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "method": self.method,
            "bins": list(self.bins),
            "counts": self.counts.tolist(),
            "sigma": self.sigma,
        }


@dataclass(frozen=True)
class AdditiveHistogram:
    """Gaussian noise ``N(0, sigma^2)``, ``sigma = sqrt(2) / mu``, on every count: mu-GDP.

    Parameters
    ----------
    bins : (int, int)
        ``(m_x, m_y)``.
    mu : float
        The Gaussian-DP parameter; :meth:`of_epsilon` converts an (epsilon, delta).
    n_groups : int, default 1
        Rows of the count matrix (the domain's labels plus "other").
    """

    bins: tuple[int, int]
    mu: float
    n_groups: int = 1
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bins", _bins(self.bins))
        mu = positive_finite("mu", self.mu)
        object.__setattr__(self, "mu", mu)
        object.__setattr__(self, "n_groups", integer_at_least("n_groups", self.n_groups, 1))
        sigma = _SQRT2 / mu
        if sigma >= _MAX_SIGMA:
            raise ValueError(f"mu: {mu!r} is too small (sigma would exceed 2^30)")
        object.__setattr__(self, "sigma", sigma)

    @classmethod
    def of_epsilon(
        cls, bins: tuple[int, int], epsilon: float, delta: float, n_groups: int = 1
    ) -> AdditiveHistogram:
        """The histogram that is (epsilon, delta)-DP on its own (analytic Gaussian)."""
        return cls(bins, gaussian_dp_mu(epsilon, delta), n_groups)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the count matrix."""
        return (self.n_groups, self.bins[0] * self.bins[1] + 1)

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One mu-GDP part."""
        return (GaussianPart(self.mu),)

    def release(self, exact: ArrayLike, sampler: NoiseSampler | None = None) -> NoisyHistogram:
        """Every count plus ``N(0, sigma^2)`` from ``sampler`` (the only step that sees them).

        Parameters
        ----------
        exact : array of int, shape (n_groups, m_x m_y + 1)
            The exact counts.
        sampler : NoiseSampler
            Float-safe (:class:`~.noise.OpenDPSampler` by default in the compute layer);
            required.
        """
        noise = given_noise(self, sampler, NoiseSampler)
        counts = _check_counts(exact, self.shape)
        noisy = noise.add_noise(counts.ravel().astype(np.float64), self.sigma)
        return NoisyHistogram(noisy.reshape(self.shape), self.bins, "additive", self.sigma)

    def describe(self) -> dict[str, Any]:
        """The public record."""
        return {
            "method": "additive",
            "mechanism": "Gaussian noise on every count (l2 sensitivity sqrt 2, replace-one)",
            "bins": list(self.bins),
            "n_groups": self.n_groups,
            "mu": self.mu,
            "sensitivity": _SQRT2,
            "sigma": self.sigma,
        }


@dataclass(frozen=True)
class GroupCounts:
    """Noisy group sizes: ``N(0, sigma^2)``, ``sigma = sqrt(2) / mu``, on each group's count.

    One record changes group (two sizes move by one) or not: l2 sensitivity ``sqrt 2``.
    The exact sizes are the count matrix's row sums, taken inside the release.

    Parameters
    ----------
    n_groups : int
    mu : float
    """

    n_groups: int
    mu: float
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_groups", integer_at_least("n_groups", self.n_groups, 1))
        mu = positive_finite("mu", self.mu)
        if _SQRT2 / mu >= _MAX_SIGMA:
            raise ValueError(f"mu: {mu!r} is too small (sigma would exceed 2^30)")
        object.__setattr__(self, "mu", mu)
        object.__setattr__(self, "sigma", _SQRT2 / mu)

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One mu-GDP part."""
        return (GaussianPart(self.mu),)

    def release(self, exact: ArrayLike, sampler: NoiseSampler | None = None) -> NDArray[np.float64]:
        """Each group's size plus noise from ``sampler`` (required), from the exact count
        matrix ``counts[g, cell]``.
        """
        noise = given_noise(self, sampler, NoiseSampler)
        counts = np.asarray(exact)
        if counts.ndim != 2 or counts.shape[0] != self.n_groups:
            raise ValueError(
                f"exact_counts: expected {self.n_groups} rows of integers, got {counts.shape}"
            )
        sizes = _check_counts(counts, counts.shape).sum(axis=1)
        return noise.add_noise(sizes.astype(np.float64), self.sigma)

    def describe(self) -> dict[str, Any]:
        """The public record."""
        return {
            "mechanism": "Gaussian noise on each group's size (l2 sensitivity sqrt 2)",
            "n_groups": self.n_groups,
            "mu": self.mu,
            "sensitivity": _SQRT2,
            "sigma": self.sigma,
        }


@dataclass(frozen=True)
class SparseHistogram:
    """Stability histogram: noise on non-empty counts only, small ones zeroed; (eps, delta)-DP.

    A non-empty count ``c`` is released as ``(s c + Y) / s`` when ``s c + Y >= K``, else 0
    (``Y`` is drawn for every entry, empty ones too, so that the time taken says nothing
    about how many are non-empty);
    ``Y`` discrete Laplace of scale ``t``, ``s / t <= epsilon / 2`` (each of the two changed
    entries costs half), ``K = s + ceil(t ln(2 / delta))`` so that an entry of count 1 passes
    with probability ``<= delta / 2``.  Empty entries stay 0.

    Parameters
    ----------
    bins : (int, int)
    epsilon : float
    delta : float
        In (0, 1).
    n_groups : int, default 1
    """

    bins: tuple[int, int]
    epsilon: float
    delta: float
    n_groups: int = 1
    multiplier: int = field(init=False)
    noise_scale: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bins", _bins(self.bins))
        eps = positive_finite("epsilon", self.epsilon)
        dlt = real_number("delta", self.delta)
        if not 0.0 < dlt < 1.0:
            raise ValueError(f"delta: must be in (0, 1), got {dlt!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", dlt)
        object.__setattr__(self, "n_groups", integer_at_least("n_groups", self.n_groups, 1))
        s, t = integer_scale(eps / 2.0)
        object.__setattr__(self, "multiplier", s)
        object.__setattr__(self, "noise_scale", t)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the count matrix."""
        return (self.n_groups, self.bins[0] * self.bins[1] + 1)

    @property
    def threshold(self) -> int:
        """``K`` in scaled units (public)."""
        return self.multiplier + math.ceil(self.noise_scale * math.log(2.0 / self.delta))

    @property
    def threshold_count(self) -> float:
        """``K / s``: the smallest count a released entry can show."""
        return self.threshold / self.multiplier

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One (epsilon, delta)-DP part."""
        return (ApproxDPPart(self.epsilon, self.delta),)

    def release(self, exact: ArrayLike, sampler: IntegerNoise | None = None) -> NoisyHistogram:
        """Noise on the non-empty counts, the threshold, the rest 0.

        Parameters
        ----------
        exact : array of int, shape (n_groups, m_x m_y + 1)
            The exact counts.
        sampler : IntegerNoise
            Discrete Laplace (private: :class:`~.laplace.DiscreteLaplaceSampler`); required.
        """
        noise_source = given_noise(self, sampler, IntegerNoise)
        counts = _check_counts(exact, self.shape).ravel()
        out = np.zeros(counts.size)
        live = np.flatnonzero(counts > 0)
        # Noise drawn for every entry (the shape is public), used on the non-empty ones:
        # the release's time does not tell how many entries are non-empty.
        noise = noise_source.draw(self.noise_scale, counts.size)
        noisy = counts[live] * np.int64(self.multiplier) + noise[live]
        kept = noisy >= self.threshold
        out[live[kept]] = noisy[kept] / self.multiplier
        return NoisyHistogram(out.reshape(self.shape), self.bins, "sparse")

    def describe(self) -> dict[str, Any]:
        """The public record."""
        return {
            "method": "sparse",
            "mechanism": "discrete Laplace on non-empty counts, thresholded (stability histogram)",
            "bins": list(self.bins),
            "n_groups": self.n_groups,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": 1,
            "sensitivity_units": "counts, in at most two entries (replace-one)",
            "laplace_scale_counts": self.noise_scale / self.multiplier,
            "threshold_count": self.threshold_count,
        }


def allocate(total: int, weights: ArrayLike) -> NDArray[np.int64]:
    """``total`` split in proportion to ``weights`` (clipped at 0) by largest remainder,
    ties to the lower index; all zeros when no weight is positive.
    """
    n = integer_at_least("total", total, 0)
    w = np.clip(np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0), 0.0, None)
    if w.sum() <= 0:
        return np.zeros(w.size, dtype=np.int64)
    share = n * w / w.sum()
    base: NDArray[np.int64] = np.floor(share).astype(np.int64)
    order = np.argsort(-(share - base), kind="stable")
    base[order[: n - int(base.sum())]] += 1
    return base


def synthetic_points(
    probabilities: ArrayLike,
    frame: Frame,
    bins: tuple[int, int],
    size: int,
    *,
    method: str = "uniform",
    bandwidth_scale: float | None = None,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float64]:
    """Points drawn from a released histogram: post-processing, free of privacy cost.

    Each point picks an in-frame cell with probability proportional to its (clipped)
    released mass; its base is the cell's centre (``"center"``) or a uniform point of
    the cell (``"uniform"``), plus Gaussian jitter of ``bandwidth_scale`` times the bin
    width per axis (defaults 0.5 for centre, 0.25 for uniform, as the R package
    ``dppca``).  The out-of-frame cell has no position: its mass is reported, not sampled.

    Parameters
    ----------
    probabilities : ndarray, shape (m_x m_y,) or (m_x m_y + 1,)
        A released histogram's row (the out-of-frame entry, if present, is ignored).
    frame : Frame
    bins : (int, int)
    size : int
        Number of points (e.g. sized from noisy group counts with :func:`allocate`).
    method : {"uniform", "center"}
    bandwidth_scale : float, optional
    rng : numpy.random.Generator, optional
        Fresh OS entropy by default; seed one for reproducible figures (post-processing).

    Returns
    -------
    ndarray, shape (size, 2)
        Empty when the released in-frame mass is zero.
    """
    mx, my = _bins(bins)
    n = integer_at_least("size", size, 0)
    if method not in ("uniform", "center"):
        raise ValueError(f"method: must be 'uniform' or 'center', got {method!r}")
    scale = (0.25 if method == "uniform" else 0.5) if bandwidth_scale is None else bandwidth_scale
    scale = real_number("bandwidth_scale", scale)
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"bandwidth_scale: must be finite and >= 0, got {scale!r}")
    p = np.asarray(probabilities, dtype=np.float64).ravel()[: mx * my]
    p = np.where(np.isfinite(p) & (p > 0), p, 0.0)
    if p.size != mx * my:
        raise ValueError(f"probabilities: expected {mx * my} in-frame cells, got {p.size}")
    if p.sum() <= 0 or n == 0:
        return np.zeros((0, 2))
    generator = rng if rng is not None else np.random.default_rng()
    cells = generator.choice(p.size, size=n, p=p / p.sum())
    jx, jy = cells % mx, cells // mx
    x_edges, y_edges = frame.edges((mx, my))
    wx, wy = np.diff(x_edges), np.diff(y_edges)
    if method == "uniform":
        ux, uy = generator.random(n), generator.random(n)
    else:
        ux = uy = np.full(n, 0.5)
    x = x_edges[jx] + ux * wx[jx] + generator.normal(0.0, scale * float(np.median(wx)), n)
    y = y_edges[jy] + uy * wy[jy] + generator.normal(0.0, scale * float(np.median(wy)), n)
    return np.column_stack([x, y])
