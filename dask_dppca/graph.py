"""Layer 2, the graph: one Dask task per block pair and a deterministic tree reduction.

No privacy here.  :func:`plan_blocks` resolves the pair design for an input and a
compute target and cuts the rows into the design's blocks; :func:`kernel_sum_graph`
builds, lazily and without reading data, a ``dask.delayed`` object whose value is the
exact, unnormalised sum ``sum_{(i,j) in P} g(t_ij) g(t_ij)^T``.  Each input block is one
Dask key, read once and shared by the tasks that need it (a Zarr chunk that is one
block of one task is read inside that task instead); the partial sums are added in a
fixed binary tree, so the result is the same whatever the scheduler, worker count or
completion order.  :func:`kendall_matrix` is the non-private K_hat itself.
"""

from __future__ import annotations

import collections
from contextlib import contextmanager
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
from .io import as_dask_array, chunk_reader, is_lazy_input
from .kernel import block_pair_sum, pairwise_sum
from .transforms import Transform, resolve_transform

__all__ = ["plan_blocks", "kernel_sum_graph", "compute_locally", "kendall_matrix", "tree_sum",
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


def kernel_sum_graph(
    data: da.Array,
    plan: DesignPlan,
    transform: Transform,
) -> Delayed:
    """Lazy exact pair sum of ``g g^T`` over the design's pairs.

    Parameters
    ----------
    data : dask.array.Array, shape (n, d)
        Rows chunked as ``plan.block_sizes``; all columns in one chunk.
    plan : DesignPlan
        The block pairs to sum.
    transform : Transform
        The generalized spatial sign.

    Returns
    -------
    dask.delayed.Delayed
        Evaluates to the (d, d) sum.  Divide by ``plan.n_pairs`` for K_hat.
    """
    if tuple(data.chunks[0]) != plan.block_sizes or len(data.chunks[1]) != 1:
        raise ValueError("data: row chunks must match the design's blocks, columns in one chunk")
    token = dask.base.tokenize(data.name, transform, plan)
    tasks = plan.tasks()
    blocks_of = [sorted({block for pair in group for block in pair}) for group in tasks]
    reader, rows = _in_task_reads(data, blocks_of)
    # One graph layer of plain tasks (a tuple per task, Dask's graph specification):
    # a dask.delayed call per task would make a layer per task, and looking keys up
    # across thousands of layers made building the graph quadratic in the task count.
    name = f"dppca-pairs-{token}"
    layer = {}
    for number, (group, needed) in enumerate(zip(tasks, blocks_of)):
        declared = [(block, plan.block_sizes[block]) for block in needed]
        local = [(needed.index(i), needed.index(j)) for i, j in group]
        inputs = [rows[block] if block in rows else (data.name, block, 0) for block in needed]
        layer[f"{name}-{number}"] = (_pairs_task, transform, plan.tile_rows, plan.n_features,
                                     declared, local, None if reader is None else reader.key,
                                     *inputs)
    graph = HighLevelGraph.from_collections(
        name, layer, dependencies=[data] if reader is None else [data, reader])
    partials = [Delayed(key, graph, layer=name) for key in layer]
    return tree_sum(partials, key_prefix=f"dppca-sum-{token}")


def _in_task_reads(data: da.Array, blocks_of: list[list[int]]
                   ) -> tuple[Delayed | None, dict[int, slice]]:
    """The blocks that one task alone needs (``blocks_of``: each task's blocks) and that
    are whole Zarr chunks: their rows.

    Such a block is read inside its task (from the shared reader key) rather than by a
    read task of its own: the scheduler handles a task less per block and the worker
    holds no block between tasks (with a 1-partner regular design, every block).  A
    block several tasks share stays one read task and one key, so each chunk is still
    read once.
    """
    reader = chunk_reader(data)
    if reader is None:
        return None, {}
    users = collections.Counter(block for needed in blocks_of for block in needed)
    bounds = np.cumsum((0,) + data.chunks[0])
    rows = {block: slice(int(bounds[block]), int(bounds[block + 1]))
            for block, count in users.items() if count == 1}
    if not rows:
        return None, {}
    return dask.delayed(reader, name=f"dppca-reader-{data.name}", traverse=False), rows


def _pairs_task(transform, tile_rows, n_features, declared, pairs, reader, *blocks):
    """One task: the kernel over some block pairs, with BLAS pinned to one thread on Dask
    workers; their sums added in a balanced tree.  A block given as a slice of rows is
    read here, from ``reader`` (see :func:`_in_task_reads`).

    Always the plan's tiles: the release's rounding slack (``DesignPlan.rounding_error``)
    is computed for exactly these.  ``declared`` is ``(I, rows of I)`` of each block from
    the plan.  n, |P| and the sensitivity come from the declared shape, while the kernel
    sums whatever rows the blocks really hold, so a block that holds other rows than
    declared fails the task, and with it the sum and any release that depends on it.
    """
    blocks = [reader[given, :] if isinstance(given, slice) else given for given in blocks]
    for block, (index, rows) in zip(blocks, declared):
        _check_block(block, index, rows, n_features)
    _pin_blas_on_workers()
    sums = [block_pair_sum(blocks[a], None if a == b else blocks[b], transform, tile_rows=tile_rows)
            for a, b in pairs]
    return pairwise_sum(sums)  # balanced: no deeper than the tree over tasks would have been


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


#: Levels of the binary reduction tree one reduction task computes: it adds up to
#: 2^3 = 8 partial sums with :func:`~dask_dppca.kernel.pairwise_sum`, which pairs them
#: exactly as those levels of the tree would (bitwise the same sum, 1/7 of the tasks).
TREE_LEVELS_PER_TASK = 3


def tree_sum(parts: list[Delayed], key_prefix: str = "dppca-sum") -> Delayed:
    """Add delayed arrays in a fixed balanced binary tree (deterministic rounding).

    Level ``l`` of the tree adds pairs ``(2m, 2m + 1)`` of level ``l - 1`` and carries
    an odd last one up; each task computes ``TREE_LEVELS_PER_TASK`` levels of it for 8
    consecutive, aligned parts, so the rounding depth is ``ceil(log2(len(parts)))``.
    """
    if not parts:
        raise ValueError("parts: nothing to add")
    fan_in = 2**TREE_LEVELS_PER_TASK
    add = dask.delayed(_add_parts, pure=True)
    level = 0
    while len(parts) > 1:
        parts = [add(*parts[k:k + fan_in], dask_key_name=f"{key_prefix}-{level}-{k // fan_in}")
                 if k + 1 < len(parts) else parts[k]
                 for k in range(0, len(parts), fan_in)]
        level += 1
    return parts[0]


def _add_parts(*parts: np.ndarray) -> np.ndarray:
    return pairwise_sum(list(parts))


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
        data, _, plan = plan_blocks(data, design, cluster.thread_count(target),
                                    rows_free=not is_lazy_input(X))
        graph = kernel_sum_graph(data, plan, g)
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
