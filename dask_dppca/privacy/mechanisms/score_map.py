"""A private score map as one stage: its mechanisms, its budget split, and the released map.

:class:`ScoreMapMechanism` is built from public parameters only (n, the bins, the
stage's (epsilon, delta), the PUBLIC group domain) and holds the frame's four quantiles
(:class:`~.frame.FrameMechanism`) and the histograms (:class:`~.histogram.AdditiveHistogram`,
optionally :class:`~.histogram.SparseHistogram`).  Its :attr:`~ScoreMapMechanism.parts`
are every release's cost, for an accountant to compose exactly; by basic composition
alone they already fit in the stage's (epsilon, delta):

    frame: frame_share * epsilon (four pure parts of a quarter each, no delta);
    each histogram: (1 - frame_share) * epsilon / (number of histograms), delta / (number).

:class:`ScoreMap` is what leaves the trusted worker: the frame, the noisy histograms and
the public description.  Re-plotting and re-sampling synthetic points from it cost nothing.

The stage is a composite (:class:`~.contract.CompositeMechanism`), not one release: the
radius is released about the released centre and the histograms on the released frame,
each exact statistic computed from the data and the values released before it.  Its
:attr:`~ScoreMapMechanism.mechanisms` are the frame's four quantiles, each histogram and
the group sizes, every one a :class:`~.contract.Mechanism`;
:meth:`~ScoreMapMechanism.release_centre`, :meth:`~ScoreMapMechanism.release_radius` and
:meth:`~ScoreMapMechanism.release_histograms` release those that share one exact
statistic (the compute layer runs them in that order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...validation import integer_at_least, positive_finite, real_number
from .calibration import gaussian_dp_mu
from .contract import Mechanism
from .frame import DEFAULT_INFLATION, DEFAULT_RADIUS_QUANTILE, Frame, FrameMechanism
from .histogram import (
    AdditiveHistogram,
    GroupCounts,
    NoisyHistogram,
    SparseHistogram,
    allocate,
    synthetic_points,
)
from .laplace import IntegerNoise
from .noise import NoiseSampler
from .parts import PrivacyPart

__all__ = [
    "DEFAULT_FRAME_SHARE",
    "GROUP_COUNTS_SHARE",
    "OTHER_GROUP",
    "ScoreMap",
    "ScoreMapMechanism",
    "noisy_size_text",
]

#: The frame's share of the stage's epsilon (the rest goes to the histograms).
DEFAULT_FRAME_SHARE = 0.25
#: With groups, the share of the additive histogram's Gaussian budget (in mu^2) that goes to
#: the group sizes: the histogram keeps mu sqrt(0.9), the sizes get mu sqrt(0.1), and the
#: two compose exactly (Gaussian DP) to the histogram's mu.
GROUP_COUNTS_SHARE = 0.1
#: The name of the group that holds every label outside the public domain.
OTHER_GROUP = "other"
_METHODS = ("additive", "sparse")


@dataclass(frozen=True)
class ScoreMapMechanism:
    """Every release of one score map, planned from public parameters.

    Parameters
    ----------
    n_samples : int
    epsilon, delta : float
        The stage's share of the analysis' budget.
    bins : (int, int), default (10, 10)
    domain : sequence of labels, optional
        The PUBLIC group labels; labels outside it (missing ones too) form the group
        ``"other"``.  None: one group.
    methods : tuple of str, default ("additive",)
        Any of ``"additive"``, ``"sparse"``.
    frame_share : float, default 0.25
    radius_quantile, inflation : float
        The frame's (:class:`~.frame.FrameMechanism`).
    composition : str
        How the parts are composed (recorded in :meth:`describe`).
    """

    n_samples: int
    epsilon: float
    delta: float
    bins: tuple[int, int] = (10, 10)
    domain: tuple[Any, ...] | None = None
    methods: tuple[str, ...] = ("additive",)
    frame_share: float = DEFAULT_FRAME_SHARE
    radius_quantile: float = DEFAULT_RADIUS_QUANTILE
    inflation: float = DEFAULT_INFLATION
    composition: str = (
        "basic composition of the parts fits (epsilon, delta); an accountant may "
        "compose them tighter"
    )
    frame: FrameMechanism = field(init=False)
    histograms: dict[str, AdditiveHistogram | SparseHistogram] = field(init=False)
    group_counts: GroupCounts | None = field(init=False)

    def __post_init__(self) -> None:
        n = integer_at_least("n_samples", self.n_samples, 1)
        eps = positive_finite("epsilon", self.epsilon)
        dlt = real_number("delta", self.delta)
        if not 0.0 < dlt < 1.0:
            raise ValueError(f"delta: must be in (0, 1), got {dlt!r}")
        share = real_number("frame_share", self.frame_share)
        if not 0.0 < share < 1.0:
            raise ValueError(f"frame_share: must be in (0, 1), got {share!r}")
        methods = tuple(dict.fromkeys(self.methods))
        if not methods or any(m not in _METHODS for m in methods):
            raise ValueError(
                f"methods: must be a non-empty subset of {_METHODS}, got {self.methods!r}"
            )
        domain = None if self.domain is None else tuple(self.domain)
        if domain is not None and (len(set(domain)) != len(domain) or OTHER_GROUP in domain):
            raise ValueError(
                f"domain: labels must be distinct and not {OTHER_GROUP!r}, got {domain!r}"
            )
        n_groups = 1 if domain is None else len(domain) + 1
        frame = FrameMechanism(n, share * eps, self.radius_quantile, self.inflation)
        eps_h, dlt_h = (1.0 - share) * eps / len(methods), dlt / len(methods)
        histograms: dict[str, AdditiveHistogram | SparseHistogram] = {}
        group_counts = None
        for method in methods:
            if method == "additive":
                mu = gaussian_dp_mu(eps_h, dlt_h)
                if domain is not None:  # the sizes take a share of the Gaussian budget
                    group_counts = GroupCounts(n_groups, mu * math.sqrt(GROUP_COUNTS_SHARE))
                    mu *= math.sqrt(1.0 - GROUP_COUNTS_SHARE)
                histograms[method] = AdditiveHistogram(self.bins, mu, n_groups)
            else:
                histograms[method] = SparseHistogram(self.bins, eps_h, dlt_h, n_groups)
        for name, value in [
            ("n_samples", n),
            ("epsilon", eps),
            ("delta", dlt),
            ("frame_share", share),
            ("methods", methods),
            ("domain", domain),
            ("bins", histograms[methods[0]].bins),
            ("frame", frame),
            ("histograms", histograms),
            ("group_counts", group_counts),
        ]:
            object.__setattr__(self, name, value)

    @classmethod
    def of_parts(
        cls,
        n_samples: int,
        *,
        frame_epsilon: float,
        additive_mu: float | None = None,
        group_counts_mu: float | None = None,
        sparse: tuple[float, float] | None = None,
        bins: tuple[int, int] = (10, 10),
        domain: tuple[Any, ...] | None = None,
        radius_quantile: float = DEFAULT_RADIUS_QUANTILE,
        inflation: float = DEFAULT_INFLATION,
        composition: str = "composed exactly with the analysis' other parts",
    ) -> ScoreMapMechanism:
        """The map whose releases have exactly these parameters (an analysis' split).

        The frame costs ``frame_epsilon`` (four pure parts of a quarter each), the additive
        histogram is ``additive_mu``-GDP, the group sizes ``group_counts_mu``-GDP (given
        exactly when there is a domain and an additive histogram), the sparse histogram
        ``sparse = (epsilon, delta)``-DP.  Every parameter is public; the caller composes
        :attr:`parts` with the rest of its analysis.  The recorded ``epsilon`` and
        ``delta`` are the basic-composition bound of the pure and approximate parts only
        (Gaussian parts are stated as mu); the accountant's exact figure is the caller's.
        """
        if additive_mu is None and sparse is None:
            raise ValueError("methods: give additive_mu, sparse or both")
        if (group_counts_mu is not None) != (domain is not None and additive_mu is not None):
            raise ValueError(
                "group_counts_mu: give it exactly when there are groups and an additive histogram"
            )
        methods = (("additive",) if additive_mu is not None else ()) + (
            ("sparse",) if sparse is not None else ()
        )
        frame_eps = positive_finite("frame_epsilon", frame_epsilon)
        sparse_eps, sparse_delta = sparse if sparse is not None else (0.0, 0.0)
        # The frame's share of the stage's squared strengths (the split's currency).
        frame_strength = frame_eps**2 / 4.0
        rest = sum(float(v) ** 2 for v in (additive_mu, group_counts_mu) if v is not None)
        rest += float(sparse_eps) ** 2
        # Validate the public parameters as the plain constructor does, then replace its
        # releases by the given ones (a frozen dataclass: object.__setattr__).
        nominal = cls(n_samples, 1.0, 0.5, bins, domain, methods, 0.5, radius_quantile, inflation)
        n_groups = len(nominal.group_names)
        histograms: dict[str, AdditiveHistogram | SparseHistogram] = {}
        if additive_mu is not None:
            histograms["additive"] = AdditiveHistogram(nominal.bins, additive_mu, n_groups)
        if sparse is not None:
            histograms["sparse"] = SparseHistogram(nominal.bins, sparse_eps, sparse_delta, n_groups)
        group_counts = None if group_counts_mu is None else GroupCounts(n_groups, group_counts_mu)
        for name, value in [
            ("epsilon", frame_eps + float(sparse_eps)),
            ("delta", float(sparse_delta)),
            ("frame_share", frame_strength / (frame_strength + rest)),
            ("composition", composition),
            ("frame", FrameMechanism(nominal.n_samples, frame_eps, radius_quantile, inflation)),
            ("histograms", histograms),
            ("group_counts", group_counts),
        ]:
            object.__setattr__(nominal, name, value)
        return nominal

    @property
    def group_names(self) -> tuple[str, ...]:
        """The rows of every histogram: the domain's labels as strings, then ``"other"``
        (or ``("all",)`` without groups).
        """
        if self.domain is None:
            return ("all",)
        return tuple(str(label) for label in self.domain) + (OTHER_GROUP,)

    @property
    def mechanisms(self) -> Mapping[str, Mechanism]:
        """Every release in order: the frame's four quantiles, each histogram by method,
        then the group sizes (``"group counts"``, when released).
        """
        out: dict[str, Mechanism] = dict(self.frame.mechanisms)
        out.update(self.histograms)
        if self.group_counts is not None:
            out["group counts"] = self.group_counts
        return out

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """Every release's cost: the frame's four quantiles, then each histogram, then
        the group sizes.
        """
        return tuple(p for mechanism in self.mechanisms.values() for p in mechanism.parts)

    def release_centre(self, exact_counts: Any, sampler: IntegerNoise) -> tuple[float, float]:
        """The two private medians from ``#{y_k <= t}`` (shape (2, G)), on the trusted worker."""
        q = self.frame.centre
        return (q.release(exact_counts[0], sampler), q.release(exact_counts[1], sampler))

    def release_radius(self, exact_counts: Any, sampler: IntegerNoise) -> tuple[float, float]:
        """The two private radii from ``#{|y_k - c_k| <= t}`` (shape (2, G))."""
        q = self.frame.radius
        return (q.release(exact_counts[0], sampler), q.release(exact_counts[1], sampler))

    def release_histograms(
        self, exact_counts: Any, gaussian: NoiseSampler, integer: IntegerNoise
    ) -> tuple[dict[str, NoisyHistogram], NDArray[np.float64] | None]:
        """Every histogram of the exact ``counts[g, cell]``, noised once each, and the
        noisy group sizes (None without groups or without the additive histogram).
        """
        out: dict[str, NoisyHistogram] = {}
        for name, histogram in self.histograms.items():
            if isinstance(histogram, AdditiveHistogram):
                out[name] = histogram.release(exact_counts, gaussian)
            else:
                out[name] = histogram.release(exact_counts, integer)
        sizes = (
            None if self.group_counts is None else self.group_counts.release(exact_counts, gaussian)
        )
        return out, sizes

    def describe(self) -> dict[str, Any]:
        """The public record, with the split."""
        return {
            "n_samples": self.n_samples,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "bins": list(self.bins),
            "groups": list(self.group_names),
            "frame_share": self.frame_share,
            "frame": self.frame.describe(),
            "histograms": {name: h.describe() for name, h in self.histograms.items()},
            "group_counts": None if self.group_counts is None else self.group_counts.describe(),
            "neighbours": "replace-one",
            "composition": self.composition,
        }


@dataclass(frozen=True)
class ScoreMap:
    """A released score map: public, so plotting and re-sampling it cost nothing.

    Attributes
    ----------
    frame : Frame
    histograms : dict of str to NoisyHistogram
        ``"additive"`` and/or ``"sparse"``.
    groups : tuple of str
        Row names of every histogram.
    axes : (int, int)
        The components plotted (0-based).
    privacy : dict
        :meth:`ScoreMapMechanism.describe`.
    group_counts : ndarray, shape (n_groups,), optional
        The noisy group sizes (unclipped), when released.
    """

    frame: Frame
    histograms: dict[str, NoisyHistogram]
    groups: tuple[str, ...]
    axes: tuple[int, int] = (0, 1)
    privacy: dict[str, Any] = field(default_factory=dict)
    group_counts: NDArray[np.float64] | None = None

    @property
    def bins(self) -> tuple[int, int]:
        """``(m_x, m_y)``."""
        return next(iter(self.histograms.values())).bins

    def histogram(self, method: str | None = None) -> NoisyHistogram:
        """The ``method`` histogram (the first released one by default)."""
        if method is None:
            return next(iter(self.histograms.values()))
        if method not in self.histograms:
            raise ValueError(f"method: expected one of {sorted(self.histograms)}, got {method!r}")
        return self.histograms[method]

    def group_sizes(self, method: str | None = None) -> dict[str, float]:
        """Noisy group sizes, clipped at 0: the released group counts, else the histogram's
        rows summed (post-processing either way; never the exact sizes).
        """
        if self.group_counts is not None:
            sizes = np.clip(self.group_counts, 0.0, None)
        else:
            sizes = self.histogram(method).group_sizes()
        return dict(zip(self.groups, (float(v) for v in sizes)))

    def synthetic(
        self,
        size: int | None = None,
        *,
        method: str | None = None,
        sampling: str = "uniform",
        bandwidth_scale: float | None = None,
        floor_sigmas: float = 2.0,
        rng: np.random.Generator | None = None,
    ) -> dict[str, NDArray[np.float64]]:
        """Synthetic points per group (post-processing).

        Each group gets its noisy size (:meth:`group_sizes`) times its histogram's noisy
        in-frame share; with ``size``, that many points in all, split in proportion
        (largest remainder).  Cells whose noisy count is below ``floor_sigmas`` times the
        noise's sigma are left empty (by default 2: otherwise the noise's positive part in
        the empty cells scatters points over the whole frame).  The out-of-frame mass has
        no position and is not sampled.
        """
        hist = self.histogram(method)
        mx, my = hist.bins
        kept = hist.kept(hist.floor(floor_sigmas))
        in_frame = kept[:, : mx * my]
        everywhere = kept.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(everywhere > 0, in_frame.sum(axis=1) / everywhere, 0.0)
        expected = np.array(list(self.group_sizes(method).values())) * share  # in frame
        if size is None:
            sizes = np.rint(expected).astype(np.int64)
        else:
            sizes = allocate(integer_at_least("size", size, 0), expected)
        generator = rng if rng is not None else np.random.default_rng()
        return {
            name: synthetic_points(
                in_frame[g],
                self.frame,
                hist.bins,
                int(sizes[g]),
                method=sampling,
                bandwidth_scale=bandwidth_scale,
                rng=generator,
            )
            for g, name in enumerate(self.groups)
        }

    def released_group_sizes(self, method: str | None = None) -> dict[str, float]:
        """The noisy group sizes as released (not clipped at 0): what every text shows
        (:func:`noisy_size_text`); :meth:`group_sizes` clips them for sampling.
        """
        if self.group_counts is not None:
            sizes = np.asarray(self.group_counts, dtype=float)
        else:
            sizes = self.histogram(method).group_sizes()
        return dict(zip(self.groups, (float(v) for v in sizes)))

    def summary(self) -> str:
        """The release in a few lines of text (frame, histograms, noisy group sizes)."""
        (x0, x1), (y0, y1) = self.frame.xlim, self.frame.ylim
        a, b = self.axes
        lines = [
            f"private score map of PC{a + 1} x PC{b + 1}, {self.bins[0]} x {self.bins[1]} bins",
            f"frame: PC{a + 1} in [{x0:.4g}, {x1:.4g}], PC{b + 1} in [{y0:.4g}, {y1:.4g}]",
            f"histograms: {', '.join(self.histograms)}",
        ]
        hist = self.histogram()
        outside = hist.out_of_frame()
        for g, (name, size) in enumerate(self.released_group_sizes().items()):
            lines.append(
                f"  {name}: noisy size {noisy_size_text(size)}, outside the frame "
                f"{outside[g]:.0f} (noisy)"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "frame": self.frame.to_dict(),
            "histograms": {name: h.to_dict() for name, h in self.histograms.items()},
            "groups": list(self.groups),
            "axes": list(self.axes),
            "privacy": self.privacy,
            "group_counts": None if self.group_counts is None else self.group_counts.tolist(),
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ScoreMap:
        """The map a :meth:`to_dict` record describes."""
        cx, cy = (float(v) for v in record["frame"]["centre"])
        hx, hy = (float(v) for v in record["frame"]["half_width"])
        histograms = {}
        for name, h in record["histograms"].items():
            mx, my = (int(v) for v in h["bins"])
            counts = np.asarray(h["counts"], dtype=np.float64)
            sigma = None if h.get("sigma") is None else float(h["sigma"])
            histograms[name] = NoisyHistogram(counts, (mx, my), str(h["method"]), sigma)
        ax, ay = (int(v) for v in record.get("axes", (0, 1)))
        groups = tuple(str(g) for g in record["groups"])
        privacy = dict(record.get("privacy", {}))
        recorded = record.get("group_counts")
        sizes = None if recorded is None else np.asarray(recorded, dtype=np.float64)
        return cls(Frame((cx, cy), (hx, hy)), histograms, groups, (ax, ay), privacy, sizes)


def noisy_size_text(size: float) -> str:
    """A released (noisy) group size as every text shows it: the score map's summary, the
    report's panel titles and captions, and the notices (one source, so they agree).
    The value as released, not clipped at 0: a negative one says the group is noise.

    Examples
    --------
    >>> from dask_dppca.privacy.mechanisms.score_map import noisy_size_text
    >>> noisy_size_text(-14.2), noisy_size_text(3.5), noisy_size_text(1234.6)
    ('-14.2', '3.5', '1235')
    """
    value = float(size)
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
