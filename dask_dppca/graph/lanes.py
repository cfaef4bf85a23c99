"""Building the graph: lanes of block-pair tasks, each adding into one exact running sum.

:func:`kernel_sum_graph` builds, lazily and without reading data, the Dask graph of the
unnormalised sum ``sum_{(i,j) in P} g(t_ij) g(t_ij)^T`` over a design plan's pairs.  The
plan's tasks run in a few chains ("lanes", two per thread); each adds its block pairs
to its lane's exact sum (:mod:`dask_dppca.kernel.exact_sum`), so a worker holds one
running total per lane and the blocks its lanes still need, whatever n, and the result
is the same bits whatever the lane count, scheduler, worker count or completion order.
Every block is read once.  What runs inside the tasks is :mod:`.lane_task`.
"""

from __future__ import annotations

import collections
import uuid
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.typing import Key

from ..design import DesignPlan
from ..io import chunk_reader
from ..kernel import SpatialSign
from .lane_task import CARRIED, GIVEN, Step, lane_task, merge_lanes

__all__ = ["LANES_PER_SUM_TASK", "LANES_PER_THREAD", "kernel_sum_graph"]


#: Lanes per worker thread.  A lane is a chain of tasks that adds its block pairs into
#: one running exact sum, so a worker holds a lane's total (and the blocks the lane
#: still needs), never a partial sum per task; two per thread, so that a thread whose
#: lane ends early takes up another.
LANES_PER_THREAD = 2


def kernel_sum_graph(
    data: da.Array,
    plan: DesignPlan,
    spatial_sign: SpatialSign,
    n_threads: int,
    *,
    fit_id: str | None = None,
) -> list[Delayed]:
    """Lazy exact pair sum of ``g g^T`` over the design's pairs.

    The plan's tasks, in order, are cut into ``LANES_PER_THREAD * n_threads`` lanes of
    consecutive tasks.  Each lane task computes its block pairs and adds their sum to
    the lane's running :class:`~.ExactSum`; the lanes' sums are added
    exactly, ``LANES_PER_SUM_TASK`` at a time, down to at most that many, which
    :func:`~.lanes_total` adds and rounds once (the compute layer does
    that inside the release task).  Exact addition makes the result the same bits
    for any lane count, scheduler, worker count or completion order.  A block that one
    lane alone needs reaches it once (read inside its first task when it is a Zarr chunk)
    and is carried in the lane's state up to its last task there; a block several lanes
    need stays one Dask key, computed once.

    Parameters
    ----------
    data : dask.array.Array, shape (n, d)
        Rows chunked as ``plan.block_sizes``; all columns in one chunk.
    plan : DesignPlan
        The block pairs to sum.
    spatial_sign : SpatialSign
        The generalized spatial sign.
    n_threads : int
        Threads of the compute target (the lane count; the result does not depend on it).
    fit_id : str, optional
        Makes every key of the graph unique to this fit (a random one when omitted): a
        cluster that still holds another fit's keys never answers this one with them.

    Returns
    -------
    list of dask.delayed.Delayed
        At most ``LANES_PER_SUM_TASK`` lane sums (:class:`~.LaneState`);
        ``lanes_total(*their values)`` is the (d, d) sum.  Divide by ``plan.n_pairs``
        for K_hat.
    """
    if tuple(data.chunks[0]) != plan.block_sizes or len(data.chunks[1]) != 1:
        raise ValueError("data: row chunks must match the design's blocks, columns in one chunk")
    token = dask.base.tokenize(data.name, spatial_sign, plan, fit_id or uuid.uuid4().hex)
    tasks = plan.tasks()
    lanes = _lanes(len(tasks), LANES_PER_THREAD * max(int(n_threads), 1))
    blocks_of = [sorted({block for pair in group for block in pair}) for group in tasks]
    lanes_of_block = collections.defaultdict(set)
    for number, lane in enumerate(lanes):
        for task in lane:
            for block in blocks_of[task]:
                lanes_of_block[block].add(number)
    shared = {block for block, users in lanes_of_block.items() if len(users) > 1}
    reader = chunk_reader(data)
    reader_task = (
        None
        if reader is None
        else dask.delayed(reader, name=f"dppca-reader-{token}", traverse=False)
    )
    bounds = np.cumsum((0,) + plan.block_sizes)
    read_rows = (
        {}
        if reader is None
        else {block: slice(int(bounds[block]), int(bounds[block + 1])) for block in lanes_of_block}
    )
    # One graph layer of plain tasks (a tuple per task, Dask's graph specification):
    # a dask.delayed call per task would make a layer per task, and looking keys up
    # across thousands of layers made building the graph quadratic in the task count.
    name = f"dppca-pairs-{token}"
    layer: dict[Key, tuple[Any, ...]] = {}
    lane_ends = []
    for number, lane in enumerate(lanes):
        previous = None
        for task, step, given in _lane_steps(
            lane, tasks, blocks_of, shared, read_rows, plan, spatial_sign
        ):
            key = f"{name}-{number}-{task}"
            layer[key] = (
                lane_task,
                step,
                None if reader_task is None else reader_task.key,
                previous,
                *[(data.name, block, 0) for block in given],
            )
            previous = key
        lane_ends.append(previous)
    dependencies = [data] if reader_task is None else [data, reader_task]
    # dask.array.Array does not match dask's own DaskCollection protocol as typed
    # (__dask_scheduler__ is a staticmethod there, a plain function here).
    graph = HighLevelGraph.from_collections(
        name,
        layer,
        dependencies=dependencies,  # type: ignore[arg-type]
    )
    return _merge_down(
        [Delayed(key, graph, layer=name) for key in lane_ends], key_prefix=f"dppca-sum-{token}"
    )


def _lane_steps(lane, tasks, blocks_of, shared, read_rows, plan, spatial_sign):
    """Each task of one lane: ``(task, its Step, the blocks it takes as Dask inputs)``.

    ``shared``: blocks other lanes need too, Dask keys given to every task that uses
    them; ``read_rows``: the rows of each block that is a Zarr chunk (empty for other
    inputs).  Any other block reaches the lane once, read inside its first task there
    or as that task's input, and is carried while the lane's later tasks need it.
    """
    last_use = {block: task for task in lane for block in blocks_of[task]}
    delivered = set()
    for task in lane:
        sources, given = [], []
        for block in blocks_of[task]:
            if block in shared or (block not in delivered and block not in read_rows):
                sources.append(GIVEN)
                given.append(block)
            elif block in delivered:
                sources.append(CARRIED)
            else:
                sources.append(read_rows[block])
            delivered.add(block)
        keep = tuple(sorted(block for block in delivered - shared if last_use[block] > task))
        declared = tuple((block, plan.block_sizes[block]) for block in blocks_of[task])
        yield (
            task,
            Step(
                spatial_sign,
                plan.tile_rows,
                plan.n_features,
                declared,
                tasks[task],
                tuple(sources),
                keep,
            ),
            given,
        )


def _lanes(n_tasks: int, n_lanes: int) -> list[range]:
    """``n_tasks`` consecutive tasks cut into at most ``n_lanes`` lanes of near-equal length."""
    n_lanes = max(1, min(n_lanes, n_tasks))
    bounds = [n_tasks * k // n_lanes for k in range(n_lanes + 1)]
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


#: Lane totals one reduction task adds (exact sums: any grouping gives the same bits).
LANES_PER_SUM_TASK = 8


def _merge_down(lane_ends: list[Delayed], key_prefix: str) -> list[Delayed]:
    """The lanes' sums added exactly, ``LANES_PER_SUM_TASK`` at a time, down to at most
    that many.
    """
    level = 0
    while len(lane_ends) > LANES_PER_SUM_TASK:
        lane_ends = [
            dask.delayed(merge_lanes, pure=True)(
                *lane_ends[k : k + LANES_PER_SUM_TASK],
                dask_key_name=f"{key_prefix}-{level}-{k // LANES_PER_SUM_TASK}",
            )
            for k in range(0, len(lane_ends), LANES_PER_SUM_TASK)
        ]
        level += 1
    return lane_ends
