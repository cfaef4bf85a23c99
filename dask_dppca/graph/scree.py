"""The Dask graph of the scree statistics: one task per block pair, partial totals merged.

The scree design's pairs lie inside K_hat's block pairs (:mod:`dask_dppca.kernel.scree_stats`),
so every block pair's statistics are computed by one task from its two blocks, lazily and
without reading data here; the partial totals are merged ``MERGE_FAN_IN`` at a time down
to at most that many, which the release task adds (exactly: integer counts, or
:class:`~dask_dppca.kernel.exact_sum.ExactSum`) on the trusted worker.  The exact total is never
a Dask key.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from ..kernel import ExactSum
from ..kernel.scree_stats import block_histograms, block_sums

__all__ = ["MERGE_FAN_IN", "merge_partials", "scree_histogram_graph", "scree_sums_graph"]

#: Partial totals one merge task adds.
MERGE_FAN_IN = 8


def merge_partials(*partials: Any) -> Any:
    """Exact sum of partial totals (int64 arrays, or ExactSums)."""
    if isinstance(partials[0], ExactSum):
        return ExactSum.merge(*partials)
    total = np.zeros_like(partials[0])
    for part in partials:
        total = total + part
    return total


def _per_block(
    data: da.Array,
    block_pairs: tuple[tuple[int, int], ...] | None,
    function: Callable[..., Any],
    args: tuple,
    name: str,
    token: str,
) -> list[Delayed]:
    if len(data.chunks[1]) != 1:
        data = data.rechunk({1: -1})
    blocks = data.to_delayed().ravel().tolist()
    rows = data.chunks[0]
    d = int(data.shape[1])
    pairs = tuple((i, i) for i in range(len(blocks))) if block_pairs is None else block_pairs
    partials = [
        dask.delayed(_checked, pure=False)(
            function,
            (i, j),
            (rows[i], rows[j]),
            d,
            blocks[i],
            None if i == j else blocks[j],
            *args,
            dask_key_name=f"{name}-{token}-{number}",
        )
        for number, (i, j) in enumerate(pairs)
    ]
    level = 0
    while len(partials) > MERGE_FAN_IN:
        partials = [
            dask.delayed(merge_partials, pure=False)(
                *partials[k : k + MERGE_FAN_IN],
                dask_key_name=f"{name}-merge-{token}-{level}-{k // MERGE_FAN_IN}",
            )
            for k in range(0, len(partials), MERGE_FAN_IN)
        ]
        level += 1
    return partials


def _checked(
    function: Callable[..., Any],
    indices: tuple[int, int],
    rows: tuple[int, int],
    d: int,
    block: Any,
    other: Any,
    *args: Any,
) -> Any:
    """``function(block, *args, other=..., indices=...)`` once the blocks hold the declared
    shapes (n, ``|P|`` and the sensitivity come from the declared shape; a block holding
    other rows releases nothing).
    """
    for index, count, array in zip(indices, rows, (block, other)):
        if array is None:
            continue
        shape = getattr(array, "shape", None)
        if shape != (count, d):
            raise ValueError(
                f"X: block {index} holds an array of shape {shape}, but the input declared "
                f"({count}, {d}); nothing is computed or released from it"
            )
    return function(block, *args, other=other, indices=indices)


def scree_histogram_graph(
    data: da.Array,
    directions: np.ndarray,
    block_pairs: tuple[tuple[int, int], ...] | None = None,
    *,
    trace: bool = True,
    token: str | None = None,
) -> list[Delayed]:
    """Lazy partial counts of the pairs' ``|dy|`` (and ``||dx||``) on the public grid,
    over the scree design of ``block_pairs`` (K_hat's; None: each block with itself).

    Returns
    -------
    list of Delayed
        At most ``MERGE_FAN_IN`` int64 arrays of shape (k [+ 1], 8193); their sum is the
        total.
    """
    return _per_block(
        data,
        block_pairs,
        _histograms,
        (np.asarray(directions, dtype=np.float64), bool(trace)),
        "dppca-scree-hist",
        token or uuid.uuid4().hex,
    )


def _histograms(block: np.ndarray, directions: np.ndarray, trace: bool, **pair: Any) -> np.ndarray:
    return block_histograms(block, directions, trace=trace, **pair)


def scree_sums_graph(
    data: da.Array,
    block_pairs: tuple[tuple[int, int], ...] | None,
    directions: np.ndarray,
    clip: np.ndarray | None,
    upper: np.ndarray | None = None,
    huber_centre: np.ndarray | None = None,
    huber_tau: np.ndarray | None = None,
    *,
    token: str | None = None,
) -> list[Delayed]:
    """Lazy partial exact sums of the clipped, winsorized and Huber terms (see
    :func:`~dask_dppca.kernel.scree_stats.block_sums`; ``clip`` None: no clipped sums).
    """
    args = tuple(
        None if a is None else np.asarray(a, dtype=np.float64)
        for a in (directions, clip, upper, huber_centre, huber_tau)
    )
    return _per_block(
        data, block_pairs, block_sums, args, "dppca-scree-sums", token or uuid.uuid4().hex
    )
