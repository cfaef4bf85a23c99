"""Building the graph: a few segment tasks a thread, each running a run of block pairs.

:func:`kernel_sum_graph` builds, lazily and without reading data, the Dask graph of the
unnormalised sum ``sum_{(i,j) in P} g(t_ij) g(t_ij)^T`` over a design plan's pairs.
The plan's tasks, in order, are cut into *segments* (:func:`segment_bounds`): two lanes
a worker thread (one a thread beyond ``MAX_LANES``), each lane one to
``MAX_SEGMENTS_PER_LANE`` segments.  A segment is one Dask task: it reads its own blocks
from the store inside the task (a Zarr input) or takes them as Dask inputs (any other
input), runs its block pairs in order and returns its exact partial sum
(:mod:`dask_dppca.kernel.exact_sum`); the segments' sums are added exactly,
``LANES_PER_SUM_TASK`` at a time.  The task count is thus a public function of the
thread count and the pair work, not of n or the block size (a terabyte on 100 workers:
3658 tasks instead of 495 138, docs/scale.md).  Exact addition makes the result the
same bits whatever the segment count, scheduler, worker count or completion order.
What runs inside the tasks is :mod:`.lane_task`.

A block that two segments use is read twice (once in each), not made a Dask key that
one worker reads and sends to the other: a few blocks a segment boundary, the same
bytes from the store instead of over the network, and no key the scheduler tracks until
both readers are done (a terabyte on 100 workers: 0.98 % more block reads,
docs/scale.md).
"""

from __future__ import annotations

import math
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
from .lane_task import Segment, merge_lanes, segment_task
from .worker_tasks import (
    WORKER_TASK_RESOURCE,
    BatchShape,
    WorkerBatch,
    WorkerTasks,
    batch_shape,
    batch_task,
    inside_chunk,
    thread_bytes,
)

__all__ = [
    "LANES_PER_SUM_TASK",
    "LANES_PER_THREAD",
    "MAX_LANES",
    "MAX_SEGMENTS_PER_LANE",
    "SEGMENT_FLOPS",
    "SEGMENT_INPUT_BYTES",
    "GraphLayout",
    "graph_layout",
    "kernel_sum_graph",
    "lanes_for",
    "pass_block_sizes",
    "plan_segments",
    "read_buffer_bytes",
    "segment_bounds",
    "segments_per_lane",
    "worker_task_plan",
]


#: Lanes per worker thread: two, so that a thread whose lane ends early takes up
#: another (the plan's tasks are of near-equal work, but threads and reads are not)...
LANES_PER_THREAD = 2
#: ...up to this many lanes; beyond it one a thread.  Every lane's first task is
#: dispatched by the one scheduler at about a millisecond each, so past some thousands
#: of threads a second lane a thread costs more wall time in dispatch than it saves in
#: balance (16000 threads: 32000 tasks, about 48 s of scheduling for about 37 s of pair
#: work, docs/scale.md).
MAX_LANES = 8192
#: Pair work (flops, 4 d a pair) one segment aims at while a lane has more: about 90 s
#: of a core at d = 32 (the machine model's 3.4e8 pairs/s).  A worker lost mid-segment
#: recomputes its running segments, and the finished ones whose sums it still held, so
#: the work lost with a worker is bounded by a few segments a thread.
SEGMENT_FLOPS = 4e12
#: Most segments a lane is cut into (the task count stays a function of the threads).
MAX_SEGMENTS_PER_LANE = 4
#: Most bytes of blocks one segment takes as Dask inputs (an input other than a Zarr
#: store: its blocks are Dask keys the task holds for its whole run).  Such inputs have
#: a task per chunk of their own, so more segments add little to the graph.
SEGMENT_INPUT_BYTES = 256 * 2**20
#: Segment sums one reduction task adds (exact sums: any grouping gives the same bits).
LANES_PER_SUM_TASK = 8


def kernel_sum_graph(
    data: da.Array,
    plan: DesignPlan,
    spatial_sign: SpatialSign,
    n_threads: int,
    *,
    fit_id: str | None = None,
    cluster: WorkerTasks | None = None,
) -> list[Delayed]:
    """Lazy exact pair sum of ``g g^T`` over the design's pairs.

    The plan's tasks are cut into segments (:func:`segment_bounds`); each segment task
    runs its tasks' block pairs and returns their exact sum (:class:`~.LaneState`); the
    segments' sums are added exactly, ``LANES_PER_SUM_TASK`` at a time, down to at most
    that many, which :func:`~.lanes_total` adds and rounds once (the compute layer does
    that inside the release task).  Exact addition makes the result the same bits for
    any segment count, scheduler, worker count or completion order.  A Zarr input's
    blocks are read inside the segments that use them (the reader travels in the graph
    once, not as a task); any other input's blocks are the segment's Dask inputs.

    Parameters
    ----------
    data : dask.array.Array, shape (n, d)
        Rows chunked as ``plan.block_sizes``; all columns in one chunk.
    plan : DesignPlan
        The block pairs to sum.
    spatial_sign : SpatialSign
        The generalized spatial sign.
    n_threads : int
        Threads of the compute target (the segment count; the result does not depend
        on it).
    fit_id : str, optional
        Makes every key of the graph unique to this fit (a random one when omitted): a
        cluster that still holds another fit's keys never answers this one with them.
    cluster : WorkerTasks, optional
        The cluster's workers, threads and memory limit.  Given, and the blocks read
        inside the tasks (a Zarr input), the segments run in worker-wide tasks
        (:mod:`.worker_tasks`: one a worker at a time, each block read once there, a few
        shared exact sums); else each segment is a task.

    Returns
    -------
    list of dask.delayed.Delayed
        At most ``LANES_PER_SUM_TASK`` segment sums (:class:`~.LaneState`);
        ``lanes_total(*their values)`` is the (d, d) sum.  Divide by ``plan.n_pairs``
        for K_hat.
    """
    _check_blocks(data, plan)
    # The keys need to be unique to the fit, not a digest of the plan's pairs (hashing a
    # terabyte's half a million block pairs took longer than building the graph).
    token = dask.base.tokenize(data.name, spatial_sign, plan.describe(), fit_id or uuid.uuid4().hex)
    reader = chunk_reader(data)
    name = f"dppca-pairs-{token}"
    reads = reader is not None
    layer, annotations = _kernel_layer(data, plan, spatial_sign, n_threads, reader, cluster, name)
    # dask.array.Array does not match dask's own DaskCollection protocol as typed
    # (__dask_scheduler__ is a staticmethod there, a plain function here).
    dependencies = [] if reads else [data]
    with dask.annotate(**annotations):
        graph = HighLevelGraph.from_collections(name, layer, dependencies=dependencies)  # type: ignore[arg-type]
    return _merge_down(
        [Delayed(key, graph, layer=name) for key in layer], key_prefix=f"dppca-sum-{token}"
    )


def _kernel_layer(
    data: da.Array,
    plan: DesignPlan,
    spatial_sign: SpatialSign,
    n_threads: int,
    reader: Any,
    cluster: WorkerTasks | None,
    name: str,
) -> tuple[dict[Key, tuple[Any, ...]], dict[str, Any]]:
    """The kernel's tasks (a worker task or a segment each) and their Dask annotations.

    One graph layer of plain tasks (a tuple per task, Dask's graph specification): a
    dask.delayed call per task would make a layer per task.  The reader is a literal of
    every task: Dask pickles the graph whole, so it travels once, and no task depends on
    a reader key (one such key drew every task to the worker holding it).
    """
    layer: dict[Key, tuple[Any, ...]] = {}
    reads = reader is not None
    segments = plan_segments(plan, segment_bounds(plan, n_threads, reads), reads, spatial_sign)
    if reads and cluster is not None:
        shape, batches = worker_task_plan(plan, segments, reader, cluster, n_threads)
        for number, (first, stop) in enumerate(batches):
            batch = WorkerBatch(tuple(segments[first:stop]), shape)
            layer[f"{name}-{number}"] = (batch_task, batch, reader)
        return layer, {"resources": {WORKER_TASK_RESOURCE: 1}}
    for number, segment in enumerate(segments):
        given = [] if reads else segment.blocks.tolist()
        layer[f"{name}-{number}"] = (
            segment_task,
            segment,
            reader,
            *[(data.name, block, 0) for block in given],
        )
    return layer, {}


def _check_blocks(data: da.Array, plan: DesignPlan) -> None:
    if tuple(data.chunks[0]) != plan.block_sizes or len(data.chunks[1]) != 1:
        raise ValueError("data: row chunks must match the design's blocks, columns in one chunk")


def _task_sizes(plan: DesignPlan) -> np.ndarray:
    """Block pairs in each of the plan's tasks."""
    return np.asarray(plan.task_sizes or (1,) * len(plan.block_pairs), dtype=np.int64)


def plan_segments(
    plan: DesignPlan,
    bounds: list[tuple[int, int]],
    reads: bool,
    spatial_sign: SpatialSign | None = None,
) -> list[Segment]:
    """Each segment of ``bounds`` (:func:`segment_bounds`) as a :class:`~.Segment` (numpy
    throughout: a terabyte's 3200 segments of half a million block pairs in a fraction
    of a second).  ``reads``: whether the blocks are read inside the tasks (a Zarr
    input's reader) or are the tasks' Dask inputs; ``spatial_sign`` None only for
    segments that run no kernel (counting them, the scree's statistics).
    """
    sizes = _task_sizes(plan)
    ends = np.cumsum(sizes)
    pairs = np.asarray(plan.block_pairs, dtype=np.int32).reshape(-1, 2)
    row_starts = np.cumsum((0,) + plan.block_sizes)[:-1]
    block_rows = np.asarray(plan.block_sizes, dtype=np.int32)
    segments = []
    for first, stop in bounds:
        p0, p1 = int(ends[first] - sizes[first]), int(ends[stop - 1])
        mine = pairs[p0:p1]
        flat = mine.ravel()
        group = np.repeat(np.repeat(np.arange(stop - first), sizes[first:stop]), 2)
        blocks, first_at = np.unique(flat, return_index=True)
        _, last_from_end = np.unique(flat[::-1], return_index=True)
        last_use = group[flat.size - 1 - last_from_end]
        order = np.argsort(first_at, kind="stable")
        blocks = blocks[order]
        segments.append(
            Segment(
                spatial_sign,  # type: ignore[arg-type]  # None only for counting
                plan.tile_rows,
                plan.n_features,
                mine,
                (ends[first:stop] - p0).astype(np.int32),
                blocks,
                block_rows[blocks],
                row_starts[blocks] if reads else None,
                last_use[order].astype(np.int32),
            )
        )
    return segments


def segment_bounds(plan: DesignPlan, n_threads: int, reads_in_tasks: bool) -> list[tuple[int, int]]:
    """The plan's tasks cut into segments: ``(first, stop)`` task numbers of each.

    The public rule (the plan, the thread count and the kind of input only):
    ``LANES_PER_THREAD`` lanes a thread up to ``MAX_LANES`` lanes, never fewer than one
    a thread (:func:`lanes_for`); a lane's share of the pair work (4 d flops a
    pair) in ``ceil(share / SEGMENT_FLOPS)`` segments, at least 1 and at most
    ``MAX_SEGMENTS_PER_LANE``; the plan's tasks cut into that many runs of near-equal
    count (never more runs than tasks).  For an input whose blocks are Dask inputs
    (``reads_in_tasks`` False), a run whose distinct blocks exceed
    ``SEGMENT_INPUT_BYTES`` is cut again before the task that would pass it.
    """
    n_tasks = len(_task_sizes(plan))
    runs = _cut(n_tasks, lanes_for(n_threads) * segments_per_lane(plan, n_threads))
    if reads_in_tasks:
        return runs
    tasks = plan.tasks()
    row_bytes = 8 * plan.n_features
    cut: list[tuple[int, int]] = []
    for first, stop in runs:
        start, held = first, 0
        seen: set[int] = set()
        for task in range(first, stop):
            new = {block for pair in tasks[task] for block in pair} - seen
            extra = sum(plan.block_sizes[block] for block in new) * row_bytes
            if task > start and held + extra > SEGMENT_INPUT_BYTES:
                cut.append((start, task))
                start, held, seen = task, 0, set()
                new = {block for pair in tasks[task] for block in pair}
                extra = sum(plan.block_sizes[block] for block in new) * row_bytes
            seen |= new
            held += extra
        cut.append((start, stop))
    return cut


def segments_per_lane(plan: DesignPlan, n_threads: int) -> int:
    """Segments a lane is cut into: its share of the pair work (4 d flops a pair) over
    ``SEGMENT_FLOPS``, at least 1 and at most ``MAX_SEGMENTS_PER_LANE``.
    """
    share = 4.0 * plan.n_features * plan.n_pairs / lanes_for(n_threads)
    return min(MAX_SEGMENTS_PER_LANE, max(1, math.ceil(share / SEGMENT_FLOPS)))


def read_buffer_bytes(plan: DesignPlan, rows_per_read: int, itemsize: int) -> int:
    """Bytes of a block read's buffer beside the block: the whole chunks it decodes
    (``rows_per_read``, in the store's dtype) when they hold more rows than the block or
    the dtype is not float64 (the block is then a float64 copy); else none.
    """
    if itemsize != 8 or rows_per_read > max(plan.block_sizes):
        return rows_per_read * plan.n_features * itemsize
    return 0


def worker_task_plan(
    plan: DesignPlan,
    segments: list[Segment],
    reader: Any,
    cluster: WorkerTasks,
    n_threads: int,
) -> tuple[BatchShape, list[tuple[int, int]]]:
    """The worker tasks of ``segments`` (``(first, stop)`` segment numbers of each) and
    the threads and shared sums each runs with (:func:`~.worker_tasks.batch_shape`).

    ``segments_per_lane`` worker tasks a worker, of consecutive segments; the memory
    each thread needs from the segments' working set (the most blocks a segment holds
    and a group uses).
    """
    per_lane = segments_per_lane(plan, n_threads)
    batches = _cut(len(segments), cluster.workers * per_lane)  # near-equal runs
    held, per_task = _working_set(segments, reads=True, n_blocks=len(plan.block_sizes))
    row_edges = np.cumsum((0,) + plan.block_sizes)
    rows = int(_decoded(row_edges, np.arange(len(plan.block_sizes)), reader.chunk_rows).max())
    buffer = read_buffer_bytes(plan, rows, int(reader.dtype.itemsize))
    per_thread = thread_bytes(plan, held, per_task, buffer)
    finished = -(-len(batches) // max(cluster.workers, 1))
    return batch_shape(cluster, plan.n_features, per_thread, finished), batches


def _working_set(segments: list[Segment], reads: bool, n_blocks: int) -> tuple[int, int]:
    """``(most blocks one segment holds at once, most distinct blocks one group uses)``."""
    held_most, per_task = 0, 0
    width = n_blocks + 1
    for segment in segments:
        groups = len(segment.group_ends)
        group_of = np.repeat(np.arange(groups), np.diff(segment.group_ends, prepend=0))
        flat_groups = np.repeat(group_of, 2)
        if reads:  # a block from its first use to its last
            first = flat_groups[np.unique(segment.pairs.ravel(), return_index=True)[1]]
            change = np.zeros(groups + 1, dtype=np.int64)
            np.add.at(change, first, 1)
            np.add.at(change, segment.last_use + 1, -1)
            held_most = max(held_most, int(np.cumsum(change).max()))
        else:  # a task holds its Dask inputs for its whole run
            held_most = max(held_most, len(segment.blocks))
        distinct = np.unique(flat_groups.astype(np.int64) * width + segment.pairs.ravel())
        per_task = max(per_task, int(np.bincount(distinct // width).max()))
    return held_most, per_task


def pass_block_sizes(
    block_sizes: tuple[int, ...], n_features: int, n_threads: int
) -> tuple[int, ...]:
    """Rows of each task of a one-pass reduction over the records (the score map's passes).

    Consecutive blocks merged into a run a lane (:func:`lanes_for`), more when a run
    would hold above ``SEGMENT_INPUT_BYTES`` of float64 rows (a block is never split, so
    each is read in one task): a pass has one or two tasks a thread or one per 256 MiB of
    records, not one per block.  Public: the blocks, d and the thread count.
    """
    sizes = np.asarray(block_sizes, dtype=np.int64)
    if sizes.size == 0:
        return ()
    row_bytes = 8 * max(int(n_features), 1)
    runs = max(
        lanes_for(n_threads),
        math.ceil(int(sizes.sum()) * row_bytes / SEGMENT_INPUT_BYTES),
    )
    bounds = [0]
    target = int(sizes.sum()) / runs
    ends = np.cumsum(sizes)
    for k in range(1, runs):  # cut after the block whose end first reaches k runs' rows
        at = int(np.searchsorted(ends, k * target)) + 1
        if at > bounds[-1] and at < len(sizes):
            bounds.append(at)
    bounds.append(len(sizes))
    return tuple(
        int(ends[b - 1] - (ends[a - 1] if a else 0)) for a, b in zip(bounds[:-1], bounds[1:])
    )


def lanes_for(n_threads: int) -> int:
    """Lanes for ``n_threads`` threads: ``LANES_PER_THREAD`` a thread up to ``MAX_LANES``
    lanes, and never fewer than one a thread.
    """
    threads = max(int(n_threads), 1)
    return max(threads, min(LANES_PER_THREAD * threads, MAX_LANES))


def _cut(n_tasks: int, n_runs: int) -> list[tuple[int, int]]:
    """``n_tasks`` consecutive tasks cut into at most ``n_runs`` runs of near-equal length."""
    n_runs = max(1, min(n_runs, n_tasks))
    bounds = [n_tasks * k // n_runs for k in range(n_runs + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


@dataclass(frozen=True)
class GraphLayout:
    """What :func:`kernel_sum_graph` builds for a plan, counted without building it.

    Attributes
    ----------
    segments : tuple of (int, int)
        Each segment's plan tasks, ``(first, stop)``.
    merge_tasks : int
        Tasks adding the tasks' sums down to at most ``LANES_PER_SUM_TASK``.
    input_tasks : int
        The input's tasks the segments depend on: none for a Zarr input (read inside
        the segments); for any other input every task of the blocks' graph (a slice per
        block of a numpy array; a dask array's own tasks and its rechunk).
    reads_in_tasks : bool
        Whether the segments read their blocks inside (a Zarr input).
    segment_reads : tuple of int
        Blocks each segment takes (a block two segments use is read twice; for other
        inputs, sent to both).
    segment_rows : tuple of int
        Rows each segment reads (decoded): for a Zarr input the whole chunks (or shards)
        each of its blocks overlaps, since a chunk is decoded whole; else its blocks.
    rows_per_read : int
        Most rows one block's read decodes (the block's own rows, or the whole chunks
        it overlaps): the read's buffer, beside the block.
    held_blocks : int
        Most blocks one segment holds at once (a block from its first use to its last;
        all its input blocks for an input other than a Zarr store).
    blocks_per_task : int
        Most distinct blocks one plan task uses.
    worker_tasks : tuple of (int, int)
        On a cluster with a Zarr input, each worker task's segments ``(first, stop)``
        (:mod:`.worker_tasks`); empty when each segment is a task.
    batch : BatchShape or None
        The threads and shared sums a worker task runs with (None: no worker tasks).
    task_reads, task_rows : tuple of int
        Blocks each task reads and the rows it decodes: a worker task reads a block
        once for all its segments; equal to ``segment_reads`` and ``segment_rows``
        when each segment is a task.
    """

    segments: tuple[tuple[int, int], ...]
    merge_tasks: int
    input_tasks: int
    reads_in_tasks: bool
    segment_reads: tuple[int, ...]
    segment_rows: tuple[int, ...]
    rows_per_read: int
    held_blocks: int
    blocks_per_task: int
    worker_tasks: tuple[tuple[int, int], ...] = ()
    batch: BatchShape | None = None
    task_reads: tuple[int, ...] = ()
    task_rows: tuple[int, ...] = ()

    @property
    def n_segments(self) -> int:
        """Segments (each runs a run of the plan's block-pair groups)."""
        return len(self.segments)

    @property
    def n_kernel_tasks(self) -> int:
        """Tasks running the kernel: the worker tasks, or else the segments."""
        return len(self.worker_tasks) or self.n_segments

    @property
    def block_reads(self) -> int:
        """Blocks the tasks read, counted once per task that uses them."""
        return sum(self.task_reads)

    @property
    def n_tasks(self) -> int:
        """Tasks of the exact sum's graph (what the scheduler carries before the release)."""
        return self.n_kernel_tasks + self.merge_tasks + self.input_tasks


def graph_layout(
    data: da.Array, plan: DesignPlan, n_threads: int, cluster: WorkerTasks | None = None
) -> GraphLayout:
    """The task counts and working set of ``kernel_sum_graph(data, plan, ..., n_threads,
    cluster=cluster)``.

    Counted from the same segments (and worker tasks) the graph is built from
    (:func:`segment_bounds`, :func:`worker_task_plan`), without building the graph and
    without reading data: ``data`` is the lazy array of the blocks (``Records.blocks``),
    whose own graph is counted when its blocks are not read inside the tasks.
    """
    _check_blocks(data, plan)
    reader = chunk_reader(data)
    reads = reader is not None
    bounds = segment_bounds(plan, n_threads, reads)
    segments = plan_segments(plan, bounds, reads)
    row_edges = np.cumsum((0,) + plan.block_sizes)
    chunk = reader.chunk_rows if reader is not None else 0
    rows = [_decoded_rows(row_edges, segment.blocks, chunk) for segment in segments]
    block_reads = [len(segment.blocks) for segment in segments]
    held_most, per_task = _working_set(segments, reads, len(plan.block_sizes))
    batches: list[tuple[int, int]] = []
    shape = None
    task_reads, task_rows = block_reads, rows
    if reads and cluster is not None:
        shape, batches = worker_task_plan(plan, segments, reader, cluster, n_threads)
        together = [
            np.unique(np.concatenate([s.blocks for s in segments[a:b]])) for a, b in batches
        ]
        units = [_read_units(row_edges, blocks, chunk) for blocks in together]
        task_reads = [len(inside) + len(alone) for inside, alone in units]
        task_rows = [  # a chunk holding blocks decoded once; other blocks as their reads
            int(np.minimum(row_edges[-1], (inside + 1) * chunk).sum() - (inside * chunk).sum())
            + _decoded_rows(row_edges, alone, chunk)
            for inside, alone in units
        ]
    merges, ends = 0, len(batches) or len(segments)
    while ends > LANES_PER_SUM_TASK:
        ends = -(-ends // LANES_PER_SUM_TASK)
        merges += ends
    return GraphLayout(
        segments=tuple(bounds),
        merge_tasks=merges,
        input_tasks=0 if reads else len(data.__dask_graph__()),
        reads_in_tasks=reads,
        segment_reads=tuple(block_reads),
        segment_rows=tuple(rows),
        rows_per_read=int(_decoded(row_edges, np.arange(len(plan.block_sizes)), chunk).max()),
        held_blocks=held_most,
        blocks_per_task=per_task,
        worker_tasks=tuple(batches),
        batch=shape,
        task_reads=tuple(task_reads),
        task_rows=tuple(task_rows),
    )


def _read_units(
    bounds: np.ndarray, blocks: np.ndarray, chunk: int
) -> tuple[np.ndarray, np.ndarray]:
    """What a worker task reads for ``blocks`` (:func:`~.worker_tasks.read_unit`): the
    distinct chunks that hold blocks inside them, and the blocks read as themselves.
    """
    first, stop = bounds[blocks], bounds[blocks + 1]
    if chunk <= 0:
        return np.empty(0, dtype=np.int64), blocks
    inside = inside_chunk(first, stop - first, chunk)
    return np.unique(first[inside] // chunk), blocks[~inside]


def _decoded_rows(bounds: np.ndarray, blocks: np.ndarray, chunk: int) -> int:
    """Rows decoded to read ``blocks`` (:func:`_decoded`, summed)."""
    return int(_decoded(bounds, blocks, chunk).sum())


def _decoded(bounds: np.ndarray, blocks: np.ndarray, chunk: int) -> np.ndarray:
    """Rows decoded to read each of ``blocks``: its rows, or the whole chunks of
    ``chunk`` rows it overlaps (a chunk is decoded whole; the last one may be short).
    """
    starts, stops = bounds[blocks], bounds[blocks + 1]
    if chunk <= 0:
        return stops - starts
    first, last = starts // chunk, (stops - 1) // chunk
    return np.minimum(bounds[-1], (last + 1) * chunk) - first * chunk


def _merge_down(sums: list[Delayed], key_prefix: str) -> list[Delayed]:
    """The segments' sums added exactly, ``LANES_PER_SUM_TASK`` at a time, down to at most
    that many.
    """
    level = 0
    while len(sums) > LANES_PER_SUM_TASK:
        sums = [
            dask.delayed(merge_lanes, pure=True)(
                *sums[k : k + LANES_PER_SUM_TASK],
                dask_key_name=f"{key_prefix}-{level}-{k // LANES_PER_SUM_TASK}",
            )
            for k in range(0, len(sums), LANES_PER_SUM_TASK)
        ]
        level += 1
    return sums
