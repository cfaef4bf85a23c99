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
from ..kernel.scree_stats import block_sums
from .lane_task import Segment
from .lanes import plan_segments, segment_bounds
from .scree_task import merge_partials, segment_histograms, segment_statistics

__all__ = [
    "MERGE_FAN_IN",
    "merge_partials",
    "merge_task_count",
    "scree_histogram_graph",
    "scree_segments",
    "scree_sums_graph",
]

#: Partial totals one merge task adds.
MERGE_FAN_IN = 8


def scree_segments(
    rows: tuple[int, ...],
    block_pairs: tuple[tuple[int, int], ...] | None,
    n_features: int,
    n_threads: int,
    reads: bool,
) -> list[Segment]:
    """The segments a scree pass over blocks of ``rows`` runs in (public: the blocks,
    their pairs, d, the thread count and whether the segments read their blocks); the
    plan of an analysis counts the same ones (:mod:`dask_dppca.analysis.plan`).
    """
    pairs = tuple((i, i) for i in range(len(rows))) if block_pairs is None else block_pairs
    # The fit's rule on these block pairs, one pair a group (the work: the block pairs'
    # record pairs, an upper bound on the scree design's).
    work = sum(rows[i] * (rows[i] - 1) // 2 if i == j else rows[i] * rows[j] for i, j in pairs)
    plan = DesignPlan(
        rows, pairs, n_pairs=max(work, 1), max_degree=1, n_features=n_features, tile_rows=1
    )
    return plan_segments(plan, segment_bounds(plan, n_threads, reads), reads)


def merge_task_count(n_partials: int) -> int:
    """The merge tasks ``_per_block`` adds above ``n_partials`` segment totals."""
    merges = 0
    while n_partials > MERGE_FAN_IN:
        n_partials = -(-n_partials // MERGE_FAN_IN)
        merges += n_partials
    return merges


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
    reader = chunk_reader(data)
    reads = reader is not None
    layer: dict[Any, tuple[Any, ...]] = {}
    layer_name = f"{name}-{token}"
    segments = scree_segments(rows, block_pairs, int(data.shape[1]), n_threads, reads)
    for number, segment in enumerate(segments):
        given = [] if reads else [(data.name, b, 0) for b in segment.blocks.tolist()]
        layer[f"{layer_name}-{number}"] = (
            segment_statistics,
            function,
            segment,
            reader,
            args,
            *given,
        )
    dependencies = [] if reads else [data]
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
        segment_histograms,
        (np.asarray(directions, dtype=np.float64), bool(trace)),
        "dppca-scree-hist",
        token or uuid.uuid4().hex,
        n_threads,
    )


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
