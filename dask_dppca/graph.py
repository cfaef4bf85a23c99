"""Layer 2, the graph: lanes of block-pair tasks, each adding into one exact running sum.

No privacy here.  :func:`plan_blocks` resolves the pair design for an input and a
compute target and cuts the rows into the design's blocks; :func:`kernel_sum_graph`
builds, lazily and without reading data, a ``dask.delayed`` object whose value is the
unnormalised sum ``sum_{(i,j) in P} g(t_ij) g(t_ij)^T``.  The plan's tasks run in a few
chains ("lanes", two per thread); each adds its block pairs to its lane's exact sum
(:mod:`dask_dppca.exact_sum`), so a worker holds one running total per lane and the
blocks its lanes still need, whatever n, and the result is the same bits whatever the
lane count, scheduler, worker count or completion order.  Every block is read once.
:func:`kendall_matrix` is the non-private K_hat itself.
"""

from __future__ import annotations

import collections
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import distributed
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from threadpoolctl import ThreadpoolController, threadpool_limits

from . import cluster
from .design import CompleteDesign, DesignPlan, RegularDesign, complete_blocks, resolve_design
from .exact_sum import ExactSum
from .io import as_dask_array, chunk_reader, is_lazy_input
from .kernel import block_pair_sum, pairwise_sum
from .transforms import Transform, resolve_transform

__all__ = ["plan_blocks", "kernel_sum_graph", "compute_locally", "kendall_matrix",
           "single_threaded_blas"]


def plan_blocks(
    data: da.Array,
    design: str | CompleteDesign | RegularDesign,
    n_threads: int,
    rows_free: bool = False,
) -> tuple[da.Array, CompleteDesign | RegularDesign, DesignPlan]:
    """Resolve the design for this input and thread count; rechunk rows to its blocks.

    Public inputs only: the shape, the input's row chunks, the design parameter and
    the compute target's thread count.  ``rows_free``: the input imposes no row
    chunks (a numpy array, :func:`dask_dppca.io.is_lazy_input`), so the complete
    design cuts its rows by :func:`dask_dppca.design.block_rows`; otherwise it keeps the
    input's chunks as its blocks (each read once, and the same bits on any cluster).

    Returns
    -------
    (dask.array.Array, design, DesignPlan)
        The data with one chunk per block, the design object, and its plan.
    """
    n, d = data.shape
    chosen = resolve_design(design, n, d, n_threads)
    chunks = data.chunks[0]
    if isinstance(chosen, CompleteDesign) and rows_free:
        chunks = complete_blocks(n, d, n_threads)
    plan = chosen.plan(chunks, d)
    if tuple(data.chunks[0]) != plan.block_sizes:
        data = data.rechunk({0: plan.block_sizes})
    return data, chosen, plan


#: Lanes per worker thread.  A lane is a chain of tasks that adds its block pairs into
#: one running exact sum, so a worker holds a lane's total (and the blocks the lane
#: still needs), never a partial sum per task; two per thread, so that a thread whose
#: lane ends early takes up another.
LANES_PER_THREAD = 2


def kernel_sum_graph(
    data: da.Array,
    plan: DesignPlan,
    transform: Transform,
    n_threads: int,
) -> Delayed:
    """Lazy exact pair sum of ``g g^T`` over the design's pairs.

    The plan's tasks, in order, are cut into ``LANES_PER_THREAD * n_threads`` lanes of
    consecutive tasks.  Each lane task computes its block pairs and adds their sum to
    the lane's running :class:`~dask_dppca.exact_sum.ExactSum`; the lanes' totals are
    added at the end and rounded once.  Exact addition makes the result the same bits
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
    transform : Transform
        The generalized spatial sign.
    n_threads : int
        Threads of the compute target (the lane count; the result does not depend on it).

    Returns
    -------
    dask.delayed.Delayed
        Evaluates to the (d, d) sum.  Divide by ``plan.n_pairs`` for K_hat.
    """
    if tuple(data.chunks[0]) != plan.block_sizes or len(data.chunks[1]) != 1:
        raise ValueError("data: row chunks must match the design's blocks, columns in one chunk")
    token = dask.base.tokenize(data.name, transform, plan)
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
    reader_task = None if reader is None else dask.delayed(
        reader, name=f"dppca-reader-{data.name}", traverse=False)
    bounds = np.cumsum((0,) + plan.block_sizes)
    read_rows = {} if reader is None else {
        block: slice(int(bounds[block]), int(bounds[block + 1])) for block in lanes_of_block}
    # One graph layer of plain tasks (a tuple per task, Dask's graph specification):
    # a dask.delayed call per task would make a layer per task, and looking keys up
    # across thousands of layers made building the graph quadratic in the task count.
    name = f"dppca-pairs-{token}"
    layer, lane_ends = {}, []
    for number, lane in enumerate(lanes):
        previous = None
        for task, step, given in _lane_steps(lane, tasks, blocks_of, shared, read_rows, plan,
                                             transform):
            key = f"{name}-{number}-{task}"
            layer[key] = (_lane_task, step, None if reader_task is None else reader_task.key,
                          previous, *[(data.name, block, 0) for block in given])
            previous = key
        lane_ends.append(previous)
    dependencies = [data] if reader_task is None else [data, reader_task]
    graph = HighLevelGraph.from_collections(name, layer, dependencies=dependencies)
    return _add_lanes([Delayed(key, graph, layer=name) for key in lane_ends],
                      key_prefix=f"dppca-sum-{token}")


def _lane_steps(lane, tasks, blocks_of, shared, read_rows, plan, transform):
    """Each task of one lane: ``(task, its _Step, the blocks it takes as Dask inputs)``.

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
                sources.append(_GIVEN)
                given.append(block)
            elif block in delivered:
                sources.append(_CARRIED)
            else:
                sources.append(read_rows[block])
            delivered.add(block)
        keep = tuple(sorted(block for block in delivered - shared if last_use[block] > task))
        declared = tuple((block, plan.block_sizes[block]) for block in blocks_of[task])
        yield task, _Step(transform, plan.tile_rows, plan.n_features, declared, tasks[task],
                          tuple(sources), keep), given


def _lanes(n_tasks: int, n_lanes: int) -> list[range]:
    """``n_tasks`` consecutive tasks cut into at most ``n_lanes`` lanes of near-equal length."""
    n_lanes = max(1, min(n_lanes, n_tasks))
    bounds = [n_tasks * k // n_lanes for k in range(n_lanes + 1)]
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


_GIVEN, _CARRIED = "given", "carried"


@dataclass(frozen=True)
class _Step:
    """What one lane task computes; public, from the plan.

    ``declared``: ``(block, rows)`` of each block the task uses, from the plan;
    ``pairs``: its block pairs; ``sources``: for each block, a slice of rows read here
    from the Zarr reader, ``"given"`` (the task's next input) or ``"carried"`` (in the
    lane's state); ``keep``: the blocks the lane's next tasks still need.
    """

    transform: Transform
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


def _lane_task(step: _Step, reader, state: LaneState | None, *given) -> LaneState:
    """One lane task: the kernel over some block pairs, with BLAS pinned to one thread on
    Dask workers; their sums added in a balanced tree, then exactly to the lane's total.

    Always the plan's tiles: the release's rounding slack (``DesignPlan.rounding_error``)
    is computed for exactly these.  n, |P| and the sensitivity come from the declared
    shape, while the kernel sums whatever rows the blocks really hold, so a block that
    holds other rows than declared fails the task, and with it the sum and any release
    that depends on it.
    """
    blocks, inputs = {}, iter(given)
    for (index, rows), source in zip(step.declared, step.sources):
        if source == _CARRIED:
            blocks[index] = state.blocks[index]        # checked when it reached the lane
            continue
        block = reader[source, :] if isinstance(source, slice) else next(inputs)
        _check_block(block, index, rows, step.n_features)
        blocks[index] = block
    _pin_blas_on_workers()
    sums = [block_pair_sum(blocks[i], None if i == j else blocks[j], step.transform,
                           tile_rows=step.tile_rows) for i, j in step.pairs]
    # The sums are symmetric bit for bit (the kernel returns (S + S^T) / 2): the lane adds
    # their upper triangles only.
    d = step.n_features
    total = ExactSum((d * (d + 1) // 2,)) if state is None else state.total
    carried = {**(state.blocks if state is not None else {}), **blocks}
    return LaneState(total.plus(pairwise_sum(sums)[np.triu_indices(d)]),
                     {block: carried[block] for block in step.keep})


def _check_block(block, index: int, rows: int, n_features: int) -> None:
    shape = getattr(block, "shape", None)
    if shape != (rows, n_features):
        raise ValueError(
            f"X: block {index} holds an array of shape {shape}, but the input declared "
            f"({rows}, {n_features}); n, the pair count and the sensitivity come from the "
            "declared shape, so nothing is computed or released from it"
        )


_pinned = {"done": False}


def _pin_blas_on_workers() -> None:
    """Pin BLAS (and OpenMP) to one thread for good in a Dask worker process.

    Dask runs one task per core, so threaded BLAS only oversubscribes; OpenBLAS also
    rounds differently with different thread counts, and a fixed count is what makes
    the exact sum bitwise identical on any number of workers.  Dask's nanny already
    sets ``OPENBLAS_NUM_THREADS=1``; this covers workers started without it.  It is
    permanent on purpose: toggling the limit per task leaves OpenBLAS's idle threads
    spinning on the core the next task needs.  Computes in this process (local
    schedulers, in-process clusters such as the embedded one) are covered by
    :func:`single_threaded_blas` around the whole compute instead: pinning for good there
    would leave the user's own numpy single-threaded.
    """
    if _pinned["done"]:
        return
    try:
        worker = distributed.get_worker()
    except ValueError:
        return
    if cluster.in_this_process(worker.address):
        return
    threadpool_limits(limits=1)
    _pinned["done"] = True


@contextmanager
def single_threaded_blas(target: object):
    """BLAS and OpenMP on one thread while computing on ``target`` in this process.

    For a local scheduler name or a client whose workers live in this process, the
    limit holds for the block and is then restored; for a cluster of other processes
    (pinned by :func:`_pin_blas_on_workers`) nothing changes here.  The thread pools are
    found once per process (threadpoolctl scans the loaded libraries, about a
    millisecond: the fixed cost of a small kendall_matrix).
    """
    if isinstance(target, str) or cluster.workers_in_this_process(target):
        if "controller" not in _pools:
            _pools["controller"] = ThreadpoolController()
        with _pools["controller"].limit(limits=1):
            yield
    else:
        yield


_pools: dict[str, ThreadpoolController] = {}


#: Lane totals one reduction task adds (exact sums: any grouping gives the same bits).
LANES_PER_SUM_TASK = 8


def _add_lanes(lane_ends: list[Delayed], key_prefix: str) -> Delayed:
    """The lanes' totals added, ``LANES_PER_SUM_TASK`` at a time, then rounded once to float."""
    level = 0
    while len(lane_ends) > LANES_PER_SUM_TASK:
        lane_ends = [dask.delayed(_merge_lanes, pure=True)(
                         *lane_ends[k:k + LANES_PER_SUM_TASK],
                         dask_key_name=f"{key_prefix}-{level}-{k // LANES_PER_SUM_TASK}")
                     for k in range(0, len(lane_ends), LANES_PER_SUM_TASK)]
        level += 1
    return dask.delayed(_lanes_total, pure=True)(*lane_ends, dask_key_name=f"{key_prefix}-total")


def _merge_lanes(*states: LaneState) -> LaneState:
    return LaneState(ExactSum.merge(*(state.total for state in states)), {})


def _lanes_total(*states: LaneState) -> np.ndarray:
    """The exact total of the lanes, correctly rounded to float64 (one rounding), as the
    symmetric d x d matrix."""
    upper = _merge_lanes(*states).total.to_float()
    d = int((math.isqrt(8 * upper.size + 1) - 1) // 2)
    total = np.zeros((d, d))
    total[np.triu_indices(d)] = upper
    total.T[np.triu_indices(d)] = upper
    return total


def compute_locally(graph: Delayed, scheduler: str, progress: bool = False) -> np.ndarray:
    """Compute ``graph`` on a Dask local scheduler, BLAS on one thread for the whole compute."""
    from .progress import local_progress

    with local_progress(progress), single_threaded_blas(scheduler):
        (value,) = dask.compute(graph, scheduler=scheduler)
    return value


def kendall_matrix(
    X: Any,
    transform: str | Transform = "sphere",
    radius: float | None = None,
    *,
    scheduler: Any = "threads",
    component: str | None = None,
    design: Any = "complete",
    storage_options: dict | None = None,
    allow_fill_values: bool = False,
) -> np.ndarray:
    """The exact, NON-PRIVATE ``K_hat = mean over pairs i<j of g(t_ij) g(t_ij)^T``.

    For research, tests and non-private references: its output is a deterministic
    function of the data and must not be released.  The identity transform gives
    the sample covariance.

    Parameters
    ----------
    X : ndarray, dask.array.Array, Zarr (path, URL, Array, Group), xarray or dask DataFrame
        Records as rows (see :func:`dask_dppca.io.as_dask_array`).
    transform : {"sphere", "winsor", "identity"} or Transform, default="sphere"
    radius : float, optional
        Winsorization radius.
    scheduler : str or distributed.Client, default="threads"
        Where to compute (see :class:`~dask_dppca.DPPCA`).
    component : str, optional
        Array inside a Zarr group, or an xarray Dataset variable.
    design : {"complete", "auto"} or RegularDesign, default="complete"
        Which pairs are averaged.
    storage_options : dict, optional
        fsspec options for a URL (see :meth:`~dask_dppca.DPPCA.fit`).
    allow_fill_values : bool, default=False
        Read missing Zarr chunks as the fill value (see :meth:`~dask_dppca.DPPCA.fit`).

    Returns
    -------
    ndarray, shape (d, d)
    """
    g = resolve_transform(transform, radius)
    cluster.check_scheduler(scheduler)
    data = as_dask_array(X, component, storage_options=storage_options,
                         allow_fill_values=allow_fill_values, scheduler=scheduler)
    with cluster.compute_target(scheduler) as target:
        n_threads = cluster.thread_count(target)
        data, _, plan = plan_blocks(data, design, n_threads, rows_free=not is_lazy_input(X))
        graph = kernel_sum_graph(data, plan, g, n_threads)
        if isinstance(target, str):
            kernel_sum = compute_locally(graph, target)
        else:
            # The limit is in place before the first task can start (in-process workers).
            with single_threaded_blas(target):
                future = target.compute(graph)
                try:
                    kernel_sum = cluster.await_result(target, future, "kendall_matrix")
                finally:
                    future.release()
    return kernel_sum / plan.n_pairs
