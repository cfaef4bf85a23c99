"""What runs inside the scree's segment tasks: each block pair's statistics, added
exactly.  No dask here: a worker running these tasks imports this module, the kernel and
:mod:`.lane_task`, not the graph builders (:mod:`dask_dppca.graph.scree`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernel import ExactSum
from ..kernel.scree_stats import block_histograms
from .lane_task import Segment, segment_groups

__all__ = ["merge_partials", "segment_histograms", "segment_statistics"]


def merge_partials(*partials: Any) -> Any:
    """Exact sum of partial totals (int64 arrays, or ExactSums)."""
    if isinstance(partials[0], ExactSum):
        return ExactSum.merge(*partials)
    total = np.zeros_like(partials[0])
    for part in partials:
        total = total + part
    return total


def segment_statistics(
    function: Callable[..., Any], segment: Segment, reader: Any, args: tuple, *given: Any
) -> Any:
    """One segment: each block pair's statistics (``function(block, *args, other=...,
    indices=...)``), added exactly; its blocks read and checked by
    :func:`~.lane_task.segment_groups`.
    """
    total = None
    for group, blocks in segment_groups(segment, reader, given):
        for i, j in group:
            part = function(blocks[i], *args, other=None if i == j else blocks[j], indices=(i, j))
            total = part if total is None else merge_partials(total, part)
    return total


def segment_histograms(
    block: np.ndarray, directions: np.ndarray, trace: bool, **pair: Any
) -> np.ndarray:
    """One block pair's scree histograms (:func:`.block_histograms`)."""
    return block_histograms(block, directions, trace=trace, **pair)
