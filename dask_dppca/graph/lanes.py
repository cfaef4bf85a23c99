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
from dataclasses import dataclass
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

__all__ = [
    "LANES_PER_SUM_TASK",
    "LANES_PER_THREAD",
    "GraphLayout",
    "graph_layout",
    "kernel_sum_graph",
]


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
    tasks, lanes, blocks_of, lanes_of_block, shared = _layout(plan, n_threads)
    reader = chunk_reader(data)
    # A reader key per lane, each a root of its own: the scheduler spreads roots over the
    # workers and a lane's tasks follow its reader (and then its state).  One reader key
    # for all lanes drew every lane to the worker holding it (measured: 2 workers, 300
    # blocks, one ran all 52 lane tasks).  dask.delayed(traverse=False) keeps the reader
    # a value: as a task's argument Dask would look inside it.
    lane_readers = (
        []
        if reader is None
        else [
            dask.delayed(reader, name=f"dppca-reader-{token}-{number}", traverse=False)
            for number in range(len(lanes))
        ]
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
                lane_readers[number].key if lane_readers else None,
                previous,
                *[(data.name, block, 0) for block in given],
            )
            previous = key
        lane_ends.append(previous)
    # dask.array.Array does not match dask's own DaskCollection protocol as typed
    # (__dask_scheduler__ is a staticmethod there, a plain function here).
    graph = HighLevelGraph.from_collections(
        name,
        layer,
        dependencies=[data, *lane_readers],  # type: ignore[list-item]
    )
    return _merge_down(
        [Delayed(key, graph, layer=name) for key in lane_ends], key_prefix=f"dppca-sum-{token}"
    )


def _layout(plan: DesignPlan, n_threads: int):
    """The lanes of a plan: ``(tasks, lanes, blocks_of, lanes_of_block, shared)``.

    ``tasks``: the block pairs of each task; ``lanes``: consecutive task numbers per
    lane; ``blocks_of``: the blocks each task uses; ``lanes_of_block``: the lanes using
    each block; ``shared``: the blocks more than one lane uses (one Dask key each).
    Public: the plan and the thread count only (:func:`kernel_sum_graph` and
    :func:`graph_layout` both use it, so a plan's counts are the graph's).
    """
    tasks = plan.tasks()
    lanes = _lanes(len(tasks), LANES_PER_THREAD * max(int(n_threads), 1))
    blocks_of = [sorted({block for pair in group for block in pair}) for group in tasks]
    lanes_of_block = collections.defaultdict(set)
    for number, lane in enumerate(lanes):
        for task in lane:
            for block in blocks_of[task]:
                lanes_of_block[block].add(number)
    shared = {block for block, users in lanes_of_block.items() if len(users) > 1}
    return tasks, lanes, blocks_of, lanes_of_block, shared


@dataclass(frozen=True)
class GraphLayout:
    """What :func:`kernel_sum_graph` builds for a plan, counted without building it.

    Attributes
    ----------
    n_lanes : int
        Lanes (chains of block-pair tasks).
    lane_tasks : int
        Block-pair tasks (the plan's tasks).
    merge_tasks : int
        Tasks adding the lanes' sums down to at most ``LANES_PER_SUM_TASK``.
    input_tasks : int
        The input's tasks the lanes depend on: for a Zarr input read in the plan's
        blocks, a read task per shared block, the array behind them and a reader per
        lane;
        for any other input, every task of the blocks' graph (a slice per block of a
        numpy array; a dask array's own tasks and its rechunk).
    reads_in_tasks : bool
        Whether a block one lane alone uses is read inside its task (a Zarr input read
        in the plan's blocks).
    shared_blocks : int
        Blocks more than one lane uses (one Dask key each, held until every lane using
        it is past it).
    shared_blocks_per_lane : int
        Most shared blocks one lane uses.
    carried_blocks : int
        Most blocks a lane's state carries from one task to the next.
    blocks_per_task : int
        Most distinct blocks one task uses.
    """

    n_lanes: int
    lane_tasks: int
    merge_tasks: int
    input_tasks: int
    reads_in_tasks: bool
    shared_blocks: int
    shared_blocks_per_lane: int
    carried_blocks: int
    blocks_per_task: int

    @property
    def n_tasks(self) -> int:
        """Tasks of the exact sum's graph (what the scheduler carries before the release)."""
        return self.lane_tasks + self.merge_tasks + self.input_tasks


def graph_layout(data: da.Array, plan: DesignPlan, n_threads: int) -> GraphLayout:
    """The task counts and working set of ``kernel_sum_graph(data, plan, ..., n_threads)``.

    Counted from the same layout the graph is built from (``_layout``: the plan and
    the thread count), without building the lanes' tasks and without reading data:
    ``data`` is the lazy array of the blocks (``Records.blocks``), whose own graph is
    counted when its blocks are not read inside the lane tasks.
    """
    if tuple(data.chunks[0]) != plan.block_sizes or len(data.chunks[1]) != 1:
        raise ValueError("data: row chunks must match the design's blocks, columns in one chunk")
    tasks, lanes, blocks_of, _, shared = _layout(plan, n_threads)
    reads_in_tasks = chunk_reader(data) is not None
    carried = 0
    shared_per_lane = 0
    for lane in lanes:
        last_use = {block: task for task in lane for block in blocks_of[task]}
        shared_per_lane = max(shared_per_lane, sum(block in shared for block in last_use))
        if reads_in_tasks:  # the blocks a lane's state keeps after each task (_lane_steps)
            live: set[int] = set()
            for task in lane:
                for block in blocks_of[task]:
                    if block not in shared and last_use[block] > task:
                        live.add(block)
                    else:
                        live.discard(block)
                carried = max(carried, len(live))
    merges, ends = 0, len(lanes)
    while ends > LANES_PER_SUM_TASK:
        ends = -(-ends // LANES_PER_SUM_TASK)
        merges += ends
    # A Zarr input's shared blocks: a read task each, the array they read and a reader
    # per lane.
    inputs = len(shared) + 1 + len(lanes) if reads_in_tasks else len(data.__dask_graph__())
    return GraphLayout(
        n_lanes=len(lanes),
        lane_tasks=len(tasks),
        merge_tasks=merges,
        input_tasks=inputs,
        reads_in_tasks=reads_in_tasks,
        shared_blocks=len(shared),
        shared_blocks_per_lane=shared_per_lane,
        carried_blocks=carried,
        blocks_per_task=max((len(b) for b in blocks_of), default=0),
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
