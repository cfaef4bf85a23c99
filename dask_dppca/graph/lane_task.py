"""What runs inside the graph's tasks: a segment's block pairs, and the segments' total.

No graph building here (:mod:`.lanes` builds), no privacy: these functions get public
plan data (:class:`Segment`) and blocks, and return a segment's exact sum
(:class:`LaneState`, sealed between workers: :mod:`.sealed`).  :func:`lanes_total` adds
the segments' sums and rounds once; the compute layer runs it inside the release task on
the trusted worker, so the exact total is never a Dask key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernel import ExactSum, SpatialSign, block_pair_sum, pairwise_sum
from ..kernel.fp_state import own_errstate
from .sealed import seal

__all__ = ["LaneState", "Segment", "lanes_total", "merge_lanes", "segment_task"]


@dataclass(frozen=True)
class Segment:
    """What one segment task computes; public, from the plan.

    ``declared``: ``(block, rows)`` of each block the segment uses, in order of first
    use; ``groups``: the plan's tasks it runs, in order (each a tuple of block pairs,
    summed in a balanced tree and then added exactly, as the plan's rounding bound
    assumes); ``reads``: for each declared block, the slice of rows the task reads from
    the store's reader, or None when the block is the task's next Dask input;
    ``last_use``: for each declared block, the last group that uses it (the block is
    dropped after it, so a segment holds only the blocks its next groups still need).
    """

    spatial_sign: SpatialSign
    tile_rows: int
    n_features: int
    declared: tuple[tuple[int, int], ...]
    groups: tuple[tuple[tuple[int, int], ...], ...]
    reads: tuple[slice | None, ...]
    last_use: tuple[int, ...]


class LaneState:
    """A segment's exact sum (the upper triangle of its block pairs' ``g g^T`` sums).

    ``blocks`` is kept empty by the segment tasks: nothing but the sum leaves a task.
    """

    def __init__(self, total: ExactSum, blocks: dict[int, np.ndarray] | None = None) -> None:
        self.total = total
        self.blocks = blocks or {}

    def __reduce__(self):
        return seal(LaneState, (self.total, self.blocks))


@own_errstate
def segment_task(segment: Segment, reader: Any, *given: Any) -> LaneState:
    """One segment task: its groups of block pairs in order, each group's sums added in
    a balanced tree, then exactly to the segment's total.  A block is read (or taken
    from the next Dask input) at its first use and dropped after its last.  (BLAS runs
    on one thread: the compute layer pins it on the workers.)

    Always the plan's tiles: the release's rounding slack (``DesignPlan.rounding_error``)
    is computed for exactly these.  n, ``|P|`` and the sensitivity come from the declared
    shape, while the kernel sums whatever rows the blocks really hold, so a block that
    holds other rows than declared fails the task, and with it the sum and any release
    that depends on it.
    """
    inputs = iter(given)
    position = {block: k for k, (block, _) in enumerate(segment.declared)}
    blocks: dict[int, np.ndarray] = {}
    d = segment.n_features
    total = ExactSum((d * (d + 1) // 2,))
    for number, group in enumerate(segment.groups):
        for pair in group:
            for index in pair:
                if index in blocks:
                    continue
                k = position[index]
                rows = segment.reads[k]
                block = next(inputs) if rows is None else reader[rows, :]
                _check_block(block, index, segment.declared[k][1], d)
                blocks[index] = block
        sums = [
            block_pair_sum(
                blocks[i],
                None if i == j else blocks[j],
                segment.spatial_sign,
                tile_rows=segment.tile_rows,
            )
            for i, j in group
        ]
        # The sums are symmetric bit for bit (the kernel returns (S + S^T) / 2): the
        # segment adds their upper triangles only.
        total = total.plus(pairwise_sum(sums)[np.triu_indices(d)])
        for index in [b for b in blocks if segment.last_use[position[b]] == number]:
            del blocks[index]
    return LaneState(total)


def _check_block(block, index: int, rows: int, n_features: int) -> None:
    shape = getattr(block, "shape", None)
    if shape != (rows, n_features):
        raise ValueError(
            f"X: block {index} holds an array of shape {shape}, but the input declared "
            f"({rows}, {n_features}); n, the pair count and the sensitivity come from the "
            "declared shape, so nothing is computed or released from it"
        )


@own_errstate
def merge_lanes(*states: LaneState) -> LaneState:
    """The segments' sums added exactly (any grouping gives the same bits)."""
    return LaneState(ExactSum.merge(*(state.total for state in states)))


@own_errstate
def lanes_total(*states: LaneState) -> np.ndarray:
    """The exact total of the segments, correctly rounded to float64 (one rounding), as
    the symmetric d x d matrix.
    """
    upper = merge_lanes(*states).total.to_float()
    d = int((math.isqrt(8 * upper.size + 1) - 1) // 2)
    total = np.zeros((d, d))
    total[np.triu_indices(d)] = upper
    total.T[np.triu_indices(d)] = upper
    return total
