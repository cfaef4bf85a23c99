"""The score map's exact statistics on one block of scores (numpy only; docs/privacy.md).

Every function maps a block of rows to integer counts that add up across blocks, so the
graph layer computes them in one pass and only the release task ever holds the total:

* :func:`count_at_most`: ``#{y <= t}`` for each public candidate ``t`` (the private
  quantile's statistic), NaN counted as +inf; :func:`at_most_positions` the same counts
  held sparse (each value's first candidate at or above it, counted), which add up by
  :func:`merge_positions` and give the counts back by :func:`counts_from_positions`;
* :func:`deviations`: ``|y - c|`` per axis from a released centre (the radius' values);
* :func:`bin_index` / :func:`histogram_counts`: the grid cell of every score, the out-of-frame
  cell for the rest, counted per group;
* :func:`group_codes`: labels to codes against a PUBLIC domain, the rest to "other".

A record changes one value per statistic, which is what the sensitivity arguments use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "at_most_positions",
    "bin_index",
    "count_at_most",
    "counts_from_positions",
    "deviations",
    "group_codes",
    "histogram_counts",
    "merge_positions",
]


def _as_2d(values: ArrayLike) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"values: must be 1-D or 2-D, got shape {v.shape}")
    return v


def count_at_most(values: ArrayLike, candidates: ArrayLike) -> NDArray[np.int64]:
    """``counts[k, j] = #{i : values[i, k] <= candidates[j]}``, a NaN counted as +inf.

    Parameters
    ----------
    values : ndarray, shape (n,) or (n, k)
    candidates : ndarray, shape (G,)
        Increasing.

    Returns
    -------
    ndarray of int64, shape (k, G)
    """
    v = _as_2d(values)
    grid = np.asarray(candidates, dtype=np.float64)
    out = np.empty((v.shape[1], grid.size), dtype=np.int64)
    for k in range(v.shape[1]):
        column = np.where(np.isnan(v[:, k]), np.inf, v[:, k])
        out[k] = np.searchsorted(np.sort(column), grid, side="right")
    return out


def at_most_positions(
    values: ArrayLike, candidates: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """:func:`count_at_most` held sparse: ``(keys, weights)``.

    A value ``v`` of column ``k`` is at or below candidate ``t_j`` exactly for the ``j``
    from ``p = #{j : t_j < v}`` on (the candidates increase), so the counts of a column
    are the running sum of how many of its values have each ``p``.  The keys are the
    distinct ``k G + p`` (sorted; ``G`` candidates), the weights how many values have
    each: at most the rows times the columns, whatever ``G`` (the private quantile's grid
    has 130 948).  NaN counts as +inf; a value above every candidate counts at none.

    Parameters
    ----------
    values : ndarray, shape (n,) or (n, k)
    candidates : ndarray, shape (G,)
        Increasing.

    Returns
    -------
    (ndarray of int64, ndarray of int64)
        The keys and their weights, of one length.
    """
    v = _as_2d(values)
    grid = np.asarray(candidates, dtype=np.float64)
    keys, weights = [], []
    for k in range(v.shape[1]):
        column = np.sort(np.where(np.isnan(v[:, k]), np.inf, v[:, k]))
        first = np.searchsorted(grid, column, side="left").astype(np.int64)
        first = first[first < grid.size]  # increasing: its runs are the distinct keys
        if first.size == 0:  # no rows, or every value above the candidates
            continue
        starts = np.flatnonzero(np.concatenate([[True], first[1:] != first[:-1]]))
        keys.append(first[starts] + k * grid.size)
        weights.append(np.diff(np.append(starts, first.size)))
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(keys), np.concatenate(weights).astype(np.int64)


def merge_positions(
    keys: NDArray[np.int64], weights: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Keys (any order, repeated) and weights as :func:`at_most_positions` holds them:
    distinct sorted keys, each with the sum of its weights (integers: exact).
    """
    order = np.argsort(keys, kind="stable")
    ordered, weighed = keys[order], weights[order]
    if ordered.size == 0:
        return ordered, weighed
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    return ordered[starts], np.add.reduceat(weighed, starts)


def counts_from_positions(
    keys: NDArray[np.int64], weights: NDArray[np.int64], n_columns: int, n_candidates: int
) -> NDArray[np.int64]:
    """The counts :func:`count_at_most` gives, shape ``(n_columns, n_candidates)``, from
    :func:`at_most_positions`' keys and weights (added up over blocks).
    """
    at = np.zeros(n_columns * n_candidates, dtype=np.int64)
    at[keys] = weights
    counts: NDArray[np.int64] = np.cumsum(at.reshape(n_columns, n_candidates), axis=1)
    return counts


def deviations(values: ArrayLike, centre: ArrayLike) -> NDArray[np.float64]:
    """``|values[:, k] - centre[k]|`` (inf on overflow, NaN for a NaN score).

    Parameters
    ----------
    values : ndarray, shape (n, k)
    centre : ndarray, shape (k,)
        Finite (a released centre).

    Returns
    -------
    ndarray, shape (n, k)
    """
    v = _as_2d(values)
    c = np.asarray(centre, dtype=np.float64).reshape(1, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.abs(v - c)


def _cell(values: NDArray[np.float64], edges: NDArray[np.float64], clamp: bool) -> Any:
    """Index of the right-closed interval ``(e_{j-1}, e_j]`` (the lowest edge included);
    -1 outside (or the edge cell when ``clamp``), -1 for NaN either way.
    """
    m = edges.size - 1
    j = np.searchsorted(edges, values, side="left") - 1
    j = np.where(values == edges[0], 0, j)
    outside = (values < edges[0]) | (values > edges[-1])
    if clamp:
        j = np.clip(j, 0, m - 1)
    else:
        j = np.where(outside, -1, j)
    return np.where(np.isnan(values), -1, j)


def bin_index(
    scores: ArrayLike, x_edges: ArrayLike, y_edges: ArrayLike, *, clamp: bool = False
) -> NDArray[np.int64]:
    """The cell of each score: ``j_y m_x + j_x`` (x fastest), ``m_x m_y`` outside the frame.

    Bins are right-closed, ``(e_{j-1}, e_j]``, the lowest edge included, as in the R package
    ``dppca``.  A score outside the frame, or with a NaN coordinate, goes to the
    out-of-frame cell ``m_x m_y``; with ``clamp=True`` a finite or infinite score outside
    the frame goes to the nearest edge cell instead (the R package's treatment), a NaN
    still to the out-of-frame cell.

    Parameters
    ----------
    scores : ndarray, shape (n, 2)
    x_edges, y_edges : ndarray, shapes (m_x + 1,), (m_y + 1,)
        Increasing, finite.
    clamp : bool, default False

    Returns
    -------
    ndarray of int64, shape (n,)
        In ``[0, m_x m_y]``.
    """
    s = _as_2d(scores)
    if s.shape[1] != 2:
        raise ValueError(f"scores: must have 2 columns, got shape {s.shape}")
    ex = np.asarray(x_edges, dtype=np.float64)
    ey = np.asarray(y_edges, dtype=np.float64)
    mx, my = ex.size - 1, ey.size - 1
    jx, jy = _cell(s[:, 0], ex, clamp), _cell(s[:, 1], ey, clamp)
    out = (jx < 0) | (jy < 0)
    return np.where(out, mx * my, jy * mx + jx).astype(np.int64)


def histogram_counts(
    scores: ArrayLike,
    x_edges: ArrayLike,
    y_edges: ArrayLike,
    codes: ArrayLike | None = None,
    n_groups: int = 1,
    *,
    clamp: bool = False,
) -> NDArray[np.int64]:
    """Counts per group and cell: ``counts[g, cell]``, the last cell out of the frame.

    Parameters
    ----------
    scores : ndarray, shape (n, 2)
    x_edges, y_edges : ndarray
        As :func:`bin_index`.
    codes : ndarray of int, shape (n,), optional
        Group codes in ``[0, n_groups)`` (:func:`group_codes`); all 0 when omitted.
    n_groups : int, default 1
    clamp : bool, default False
        As :func:`bin_index`.

    Returns
    -------
    ndarray of int64, shape (n_groups, m_x m_y + 1)
    """
    cells = bin_index(scores, x_edges, y_edges, clamp=clamp)
    n_cells = (np.size(x_edges) - 1) * (np.size(y_edges) - 1) + 1
    g = np.zeros(cells.size, dtype=np.int64) if codes is None else np.asarray(codes, np.int64)
    if g.shape != cells.shape:
        raise ValueError(f"codes: expected shape {cells.shape}, got {g.shape}")
    flat = np.bincount(g * n_cells + cells, minlength=n_groups * n_cells)
    return flat.reshape(n_groups, n_cells).astype(np.int64)


def group_codes(labels: ArrayLike | Sequence[Any], domain: Sequence[Any]) -> NDArray[np.int64]:
    """Each label's position in the PUBLIC ``domain``; ``len(domain)`` ("other") for any
    label outside it, missing ones included (a bounded treatment, never an error).

    Parameters
    ----------
    labels : array-like, shape (n,)
    domain : sequence
        Distinct, hashable labels.

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    lookup = {label: code for code, label in enumerate(domain)}
    other = len(domain)
    values = np.asarray(labels, dtype=object).ravel()

    def code(label: Any) -> int:
        try:
            return lookup.get(label, other)
        except TypeError:  # an unhashable label is outside any domain
            return other

    return np.fromiter((code(v) for v in values), dtype=np.int64, count=values.size)
