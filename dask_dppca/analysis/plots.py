"""Figures of a released score map (matplotlib): private only, unless told otherwise.

Every figure is drawn from a :class:`~dask_dppca.privacy.mechanisms.score_map.ScoreMap`, a public
release: re-plotting, re-styling and re-sampling synthetic points cost no privacy and
recompute nothing.  A non-private reference (the raw scores) appears only when the
caller passes one as ``reference=``, and is then labelled NOT PRIVATE.

* :func:`plot_score_map`: the noisy histogram as a heat map on the private frame, the
  out-of-frame mass written beside it; optionally synthetic points on top.
* :func:`plot_group_panels`: one panel per group on the common frame and colour scale.
* :func:`plot_synthetic`: synthetic points drawn from the released histograms, by group,
  in their own panel (not over the heat map, which they would hide).

Groups are drawn in the order of the PUBLIC domain (then ``"other"``), each with the
colour of its place in it (:func:`group_colours`), so a colour means the same group in
every figure and no group is drawn last on top of the others (the points of all groups
are drawn in one shuffled layer).  The group ``"other"`` is shown only when its noisy
size stands above its noise (:func:`shown_groups`, post-processing of the released size).

matplotlib is imported when a figure is drawn (the ``notebook`` extra).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..privacy.mechanisms.score_map import ScoreMap, noisy_size_text
from ..privacy.notices import NOISE_MULTIPLE

__all__ = [
    "OTHER_SIGMAS",
    "group_colours",
    "group_size_sigma",
    "noise_floor_sigmas",
    "plot_group_panels",
    "plot_score_map",
    "plot_synthetic",
    "shown_groups",
]

NOT_PRIVATE = "NOT PRIVATE"
_CMAP = "Purples"
#: "other" is shown when its noisy size is not below this many of its noise sigmas, the
#: notices' :data:`~dask_dppca.privacy.notices.NOISE_MULTIPLE` (one threshold: a notice
#: calls "other" noise exactly when the report does not draw it); with no label outside
#: the domain, the noise alone passes it about 0.13 % of the time.
OTHER_SIGMAS = NOISE_MULTIPLE
#: The group colours, by place in the public domain (colour-blind safe, Okabe-Ito), and
#: the colour of "other".
GROUP_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
OTHER_COLOUR = "#7f7f7f"


def group_size_sigma(score_map: ScoreMap, method: str | None = None) -> float:
    """The noise sigma of one released group size (public): the released group counts'
    sigma, else that of a histogram row's sum (``sqrt(m_x m_y + 1)`` cells).
    """
    counts = (score_map.privacy or {}).get("group_counts") or {}
    if score_map.group_counts is not None and counts.get("sigma"):
        return float(counts["sigma"])
    hist = score_map.histogram(method)
    mx, my = hist.bins
    return float(hist.sigma or 0.0) * math.sqrt(mx * my + 1)


def noise_floor_sigmas(score_map: ScoreMap, method: str | None = None) -> float:
    """The floor, in noise sigmas, under which the figures draw a cell empty: the level a
    cell of pure noise passes with probability ``1 / (2 cells)``, at least 2.

    Over the whole map (every group's cells) the noise alone then passes about one cell
    in two maps, where a fixed 2 sigmas passes 2.3 % of them (about 70 clumps of synthetic
    points on 27 x 27 cells and 4 groups).  Public: the number of cells; post-processing.
    0 for a histogram without Gaussian noise (the sparse one is thresholded already).
    """
    from statistics import NormalDist

    hist = score_map.histogram(method)
    if not hist.sigma:
        return 0.0
    mx, my = hist.bins
    cells = hist.counts.shape[0] * mx * my
    return max(2.0, NormalDist().inv_cdf(1.0 - 0.5 / cells))


def shown_groups(score_map: ScoreMap, method: str | None = None) -> list[str]:
    """The groups worth drawing: every domain label, and ``"other"`` only when its noisy
    size is not below :data:`OTHER_SIGMAS` times its noise sigma, the notices' threshold
    (post-processing of a released count: an "other" of pure noise is not drawn).
    """
    from ..privacy.mechanisms.score_map import OTHER_GROUP

    sizes = score_map.released_group_sizes(method)
    floor = OTHER_SIGMAS * group_size_sigma(score_map, method)
    return [g for g in score_map.groups if g != OTHER_GROUP or len(sizes) == 1 or sizes[g] >= floor]


def group_colours(score_map: ScoreMap, colours: Any = None) -> dict[str, str]:
    """Each group's colour from its place in the PUBLIC domain ("other": grey).

    ``colours`` (a palette, e.g. matplotlib's colour cycle) replaces the default ones.
    """
    from ..privacy.mechanisms.score_map import OTHER_GROUP

    palette = list(colours) if colours else list(GROUP_COLOURS)
    return {
        g: OTHER_COLOUR if g == OTHER_GROUP else _hex(palette[k % len(palette)])
        for k, g in enumerate(score_map.groups)
    }


def _axes(ax: Any) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    figure, axes = plt.subplots(figsize=(5.0, 4.5))
    return figure, axes


def _labels(score_map: ScoreMap) -> tuple[str, str]:
    a, b = score_map.axes
    return f"PC{a + 1}", f"PC{b + 1}"


def _frame_extent(score_map: ScoreMap) -> list[float]:
    (x0, x1), (y0, y1) = score_map.frame.xlim, score_map.frame.ylim
    return [x0, x1, y0, y1]


def _heat(ax: Any, image: np.ndarray, score_map: ScoreMap, vmax: float | None) -> Any:
    x_edges, y_edges = score_map.frame.edges(score_map.bins)
    from matplotlib.colors import PowerNorm

    # A square-root colour scale: a heavy-tailed bulk is a few dark cells on a linear one,
    # its shoulders invisible (the counts are unchanged; only their shade).
    top = float(image.max()) if vmax is None else float(vmax)
    norm = PowerNorm(0.5, vmin=0.0, vmax=top if top > 0 else 1.0)
    mesh = ax.pcolormesh(x_edges, y_edges, image, cmap=_CMAP, norm=norm)
    ax.set_xlim(x_edges[0], x_edges[-1])
    ax.set_ylim(y_edges[0], y_edges[-1])
    xlabel, ylabel = _labels(score_map)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return mesh


def _out_of_frame_note(ax: Any, outside: float, total: float) -> None:
    share = outside / total if total > 0 else 0.0
    ax.text(
        0.01,
        0.99,
        f"outside the frame: {outside:.0f} (noisy, {share:.1%})",
        transform=ax.transAxes,
        va="top",
        ha="left",
        fontsize=8,
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8},
    )


def _hex(colour: Any) -> str:
    import matplotlib as mpl

    return str(mpl.colors.to_hex(colour))


def _first_colour() -> str:
    """The first colour of matplotlib's current cycle (a palette recolours it)."""
    import matplotlib as mpl

    colours = mpl.rcParams["axes.prop_cycle"].by_key().get("color") or ["tab:orange"]
    return str(mpl.colors.to_hex(colours[0]))


def _reference(ax: Any, reference: Any) -> None:
    y = np.asarray(reference, dtype=np.float64)
    if y.ndim != 2 or y.shape[1] != 2:
        raise ValueError(f"reference: must have shape (n, 2), got {y.shape}")
    ax.scatter(y[:, 0], y[:, 1], s=3, c="black", alpha=0.4, label=f"raw scores ({NOT_PRIVATE})")
    ax.legend(loc="lower right", fontsize=8)


def plot_score_map(
    score_map: ScoreMap,
    *,
    method: str | None = None,
    floor_sigmas: float = 0.0,
    synthetic: bool = False,
    reference: Any = None,
    ax: Any = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """The released histogram (all groups pooled) as a heat map on the private frame.

    Parameters
    ----------
    score_map : ScoreMap
    method : str, optional
        ``"additive"`` or ``"sparse"`` (the first released by default).
    floor_sigmas : float, default 0
        Show cells whose noisy count is below this many noise sigmas as empty
        (post-processing).
    synthetic : bool, default False
        Draw synthetic points (post-processing) on top.
    reference : array of shape (n, 2), optional
        Raw scores to show for comparison; they are NOT private and labelled so.
    ax : matplotlib Axes, optional
    rng : numpy.random.Generator, optional
        For the synthetic points (post-processing).

    Returns
    -------
    matplotlib.figure.Figure
    """
    figure, ax = _axes(ax)
    hist = score_map.histogram(method)
    mesh = _heat(ax, hist.grid(floor=hist.floor(floor_sigmas)), score_map, None)
    figure.colorbar(mesh, ax=ax, label="noisy count (square-root scale)")
    total = sum(score_map.group_sizes(method).values())
    _out_of_frame_note(ax, float(hist.out_of_frame().sum()), float(total))
    if synthetic:
        points = score_map.synthetic(method=method, bandwidth_scale=0.0, rng=rng).values()
        pooled = np.concatenate([p for p in points if len(p)] or [np.zeros((0, 2))])
        colour = _first_colour()
        ax.scatter(pooled[:, 0], pooled[:, 1], s=2, c=colour, alpha=0.5)
    if reference is not None:
        _reference(ax, reference)
    ax.set_title(f"private score map ({hist.method})")
    return figure


def plot_group_panels(
    score_map: ScoreMap,
    *,
    method: str | None = None,
    floor_sigmas: float = 0.0,
    ncols: int = 3,
    reference: Any = None,
    reference_groups: Any = None,
) -> Any:
    """One heat map per group on the common frame and one colour scale.

    Each panel's title gives the group's noisy size (:meth:`~.ScoreMap.group_sizes`); its
    out-of-frame mass is written in it; ``floor_sigmas`` as for :func:`plot_score_map`.
    A non-private ``reference`` (raw scores, with ``reference_groups`` labels) is drawn
    only when passed, labelled NOT PRIVATE.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    hist = score_map.histogram(method)
    shown = shown_groups(score_map, method)
    n = len(shown)
    cols = max(1, min(int(ncols), n))
    rows = math.ceil(n / cols)
    # Constrained layout: a row's axis labels and the next row's titles do not overlap.
    figure, axes = plt.subplots(
        rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False, layout="constrained"
    )
    floor = hist.floor(floor_sigmas)
    index = {name: g for g, name in enumerate(score_map.groups)}
    vmax = max(float(hist.grid(index[name], floor).max()) for name in shown) or 1.0
    sizes = list(score_map.group_sizes(method).values())
    released = list(score_map.released_group_sizes(method).values())
    mesh = None
    for k, name in enumerate(shown):
        g = index[name]
        ax = axes[k // cols][k % cols]
        mesh = _heat(ax, hist.grid(g, floor), score_map, vmax)
        _out_of_frame_note(ax, float(hist.out_of_frame()[g]), float(sizes[g]))
        ax.set_title(f"{name} (noisy n = {noisy_size_text(released[g])})", fontsize=9)
        if reference is not None:
            labels = np.asarray(reference_groups, dtype=object)
            _reference(ax, np.asarray(reference)[labels == name])
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    if mesh is not None:
        figure.colorbar(mesh, ax=axes.ravel().tolist(), label="noisy count (square-root scale)")
    figure.suptitle(f"private score map by group ({hist.method})")
    return figure


def plot_synthetic(
    score_map: ScoreMap,
    *,
    method: str | None = None,
    size: int | None = None,
    ax: Any = None,
    rng: np.random.Generator | None = None,
    by_group: bool = True,
    colours: Any = None,
    bandwidth_scale: float = 0.0,
    floor_sigmas: float | None = None,
) -> Any:
    """Synthetic points from the released histograms, coloured by group (post-processing).

    Each point is uniform in a cell drawn from the released counts (no Gaussian jitter by
    default: jitter of a wide cell blurs the grid into a round cloud).  The groups of
    :func:`shown_groups` are drawn in one shuffled layer with :func:`group_colours`, the
    legend in the domain's order; ``by_group=False`` draws them in one colour (the first
    of ``colours`` or of matplotlib's cycle).  Cells under ``floor_sigmas`` noise sigmas
    are left empty (default :func:`noise_floor_sigmas`: no clumps of pure noise).

    Returns
    -------
    matplotlib.figure.Figure
    """
    figure, ax = _axes(ax)
    generator = rng if rng is not None else np.random.default_rng()
    floor = noise_floor_sigmas(score_map, method) if floor_sigmas is None else floor_sigmas
    drawn = score_map.synthetic(
        size, method=method, bandwidth_scale=bandwidth_scale, floor_sigmas=floor, rng=generator
    )
    shown = shown_groups(score_map, method)
    palette = group_colours(score_map, colours)
    single = _hex(next(iter(colours))) if colours else _first_colour()
    points, colour_of = [], []
    for name in shown:
        p = drawn[name]
        points.append(p)
        colour_of += [palette[name] if by_group else single] * len(p)
    xy = np.concatenate(points) if points else np.zeros((0, 2))
    order = generator.permutation(len(xy))  # no group drawn last on top of the others
    ax.scatter(xy[order, 0], xy[order, 1], s=3, alpha=0.6, c=np.asarray(colour_of)[order])
    x0, x1, y0, y1 = _frame_extent(score_map)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    xlabel, ylabel = _labels(score_map)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if by_group and len(shown) > 1:
        from matplotlib.lines import Line2D

        handles = [
            Line2D(
                [],
                [],
                marker="o",
                linestyle="",
                color=palette[name],
                label=f"{name} ({len(drawn[name])})",
            )
            for name in shown
        ]
        # Beside the axes, never over the points: loc="best" would search thousands of
        # them (matplotlib's "Creating legend with loc='best' can be slow" warning).
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("synthetic points from the private score map")
    return figure
