"""The score map's exact statistics as Dask reductions: one pass over the score blocks each.

Each function builds, lazily, the sum over row blocks of a
:mod:`dask_dppca.kernel.score_stats` count (integers: any grouping gives the same total)
and returns one :class:`~dask.delayed.Delayed` whose value is an :class:`ExactCounts`.
Like a lane's running sum (:mod:`.sealed`), an :class:`ExactCounts` pickled in a worker
process of a cluster can be opened on workers only, so the compute layer can move it to
the release task on the trusted worker while the client never holds it
(:func:`dask_dppca.compute.trusted.release.release_statistic`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from ..io.labelled import optimized_frame
from ..kernel import score_stats
from .sealed import seal

__all__ = [
    "ExactCounts",
    "ExactPositions",
    "histogram_counts_graph",
    "label_codes",
    "project_scores",
    "quantile_counts_graph",
]

#: Partial counts one reduction task adds.
_FAN_IN = 8


class ExactCounts:
    """Exact integer counts on their way to the release task (sealed between workers).

    Parameters
    ----------
    counts : ndarray of int64
    """

    __slots__ = ("counts",)

    def __init__(self, counts: np.ndarray) -> None:
        self.counts = counts

    def __reduce__(self):
        return seal(ExactCounts, (self.counts,))

    def __repr__(self) -> str:
        return f"ExactCounts(shape={self.counts.shape})"


class ExactPositions:
    """Exact counts ``#{i : y_ik <= t_j}`` held sparse on their way to the release task
    (sealed between workers, as :class:`ExactCounts`).

    The distinct keys ``k G + p`` and how many values have each
    (:func:`~dask_dppca.kernel.score_stats.at_most_positions`): a counting task and a merge
    hold at most their rows times the columns (16 bytes each), not a count for every
    column and candidate (1 MiB a column on the private quantile's grid: 1 GiB a task at
    d = 1000).  :attr:`counts` makes the dense counts, in the release task only.

    Parameters
    ----------
    keys, weights : ndarray of int64
    shape : (int, int)
        ``(k, G)``: the columns and the candidates.
    """

    __slots__ = ("keys", "shape", "weights")

    def __init__(self, keys: np.ndarray, weights: np.ndarray, shape: tuple[int, int]) -> None:
        self.keys, self.weights, self.shape = keys, weights, (int(shape[0]), int(shape[1]))

    @property
    def counts(self) -> np.ndarray:
        """The dense counts, shape ``(k, G)`` (what the quantile mechanisms read)."""
        return score_stats.counts_from_positions(self.keys, self.weights, *self.shape)

    def __reduce__(self):
        return seal(ExactPositions, (self.keys, self.weights, self.shape))

    def __repr__(self) -> str:
        return f"ExactPositions(shape={self.shape}, keys={self.keys.size})"


def _add(*parts: ExactCounts) -> ExactCounts:
    total = parts[0].counts.copy()
    for part in parts[1:]:
        total += part.counts
    return ExactCounts(total)


def _add_positions(*parts: ExactPositions) -> ExactPositions:
    keys = np.concatenate([part.keys for part in parts])
    weights = np.concatenate([part.weights for part in parts])
    return ExactPositions(*score_stats.merge_positions(keys, weights), parts[0].shape)


def _reduce(blocks: list[Delayed], name: str, add: Any = _add) -> Delayed:
    level = 0
    while len(blocks) > 1:
        blocks = [
            dask.delayed(add, pure=True)(
                *blocks[k : k + _FAN_IN], dask_key_name=f"{name}-sum-{level}-{k // _FAN_IN}"
            )
            for k in range(0, len(blocks), _FAN_IN)
        ]
        level += 1
    if level == 0:  # one block: still an ExactCounts of its own key
        return dask.delayed(add, pure=True)(blocks[0], dask_key_name=f"{name}-sum-0-0")
    return blocks[0]


def _check_scores(scores: da.Array, width: int | None = 2) -> da.Array:
    """``scores`` with all its columns in one chunk; ``width`` columns (None: any)."""
    if scores.ndim != 2 or (width is not None and scores.shape[1] != width):
        shape = f"(n, {width})" if width is not None else "(n, k)"
        raise ValueError(f"scores: must be a dask array of shape {shape}, got {scores.shape}")
    if len(scores.chunks[1]) != 1:
        scores = scores.rechunk({1: -1})
    return scores


def project_scores(
    data: da.Array, components: np.ndarray, axes: Sequence[int] = (0, 1)
) -> da.Array:
    """The lazy scores ``X v_a, X v_b`` of the released ``components`` (rows), block by block.

    Parameters
    ----------
    data : dask.array.Array, shape (n, d)
    components : ndarray, shape (k, d)
        Released unit directions (public).
    axes : (int, int)
        The two components to plot (0-based).

    Returns
    -------
    dask.array.Array, shape (n, 2)
        Same row chunks as ``data``; a row with a non-finite value gives a NaN or infinite
        score (then counted outside the frame).
    """
    v = np.asarray(components, dtype=np.float64)[list(axes)].T  # (d, 2)
    if data.ndim != 2 or v.shape[0] != data.shape[1]:
        raise ValueError(f"components: expected width {data.shape[1]}, got {v.shape[0]}")
    if len(data.chunks[1]) != 1:
        data = data.rechunk({1: -1})

    def project(block: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(block, dtype=np.float64) @ v

    return da.map_blocks(project, data, chunks=(data.chunks[0], (2,)), dtype=np.float64)


def quantile_counts_graph(
    scores: da.Array, candidates: np.ndarray, centre: Sequence[float] | None = None
) -> Delayed:
    """``#{i : y_ik <= t_j}`` per column k and candidate j, or of ``|y_ik - centre_k|``.

    Parameters
    ----------
    scores : dask.array.Array, shape (n, k)
        Two score axes (the score map's frame), or the d features (the median).
    candidates : ndarray, shape (G,)
        A :class:`~dask_dppca.privacy.mechanisms.quantile.PrivateQuantile`'s public grid.
    centre : (float, float), optional
        A released centre of two axes: count the deviations from it instead (the radius).

    Returns
    -------
    dask.delayed.Delayed
        An :class:`ExactPositions` of shape (k, G).
    """
    scores = _check_scores(scores, width=None if centre is None else 2)
    grid = np.asarray(candidates, dtype=np.float64)
    c = None if centre is None else np.asarray(centre, dtype=np.float64)
    name = f"dppca-quantile-counts-{uuid.uuid4().hex}"

    def block_counts(block: np.ndarray) -> ExactPositions:
        values = block if c is None else score_stats.deviations(block, c)
        keys, weights = score_stats.at_most_positions(values, grid)
        return ExactPositions(keys, weights, (values.shape[1], grid.size))

    blocks = [
        dask.delayed(block_counts, pure=True)(b, dask_key_name=f"{name}-block-{i}")
        for i, b in enumerate(scores.to_delayed().ravel())
    ]
    return _reduce(blocks, name, _add_positions)


def histogram_counts_graph(
    scores: da.Array,
    x_edges: np.ndarray,
    y_edges: np.ndarray,
    codes: da.Array | None = None,
    n_groups: int = 1,
    *,
    clamp: bool = False,
) -> Delayed:
    """``counts[g, cell]`` over the frame's grid (last cell: out of the frame), per group.

    Parameters
    ----------
    scores : dask.array.Array, shape (n, 2)
    x_edges, y_edges : ndarray
        The released frame's edges (public).
    codes : dask.array.Array of int, shape (n,), optional
        Group codes (:func:`label_codes`), chunked like ``scores``' rows.
    n_groups : int, default 1
    clamp : bool, default False
        The R package's edge clamping instead of the out-of-frame cell.

    Returns
    -------
    dask.delayed.Delayed
        An :class:`ExactCounts` of shape ``(n_groups, m_x m_y + 1)``.
    """
    scores = _check_scores(scores)
    xe, ye = np.asarray(x_edges, np.float64), np.asarray(y_edges, np.float64)
    name = f"dppca-histogram-counts-{uuid.uuid4().hex}"
    score_blocks = list(scores.to_delayed().ravel())
    if codes is None:
        code_blocks: list[Any] = [None] * len(score_blocks)
    else:
        if codes.shape != (scores.shape[0],):
            raise ValueError(f"codes: expected shape ({scores.shape[0]},), got {codes.shape}")
        code_blocks = list(codes.rechunk((scores.chunks[0],)).to_delayed().ravel())

    def block_counts(block: np.ndarray, block_codes: np.ndarray | None) -> ExactCounts:
        return ExactCounts(
            score_stats.histogram_counts(block, xe, ye, block_codes, n_groups, clamp=clamp)
        )

    blocks = [
        dask.delayed(block_counts, pure=True)(b, g, dask_key_name=f"{name}-block-{i}")
        for i, (b, g) in enumerate(zip(score_blocks, code_blocks))
    ]
    return _reduce(blocks, name)


def label_codes(labels: Any, domain: Sequence[Any], row_chunks: tuple[int, ...]) -> da.Array:
    """Group codes of ``labels`` against the PUBLIC ``domain`` (outside it: ``len(domain)``,
    the "other" group), lazily, chunked as ``row_chunks``.

    Parameters
    ----------
    labels : array-like
        A numpy array or list, a pandas or dask Series (a categorical column too), an
        xarray DataArray (e.g. a coordinate), a dask array, or a Zarr array of labels
        (the array, or its path).
    domain : sequence
        The public labels.
    row_chunks : tuple of int
        The scores' row chunks.

    Returns
    -------
    dask.array.Array of int64, shape (n,)
    """
    values: Any = labels
    if isinstance(values, (str, os.PathLike)) or type(values).__module__.startswith("zarr"):
        values = da.from_zarr(values)  # a Zarr array of labels (a path or the array): lazy
    if hasattr(values, "variable") and hasattr(values, "dims"):  # xarray
        values = values.data
    if hasattr(values, "to_dask_array"):  # dask Series, in the partitions dask computes
        values = optimized_frame(values.astype(object)).to_dask_array(lengths=True)
    elif hasattr(values, "cat") or type(values).__name__ == "Series":  # pandas Series
        values = np.asarray(values.astype(object))
    if not isinstance(values, da.Array):
        values = da.from_array(np.asarray(values, dtype=object), chunks=-1)
    n = sum(row_chunks)
    if values.shape != (n,):
        raise ValueError(f"labels: expected {n} labels, got shape {values.shape}")
    domain = tuple(domain)
    codes = da.map_blocks(
        lambda block: score_stats.group_codes(block, domain), values, dtype=np.int64
    )
    return codes.rechunk((tuple(row_chunks),))
