"""The Dask graph of the scree statistics: a few segment tasks a thread, partial totals merged.

The scree design's pairs lie inside K_hat's block pairs (:mod:`dask_dppca.kernel.scree_stats`),
so its block pairs are cut into segments by the fit's own rule
(:func:`dask_dppca.graph.lanes.segment_bounds`); a segment task reads its blocks (a Zarr
input) or takes them as Dask inputs, computes each block pair's statistics and adds them
exactly; the partial totals are merged ``MERGE_FAN_IN`` at a time down to at most that
many, which the release task adds (exactly: integer counts, or
:class:`~dask_dppca.kernel.exact_sum.ExactSum`) on the trusted worker.  Exact addition makes
the total the same whatever the segments.  The exact total is never a Dask key.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from ..design import DesignPlan
from ..io import chunk_reader
from ..kernel import ExactSum
from ..kernel.scree_stats import block_histograms, block_sums
from .lanes import segment_bounds

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


@dataclasses.dataclass(frozen=True)
class _Run:
    """A segment's block pairs and where its blocks come from (public, from the plan)."""

    pairs: tuple[tuple[int, int], ...]
    rows: dict[int, int]
    starts: dict[int, int] | None  # None: the blocks are Dask inputs, in ``order``
    order: tuple[int, ...]
    n_features: int


def _per_block(
    data: da.Array,
    block_pairs: tuple[tuple[int, int], ...] | None,
    function: Callable[..., Any],
    args: tuple,
    name: str,
    token: str,
    n_threads: int,
) -> list[Delayed]:
    if len(data.chunks[1]) != 1:
        data = data.rechunk({1: -1})
    rows = tuple(int(r) for r in data.chunks[0])
    d = int(data.shape[1])
    pairs = tuple((i, i) for i in range(len(rows))) if block_pairs is None else block_pairs
    reader = chunk_reader(data)
    # The fit's rule on these block pairs, one pair a group (the work: the block pairs'
    # record pairs, an upper bound on the scree design's).
    work = sum(rows[i] * (rows[i] - 1) // 2 if i == j else rows[i] * rows[j] for i, j in pairs)
    plan = DesignPlan(rows, pairs, n_pairs=max(work, 1), max_degree=1, n_features=d, tile_rows=1)
    starts = np.cumsum((0,) + rows)
    layer: dict[Any, tuple[Any, ...]] = {}
    layer_name = f"{name}-{token}"
    for number, (first, stop) in enumerate(segment_bounds(plan, n_threads, reader is not None)):
        mine = pairs[first:stop]
        order = tuple(dict.fromkeys(b for pair in mine for b in pair))
        run = _Run(
            mine,
            {b: rows[b] for b in order},
            None if reader is None else {b: int(starts[b]) for b in order},
            order,
            d,
        )
        given = [] if reader is not None else [(data.name, b, 0) for b in order]
        layer[f"{layer_name}-{number}"] = (_run, function, run, reader, args, *given)
    dependencies = [] if reader is not None else [data]
    graph = HighLevelGraph.from_collections(layer_name, layer, dependencies=dependencies)  # type: ignore[arg-type]
    partials = [Delayed(key, graph, layer=layer_name) for key in layer]
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


def _run(function: Callable[..., Any], run: _Run, reader: Any, args: tuple, *given: Any) -> Any:
    """One segment: each block pair's statistics, added exactly; a block read (or taken
    from its Dask input) at its first use and dropped after its last.
    """
    last = {b: k for k, pair in enumerate(run.pairs) for b in pair}
    inputs = dict(zip(run.order, given))
    held: dict[int, Any] = {}
    total = None
    for k, (i, j) in enumerate(run.pairs):
        for b in (i, j):
            if b not in held:
                if run.starts is None:
                    held[b] = inputs[b]
                else:
                    held[b] = reader[run.starts[b] : run.starts[b] + run.rows[b], :]
        part = _checked(
            function,
            (i, j),
            (run.rows[i], run.rows[j]),
            run.n_features,
            held[i],
            None if i == j else held[j],
            *args,
        )
        total = part if total is None else merge_partials(total, part)
        for b in {i, j}:
            if last[b] == k:
                del held[b]
    return total


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
    n_threads: int = 1,
) -> list[Delayed]:
    """Lazy partial counts of the pairs' ``|dy|`` (and ``||dx||``) on the public grid,
    over the scree design of ``block_pairs`` (K_hat's; None: each block with itself),
    in the segments of ``n_threads`` threads (the total does not depend on them).

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
        n_threads,
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
    n_threads: int = 1,
) -> list[Delayed]:
    """Lazy partial exact sums of the clipped, winsorized and Huber terms (see
    :func:`~dask_dppca.kernel.scree_stats.block_sums`; ``clip`` None: no clipped sums),
    in the segments of ``n_threads`` threads (the total does not depend on them).
    """
    args = tuple(
        None if a is None else np.asarray(a, dtype=np.float64)
        for a in (directions, clip, upper, huber_centre, huber_tau)
    )
    return _per_block(
        data,
        block_pairs,
        block_sums,
        args,
        "dppca-scree-sums",
        token or uuid.uuid4().hex,
        n_threads,
    )
