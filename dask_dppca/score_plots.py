"""Figures of a released score map (matplotlib): private only, unless told otherwise.

Every figure is drawn from a :class:`~dask_dppca.privacy.score_map.ScoreMap`, a public
release: re-plotting, re-styling and re-sampling synthetic points cost no privacy and
recompute nothing.  A non-private reference (the raw scores) appears only when the
caller passes one as ``reference=``, and is then labelled NOT PRIVATE.

* :func:`plot_score_map`: the noisy histogram as a heat map on the private frame, the
  out-of-frame mass written beside it; optionally synthetic points on top.
* :func:`plot_group_panels`: one panel per group on the common frame and colour scale.
* :func:`plot_synthetic`: synthetic points drawn from the released histograms, by group.

matplotlib is imported when a figure is drawn (the ``notebook`` extra).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .privacy.score_map import ScoreMap

__all__ = ["plot_group_panels", "plot_score_map", "plot_synthetic"]

NOT_PRIVATE = "NOT PRIVATE"
_CMAP = "Purples"


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
    mesh = ax.pcolormesh(x_edges, y_edges, image, cmap=_CMAP, vmin=0.0, vmax=vmax)
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
    figure.colorbar(mesh, ax=ax, label="noisy count")
    total = sum(score_map.group_sizes(method).values())
    _out_of_frame_note(ax, float(hist.out_of_frame().sum()), float(total))
    if synthetic:
        for points in score_map.synthetic(method=method, rng=rng).values():
            ax.scatter(points[:, 0], points[:, 1], s=2, c="tab:orange", alpha=0.5)
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
    n = hist.n_groups
    cols = max(1, min(int(ncols), n))
    rows = math.ceil(n / cols)
    # Constrained layout: a row's axis labels and the next row's titles do not overlap.
    figure, axes = plt.subplots(
        rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False, layout="constrained"
    )
    floor = hist.floor(floor_sigmas)
    vmax = max(float(hist.grid(g, floor).max()) for g in range(n)) or 1.0
    sizes = list(score_map.group_sizes(method).values())
    mesh = None
    for g, name in enumerate(score_map.groups):
        ax = axes[g // cols][g % cols]
        mesh = _heat(ax, hist.grid(g, floor), score_map, vmax)
        _out_of_frame_note(ax, float(hist.out_of_frame()[g]), float(sizes[g]))
        ax.set_title(f"{name} (noisy n = {sizes[g]:.0f})", fontsize=9)
        if reference is not None:
            labels = np.asarray(reference_groups, dtype=object)
            _reference(ax, np.asarray(reference)[labels == name])
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    if mesh is not None:
        figure.colorbar(mesh, ax=axes.ravel().tolist(), label="noisy count")
    figure.suptitle(f"private score map by group ({hist.method})")
    return figure


def plot_synthetic(
    score_map: ScoreMap,
    *,
    method: str | None = None,
    size: int | None = None,
    ax: Any = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """Synthetic points from the released histograms, coloured by group (post-processing).

    Returns
    -------
    matplotlib.figure.Figure
    """
    figure, ax = _axes(ax)
    for name, points in score_map.synthetic(size, method=method, rng=rng).items():
        ax.scatter(points[:, 0], points[:, 1], s=3, alpha=0.6, label=f"{name} ({len(points)})")
    x0, x1, y0, y1 = _frame_extent(score_map)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    xlabel, ylabel = _labels(score_map)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(score_map.groups) > 1:
        # Beside the axes, never over the points: loc="best" would search thousands of
        # them (matplotlib's "Creating legend with loc='best' can be slow" warning).
        ax.legend(fontsize=8, markerscale=3, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("synthetic points from the private score map")
    return figure
