"""What runs inside the graph's tasks: a lane task's block pairs, and the lanes' total.

No graph building here (:mod:`.lanes` builds), no privacy: these functions get public
plan data (:class:`Step`) and blocks, and return a lane's running exact sum
(:class:`LaneState`, sealed between workers: :mod:`.sealed`).  :func:`lanes_total` adds
the lanes' sums and rounds once; the compute layer runs it inside the release task on
the trusted worker, so the exact total is never a Dask key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernel import ExactSum, SpatialSign, block_pair_sum, pairwise_sum
from ..kernel.fp_state import own_errstate
from .sealed import seal

__all__ = ["CARRIED", "GIVEN", "LaneState", "Step", "lane_task", "lanes_total", "merge_lanes"]

#: How a lane task gets a block: as its next Dask input, or from the lane's state.
GIVEN, CARRIED = "given", "carried"


@dataclass(frozen=True)
class Step:
    """What one lane task computes; public, from the plan.

    ``declared``: ``(block, rows)`` of each block the task uses, from the plan;
    ``pairs``: its block pairs; ``sources``: for each block, a slice of rows read here
    from the Zarr reader, ``"given"`` (the task's next input) or ``"carried"`` (in the
    lane's state); ``keep``: the blocks the lane's next tasks still need.
    """

    spatial_sign: SpatialSign
    tile_rows: int
    n_features: int
    declared: tuple
    pairs: tuple
    sources: tuple
    keep: tuple


class LaneState:
    """A lane's running exact sum and the blocks it carries to its next task."""

    def __init__(self, total: ExactSum, blocks: dict[int, np.ndarray]) -> None:
        self.total = total
        self.blocks = blocks

    def __reduce__(self):
        return seal(LaneState, (self.total, self.blocks))


@own_errstate
def lane_task(step: Step, reader, state: LaneState | None, *given) -> LaneState:
    """One lane task: the kernel over some block pairs, their sums added in a balanced
    tree, then exactly to the lane's total.  (BLAS runs on one thread: the compute layer
    pins it on the workers.)

    Always the plan's tiles: the release's rounding slack (``DesignPlan.rounding_error``)
    is computed for exactly these.  n, ``|P|`` and the sensitivity come from the declared
    shape, while the kernel sums whatever rows the blocks really hold, so a block that
    holds other rows than declared fails the task, and with it the sum and any release
    that depends on it.
    """
    blocks, inputs = {}, iter(given)
    for (index, rows), source in zip(step.declared, step.sources):
        if source == CARRIED:
            assert state is not None  # a carried block comes from the lane's previous task
            blocks[index] = state.blocks[index]  # checked when it reached the lane
            continue
        block = reader[source, :] if isinstance(source, slice) else next(inputs)
        _check_block(block, index, rows, step.n_features)
        blocks[index] = block
    sums = [
        block_pair_sum(
            blocks[i], None if i == j else blocks[j], step.spatial_sign, tile_rows=step.tile_rows
        )
        for i, j in step.pairs
    ]
    # The sums are symmetric bit for bit (the kernel returns (S + S^T) / 2): the lane adds
    # their upper triangles only.
    d = step.n_features
    total = ExactSum((d * (d + 1) // 2,)) if state is None else state.total
    carried = {**(state.blocks if state is not None else {}), **blocks}
    return LaneState(
        total.plus(pairwise_sum(sums)[np.triu_indices(d)]),
        {block: carried[block] for block in step.keep},
    )


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
    """The lanes' sums added exactly (any grouping gives the same bits)."""
    return LaneState(ExactSum.merge(*(state.total for state in states)), {})


@own_errstate
def lanes_total(*states: LaneState) -> np.ndarray:
    """The exact total of the lanes, correctly rounded to float64 (one rounding), as the
    symmetric d x d matrix.
    """
    upper = merge_lanes(*states).total.to_float()
    d = int((math.isqrt(8 * upper.size + 1) - 1) // 2)
    total = np.zeros((d, d))
    total[np.triu_indices(d)] = upper
    total.T[np.triu_indices(d)] = upper
    return total
