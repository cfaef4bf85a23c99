"""Worker-wide tasks: one task a worker runs a run of segments on that worker's threads.

On a cluster, a graph of one task a thread grows with the threads (1000 workers x 16
threads: 16 000 segment tasks and their scheduling), holds one exact d x d sum a
segment (at d = 10 000 a sum is 1.2 GB), and reads a block once for each segment that
uses it.  A *worker task* instead runs a run of consecutive segments (two a thread of
the worker, as the segments are cut) on a pool of the worker's threads:

* it reads each block it uses once and shares it between its threads
  (:class:`SharedBlocks`: a block is dropped after the last of its segments used it);
* its threads add their groups' sums into a few exact sums shared under locks
  (:class:`BatchShape`: as many as the memory limit allows, one at least), merged once
  at the end;
* one runs a worker at a time: each carries the Dask resource :data:`WORKER_TASK_RESOURCE`,
  of which every worker declares one (the compute layer's worker plugin), so the task
  count grows with the workers, not the threads.

Exact addition makes the total the same bits whatever the threads, the shared sums or
the order (tests/graph/test_worker_tasks.py against the one-pair-per-task reference).
How many threads and sums a worker task uses is a public function of the plan, d and
the cluster's threads and memory limit (:func:`batch_shape`), the same at plan time and
at fit time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..design import DesignPlan
from ..kernel import ExactSum, tile_scratch_bytes
from ..kernel.fp_state import own_errstate
from .lane_task import LaneState, Segment, group_sum, segment_groups

__all__ = [
    "EXACT_SUM_DIGITS",
    "WORKER_BASELINE_BYTES",
    "WORKER_TASK_RESOURCE",
    "BatchShape",
    "SharedBlocks",
    "WorkerBatch",
    "WorkerTasks",
    "batch_shape",
    "batch_task",
    "exact_sum_bytes",
    "inside_chunk",
    "pause_fraction",
    "read_unit",
    "thread_bytes",
]

#: The Dask resource a worker task needs one of; each worker declares one
#: (:class:`dask_dppca.compute.workers.WorkerSetup`), so one runs a worker at a time.
WORKER_TASK_RESOURCE = "dppca-worker-task"
#: int64 digits an exact sum holds an entry in (for entries of like size: 2 or 3).
EXACT_SUM_DIGITS = 3
#: An idle worker process's resident bytes, as the choice of :func:`batch_shape` counts
#: them (a public constant: the plan and the fit choose the same shape).
WORKER_BASELINE_BYTES = 300 * 2**20


@dataclass(frozen=True)
class WorkerTasks:
    """The cluster a graph is cut for (public: what the scheduler says of its workers).

    Attributes
    ----------
    workers : int
        Worker processes.
    threads_per_worker : int
        Threads of each (the smallest, when they differ).
    memory_limit : int or None
        Bytes each may hold (the smallest), None when unlimited.
    """

    workers: int
    threads_per_worker: int
    memory_limit: int | None


@dataclass(frozen=True)
class BatchShape:
    """How a worker task runs: ``threads`` threads adding into ``sums`` exact sums."""

    threads: int
    sums: int


def exact_sum_bytes(n_features: int) -> int:
    """Bytes of one exact sum of K's upper triangle (``EXACT_SUM_DIGITS`` int64 an entry)."""
    d = int(n_features)
    return EXACT_SUM_DIGITS * 8 * d * (d + 1) // 2


def thread_bytes(plan: DesignPlan, held_blocks: int, blocks_per_task: int, read_buffer: int) -> int:
    """Most bytes one thread running a segment holds: the blocks it holds and the
    kernel's prepared copy of a group's blocks, the read buffer, the kernel's tile
    scratch, its group's d x d block-pair sums and their balanced sum's upper triangle.
    """
    d = plan.n_features
    block = 8 * max(plan.block_sizes) * d
    pairs_per_task = max(len(task) for task in plan.tasks())
    return int(
        (held_blocks + blocks_per_task) * block
        + read_buffer
        + tile_scratch_bytes(plan.tile_rows, d)
        + (pairs_per_task + 1) * 8 * d * d
    )


def pause_fraction() -> float:
    """The fraction of its memory limit at which a Dask worker pauses (its configuration)."""
    import dask

    value = dask.config.get("distributed.worker.memory.pause", 0.8)
    return float(value) if value else 1.0


def batch_shape(
    cluster: WorkerTasks, n_features: int, per_thread: int, finished_sums: int
) -> BatchShape:
    """Threads and shared exact sums of a worker task that fit the worker's memory.

    The most threads (at most the worker's) whose per-thread bytes, with one running
    sum, the batch's merged total and the ``finished_sums`` a worker still holds for
    their merge, fit what the worker may use (its memory limit x Dask's pause fraction,
    less :data:`WORKER_BASELINE_BYTES`); then the most shared sums (one a thread at
    most) that still fit.  At least one of each: a shape that does not fit even so is
    the plan's to refuse.  Public: d, the per-thread bytes (from the plan) and the
    cluster's threads and limit.
    """
    threads = max(1, int(cluster.threads_per_worker))
    if cluster.memory_limit is None:
        return BatchShape(threads, threads)
    exact = exact_sum_bytes(n_features)
    room = cluster.memory_limit * pause_fraction() - WORKER_BASELINE_BYTES
    room -= (finished_sums + 1) * exact  # the finished sums and the batch's merged total
    fit = int((room - exact) // max(per_thread, 1))
    threads = max(1, min(threads, fit))
    sums = int((room - threads * per_thread) // max(exact, 1))
    return BatchShape(threads, max(1, min(threads, sums)))


@dataclass(frozen=True, eq=False)
class WorkerBatch:
    """What one worker task runs: consecutive segments, and how (threads, shared sums)."""

    segments: tuple[Segment, ...]
    shape: BatchShape


class SharedBlocks:
    """The blocks of a worker task's segments, each read once and shared by its threads.

    What is read is a *unit* (:func:`read_unit`): a block that lies inside one store
    chunk is cut from that chunk, read whole (a store decodes a chunk whole anyway), so a
    chunk holding several of the task's blocks (the design keeps them together in its
    walk) is decoded once there, not once a block; any other block is read as itself,
    in one call.  A unit is read by the first thread that needs it (others wait for that
    read) and dropped when the last use of its blocks by the batch's segments is done.
    """

    def __init__(self, reader: Any, segments: Sequence[Segment]) -> None:
        self.reader = reader
        self.chunk = max(int(getattr(reader, "chunk_rows", 0) or 0), 0)
        self.n_rows = int(reader.shape[0])
        self.span: dict[int, tuple[int, int]] = {}
        for segment in segments:
            if segment.starts is not None:
                for block, first, rows in zip(segment.blocks, segment.starts, segment.rows):
                    self.span[int(block)] = (int(first), int(rows))
        self.uses = Counter(
            self._unit(int(block)) for segment in segments for block in segment.blocks
        )
        self.lock = threading.Lock()
        self.held: dict[int, Any] = {}
        self.reading: dict[int, threading.Event] = {}

    def get(self, index: int, first: int, rows: int) -> Any:
        """Block ``index`` (rows ``first`` to ``first + rows`` of the store)."""
        self.span.setdefault(index, (first, rows))
        unit = self._unit(index)
        offset = first - self._rows(unit)[0]
        return self._read(unit)[offset : offset + rows]

    def done(self, index: int) -> None:
        """A segment is done with block ``index``: its unit goes after its last use."""
        unit = self._unit(index)
        with self.lock:
            self.uses[unit] -= 1
            if self.uses[unit] <= 0:
                self.held.pop(unit, None)

    def _unit(self, index: int) -> int:
        first, rows = self.span[index]
        return read_unit(index, first, rows, self.chunk)

    def _rows(self, unit: int) -> tuple[int, int]:
        """``(first, stop)`` rows of a unit: a chunk, or (negative) the block itself."""
        if unit < 0:
            first, rows = self.span[-1 - unit]
            return first, first + rows
        return unit * self.chunk, min((unit + 1) * self.chunk, self.n_rows)

    def _read(self, unit: int) -> Any:
        with self.lock:
            if unit in self.held:
                return self._value(unit)
            waiting = self.reading.get(unit)
            if waiting is None:
                self.reading[unit] = threading.Event()
        if waiting is not None:
            waiting.wait()  # the reading thread always sets it (its read or its error)
            with self.lock:
                return self._value(unit)
        first, stop = self._rows(unit)
        try:
            value: Any = self.reader[first:stop, :]
        except BaseException as error:
            value = _Failed(error)
        with self.lock:
            self.held[unit] = value
            self.reading.pop(unit).set()
            return self._value(unit)

    def _value(self, unit: int) -> Any:
        value = self.held[unit]
        if isinstance(value, _Failed):
            raise value.error
        return value


def read_unit(index: int, first: int, rows: int, chunk: int) -> int:
    """What a worker task reads block ``index`` (rows ``first`` to ``first + rows``) from:
    the store chunk (number, >= 0) that holds the whole block and more, else the block
    itself (``-1 - index``: whole chunks, or a block across chunk boundaries).
    """
    if chunk > 0 and inside_chunk(first, rows, chunk):
        return first // chunk
    return -1 - index


def inside_chunk(first: Any, rows: Any, chunk: int) -> Any:
    """Whether a block of ``rows`` rows from ``first`` lies inside one store chunk of
    ``chunk`` rows (> 0) and is smaller than it: then it is cut from that chunk's read
    (elementwise on arrays: the plan counts the reads by the same rule).
    """
    return (first // chunk == (first + rows - 1) // chunk) & (rows < chunk)


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class _SharedSums:
    """``count`` exact sums shared by a worker task's threads, each under its own lock."""

    def __init__(self, count: int, size: int) -> None:
        self.sums = [ExactSum((size,)) for _ in range(count)]
        self.locks = [threading.Lock() for _ in range(count)]
        self.assigned: dict[int, int] = {}
        self.lock = threading.Lock()

    def add(self, values: np.ndarray) -> None:
        with self.lock:  # each thread keeps one sum: threads spread over the sums
            k = self.assigned.setdefault(threading.get_ident(), len(self.assigned))
        k %= len(self.sums)
        with self.locks[k]:
            self.sums[k].add(values)

    def total(self) -> ExactSum:
        return ExactSum.merge(*self.sums)


def batch_task(batch: WorkerBatch, reader: Any) -> LaneState:
    """One worker task: its segments in order on ``batch.shape.threads`` threads, their
    blocks read once (:class:`SharedBlocks`), their groups' sums added exactly into
    ``batch.shape.sums`` shared sums, merged into one exact sum.  (BLAS runs on one
    thread: the compute layer pins it on the workers.)
    """
    segments, shape = list(batch.segments), batch.shape
    d = segments[0].n_features
    upper = np.triu_indices(d)
    blocks = SharedBlocks(reader, segments)
    sums = _SharedSums(min(shape.sums, len(segments)), d * (d + 1) // 2)

    @own_errstate
    def run(segment: Segment) -> None:
        for group, held in segment_groups(segment, reader, (), shared=blocks):
            sums.add(group_sum(segment, group, held)[upper])

    _run_all(run, segments, shape.threads)
    return LaneState(sums.total())


def _run_all(run: Callable[[Segment], None], segments: list[Segment], threads: int) -> None:
    """``run`` on every segment, ``threads`` at a time in order; the first error raised."""
    threads = max(1, min(threads, len(segments)))
    if threads == 1:
        for segment in segments:
            run(segment)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dppca-batch") as pool:
        futures = [pool.submit(run, segment) for segment in segments]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
