"""What runs inside the graph's tasks: a segment's block pairs, and the segments' total.

No graph building here (:mod:`.lanes` builds), no privacy: these functions get public
plan data (:class:`Segment`) and blocks, and return a segment's exact sum
(:class:`LaneState`, sealed between workers: :mod:`.sealed`).  :func:`lanes_total` adds
the segments' sums and rounds once; the compute layer runs it inside the release task on
the trusted worker, so the exact total is never a Dask key.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernel import ExactSum, SpatialSign, block_pair_sum, pairwise_sum
from ..kernel.fp_state import own_errstate
from .sealed import seal

__all__ = [
    "LaneState",
    "Segment",
    "group_sum",
    "lanes_total",
    "merge_lanes",
    "segment_groups",
    "segment_task",
]


@dataclass(frozen=True, eq=False)
class Segment:
    """What one segment task computes; public, from the plan.

    Numpy arrays, not tuples: a terabyte's graph holds thousands of segments of hundreds
    of block pairs each, and arrays keep it to megabytes in the client and the scheduler.

    Attributes
    ----------
    spatial_sign, tile_rows, n_features
        The kernel's transform, tiles and d.
    pairs : ndarray of int32, shape (P, 2)
        The block pairs it runs, in the plan's order.
    group_ends : ndarray of int32
        Where each of the plan's tasks (a group of block pairs) ends in ``pairs``: each
        group's sums are added in a balanced tree and then exactly, as the plan's
        rounding bound assumes.
    blocks : ndarray of int32
        The blocks it uses, in order of first use.
    rows : ndarray of int32
        The declared rows of each of ``blocks``.
    starts : ndarray of int64 or None
        The first row of each of ``blocks`` in the store, read inside the task; None when
        the blocks are the task's Dask inputs, in the order of ``blocks``.
    last_use : ndarray of int32
        The last group that uses each of ``blocks`` (dropped after it, so a segment holds
        only the blocks its next groups still need).
    """

    spatial_sign: SpatialSign
    tile_rows: int
    n_features: int
    pairs: np.ndarray
    group_ends: np.ndarray
    blocks: np.ndarray
    rows: np.ndarray
    starts: np.ndarray | None
    last_use: np.ndarray


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
    a balanced tree, then exactly to the segment's total.  (BLAS runs on one thread: the
    compute layer pins it on the workers.)

    Always the plan's tiles: the release's rounding slack (``DesignPlan.rounding_error``)
    is computed for exactly these.
    """
    d = segment.n_features
    upper = np.triu_indices(d)
    total = ExactSum((d * (d + 1) // 2,))
    for group, blocks in segment_groups(segment, reader, given):
        total = total.plus(group_sum(segment, group, blocks)[upper])
    return LaneState(total)


def group_sum(segment: Segment, group: list[list[int]], blocks: dict[int, Any]) -> np.ndarray:
    """One group's block-pair sums added in the kernel's balanced tree (what the plan's
    rounding bound assumes), the plan's tiles throughout.  The sum is symmetric bit for
    bit (the kernel returns (S + S^T) / 2): callers add its upper triangle only.
    """
    sums = [
        block_pair_sum(
            blocks[i],
            None if i == j else blocks[j],
            segment.spatial_sign,
            tile_rows=segment.tile_rows,
        )
        for i, j in group
    ]
    return pairwise_sum(sums)


def segment_groups(
    segment: Segment, reader: Any, given: tuple[Any, ...], shared: Any = None
) -> Iterator[tuple[list[list[int]], dict[int, np.ndarray]]]:
    """Each group of ``segment`` in order, with the blocks it uses: ``(pairs, blocks)``.

    A block is read from ``reader`` (or taken from ``given``, in the order of
    ``segment.blocks``, or from ``shared``, a worker task's
    :class:`~.worker_tasks.SharedBlocks`) at its first use and dropped after its last, so
    a segment holds only the blocks its next groups still need.  n, ``|P|`` and the
    sensitivity come from the declared shape, while the kernel sums whatever rows the
    blocks really hold, so a block that holds other rows than declared fails the task,
    and with it any release that depends on it.
    """
    position = {int(block): k for k, block in enumerate(segment.blocks)}
    held: dict[int, np.ndarray] = {}
    start = 0
    for number, stop in enumerate(segment.group_ends.tolist()):
        group = segment.pairs[start:stop].tolist()
        start = stop
        for index in {block for pair in group for block in pair} - held.keys():
            k = position[index]
            rows = int(segment.rows[k])
            if segment.starts is None:
                block = given[k]
            elif shared is not None:
                block = shared.get(index, int(segment.starts[k]), rows)
            else:
                first = int(segment.starts[k])
                block = reader[first : first + rows, :]
            _check_block(block, index, rows, segment.n_features)
            held[index] = block
        yield group, held
        for index in [b for b in held if segment.last_use[position[b]] == number]:
            del held[index]
            if shared is not None:
                shared.done(index)


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
