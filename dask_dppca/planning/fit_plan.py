"""A fit's plan before a core turns: design, blocks, tasks, bytes, memory, time, accuracy.

:func:`plan_fit` reads public metadata only (the shape, the row chunks, the dtype and
codec of a store; never a chunk, never a ledger) and answers what ``DPPCA.fit`` would do
on a given cluster: the design ``"auto"`` picks and its blocks (through
:func:`dask_dppca.design.plan_blocks`, the one owner of block planning, whose task
limit refuses plans of many tiny tasks), the graph's tasks (counted by
:func:`dask_dppca.graph.lanes.graph_layout` from the layout the graph is built from), the
bytes read, the peak memory of a worker, the wall time on the machine model
(:mod:`dask_dppca.planning.machine`), the release's sigma and, for a stated spectrum or a
public pilot, the expected subspace error (:class:`dask_dppca.planning.utility.UtilityModel`).
A plan that does not fit (a worker's memory, a scheduler's task count) says so, with
what to change and the number it needs (``FitPlan.problems``).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..compute.shape import ClusterShape
from ..design import (
    SCHEDULER_TASK_LIMIT,
    Design,
    DesignPlan,
    RegularDesign,
    plan_blocks,
    task_limit,
)
from ..graph import graph_layout
from ..graph.lanes import GraphLayout, read_buffer_bytes
from ..graph.worker_tasks import (
    EXACT_SUM_DIGITS,
    exact_sum_bytes,
    pause_fraction,
    thread_bytes,
)
from ..io.records import Records
from ..io.storage import storage_kind
from ..io.tables import TABLE_TYPES
from ..io.zarr_input import chunk_reader
from ..kernel import SpatialSign, tile_rows_for_budget
from ..privacy import PrivacyTarget, ReleaseMechanism
from ..privacy.mechanisms.advice import release_warnings
from ..privacy.mechanisms.contract import make_sampler
from ..privacy.mechanisms.noise import NoiseSampler
from .formatting import format_bytes
from .machine import MachineModel
from .plan_text import fit_plan_text

__all__ = [
    "EXACT_SUM_DIGITS",
    "FitPlan",
    "PlanDoesNotFitError",
    "makespan",
    "modelled_seconds",
    "plan_fit",
]


class PlanDoesNotFitError(ValueError):
    """A fit's plan does not fit its cluster; ``.plan`` holds the :class:`FitPlan`."""

    def __init__(self, plan: FitPlan) -> None:
        super().__init__("; ".join(plan.problems))
        self.plan = plan


@dataclass(frozen=True)
class FitPlan:
    """What a fit would do, predicted from public metadata (see :func:`plan_fit`).

    Attributes
    ----------
    input : dict
        Location or type, shape, dtype, row chunks, storage and codec.
    cluster : ClusterShape
        Workers, threads and memory limit the plan is for.
    design : dict
        The design (``design.describe()``), who chose it, and its plan's counts.
    graph : dict
        Tasks (segment, merge, input, release), the task count, the design's task
        limit and the scheduler's; the block reads and rows the segments decode.
    bytes_read : int
        Bytes of the input (a segment reading a block another one reads too, or a
        chunk larger than its block, decodes more: ``graph["rows_decoded"]``).
    memory : dict
        Peak resident bytes of one worker and its parts, the limit and what is usable.
    time : dict
        Predicted wall seconds and its parts, and the machine model's source.
    privacy : dict
        epsilon, delta, calibration, sensitivity and sigma of the release.
    accuracy : dict or None
        The utility model's median and 90% sin theta, for a stated spectrum or a pilot.
    notes : tuple of str
        The release's warnings (public quantities only) and what the model leaves out.
    problems : tuple of str
        Why the plan does not fit, what to change and the number it needs (empty: fits).
    """

    input: dict[str, Any]
    cluster: ClusterShape
    design: dict[str, Any]
    graph: dict[str, Any]
    bytes_read: int
    memory: dict[str, Any]
    time: dict[str, Any]
    privacy: dict[str, Any]
    accuracy: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        """Whether the plan fits the cluster (no ``problems``)."""
        return not self.problems

    @property
    def n_tasks(self) -> int:
        """Graph tasks the scheduler carries (the exact sum's and the release)."""
        return int(self.graph["n_tasks"])

    @property
    def wall_seconds(self) -> float:
        """Predicted wall time of the fit, in seconds."""
        return float(self.time["wall_seconds"])

    @property
    def peak_worker_bytes(self) -> int:
        """Predicted peak resident memory of one worker, in bytes."""
        return int(self.memory["peak_bytes"])

    def describe(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict."""
        return {
            "input": self.input,
            "cluster": self.cluster.describe(),
            "design": self.design,
            "graph": self.graph,
            "bytes_read": self.bytes_read,
            "memory": self.memory,
            "time": self.time,
            "privacy": self.privacy,
            "accuracy": self.accuracy,
            "notes": list(self.notes),
            "fits": self.fits,
            "problems": list(self.problems),
        }

    def to_json(self) -> str:
        """:meth:`describe` as JSON text."""
        return json.dumps(self.describe(), indent=2)

    def __str__(self) -> str:
        return fit_plan_text(self)


def plan_fit(
    records: Records,
    *,
    design: str | Design,
    spatial_sign: SpatialSign,
    target: PrivacyTarget,
    n_components: int,
    shape: ClusterShape,
    machine: MachineModel,
    spectrum: ArrayLike | None = None,
    df: float | None = None,
    sampler: NoiseSampler | None = None,
) -> FitPlan:
    """The plan of a fit of ``records`` on a cluster of ``shape`` (public inputs only).

    Parameters
    ----------
    records : Records
        The opened input (:func:`dask_dppca.io.records.open_records`: metadata only).  Its n
        must be known (a dask DataFrame's is counted on a cluster: not planned).
    design, spatial_sign, target, n_components
        The estimator's parameters, checked.
    shape : ClusterShape
        The cluster (:func:`dask_dppca.compute.shape.cluster_shape`).
    machine : MachineModel
        Rates of the machine (:func:`dask_dppca.planning.machine.load_machine_model`).
    spectrum : array_like, optional
        Eigenvalues of the scatter matrix, stated or from a public pilot: the expected
        accuracy is then predicted.
    df : float, optional
        The law of the utility model (multivariate t; None: Gaussian).
    sampler : NoiseSampler, optional
        The sampler the fit will draw with (its corrections move sigma); default
        :func:`~dask_dppca.privacy.mechanisms.contract.make_sampler`'s, a real release's.

    Raises
    ------
    ValueError
        For an input of unknown n, or when the design's task limit refuses the plan
        (:func:`dask_dppca.design.check_task_count`, naming what to change).
    """
    n, d = _known_shape(records)
    threads = shape.n_threads
    chosen, plan = plan_blocks(n, d, records.row_chunks, design, threads)
    blocks = records.blocks(plan.block_sizes)  # lazy: the read tasks, no read
    layout = graph_layout(blocks, plan, threads, shape.worker_tasks)
    sampler = sampler or make_sampler("gaussian", n_entries=d * (d + 1) // 2)
    mechanism = ReleaseMechanism.plan_release(chosen, plan, spatial_sign, target, sampler)
    storage, codec = _storage_and_codec(records, blocks)
    itemsize = int(np.dtype(records.dtype).itemsize)
    memory = _memory(plan, layout, shape, machine, itemsize, records)
    timing = _time(plan, layout, shape, machine, d * itemsize, storage, codec)
    graph = _graph(plan, layout, n, d, threads)
    accuracy = (
        None
        if spectrum is None
        else _accuracy(spectrum, n_components, spatial_sign, df, n, target, mechanism, plan)
    )
    return FitPlan(
        input=_input(records, n, d, storage, codec),
        cluster=shape,
        design={**_design(chosen, design, plan), "n_samples": n, "n_features": d},
        graph=graph,
        bytes_read=n * d * itemsize,
        memory=memory,
        time=timing,
        privacy=_privacy(target, mechanism),
        accuracy=accuracy,
        notes=tuple(_notes(plan, layout, n, spatial_sign, mechanism)),
        problems=tuple(_problems(chosen, plan, shape, memory, graph, timing, machine, d)),
    )


def _known_shape(records: Records) -> tuple[int, int]:
    """``(n, d)`` of the records; a ValueError when n is counted only on a cluster."""
    n, d = records.shape
    if records.frame is not None or n != n:
        raise ValueError(
            "X: a dask DataFrame's number of records is counted on the cluster; plan its "
            "dask array with known chunk sizes instead (to_dask_array(lengths=True))"
        )
    return int(n), int(d)


def _input(records: Records, n: int, d: int, storage: str, codec: str) -> dict[str, Any]:
    """The input's public metadata: location or type, shape, dtype, chunks, storage, codec."""
    return {
        "location": records.location,
        "type": records.input_type,
        "shape": [n, d],
        "dtype": str(records.dtype),
        "row_chunks": _chunks(records.row_chunks),
        "storage": storage,
        "codec": codec,
    }


def _design(chosen: Design, design: str | Design, plan: DesignPlan) -> dict[str, Any]:
    """The design (its description, who chose it) and its plan's counts and blocks."""
    return {
        **chosen.describe(),
        "chosen_by": design if isinstance(design, str) else "given",
        **plan.describe(),
        "block_rows": max(plan.block_sizes),
    }


def _privacy(target: PrivacyTarget, mechanism: ReleaseMechanism) -> dict[str, Any]:
    """What the release spends and adds: epsilon, delta, calibration, sensitivity, sigma."""
    return {
        "epsilon": target.epsilon,
        "delta": target.delta,
        "calibration": target.calibration,
        "sensitivity": mechanism.sensitivity,
        "sigma": mechanism.sigma,
    }


def _graph(plan: DesignPlan, layout: GraphLayout, n: int, d: int, threads: int) -> dict[str, Any]:
    """The graph's tasks (and the release's), the task limits, the reads and rows decoded."""
    return {
        "segment_tasks": layout.n_segments,
        "worker_tasks": len(layout.worker_tasks),
        "worker_task_threads": None if layout.batch is None else layout.batch.threads,
        "worker_task_sums": None if layout.batch is None else layout.batch.sums,
        "block_pair_tasks": len(plan.tasks()),
        "merge_tasks": layout.merge_tasks,
        "input_tasks": layout.input_tasks,
        "release_tasks": 1,
        "n_tasks": layout.n_tasks + 1,  # and the release task
        "reads_in_tasks": layout.reads_in_tasks,
        "block_reads": layout.block_reads,
        "rows_decoded": sum(layout.task_rows),
        "task_limit": task_limit(n, d, threads, plan.n_pairs),
        "scheduler_task_limit": SCHEDULER_TASK_LIMIT,
    }


def _notes(
    plan: DesignPlan,
    layout: GraphLayout,
    n: int,
    spatial_sign: SpatialSign,
    mechanism: ReleaseMechanism,
) -> list[str]:
    """The release's warnings (public quantities only) and what the reads decode beyond
    the store, when chunks larger than the blocks or blocks shared by segments make them.
    """
    d = plan.n_features
    notes = [
        message
        for _, message in release_warnings(
            n, d, spatial_sign.bound, mechanism.sigma, mechanism.delta
        )
    ]
    decoded = sum(layout.task_rows)
    if layout.reads_in_tasks and layout.rows_per_read > max(plan.block_sizes):
        notes.append(
            f"the store's chunks are larger than the design's blocks: the reads decode "
            f"{decoded / n:.3g}x the store (a chunk is decoded whole for each block it "
            f"holds; chunks of {plan.block_sizes[0]} rows would decode it once per read)"
        )
    elif layout.reads_in_tasks and layout.block_reads > 1.5 * len(plan.block_sizes):
        notes.append(
            f"each task reads the blocks it uses: {layout.block_reads} reads of "
            f"{len(plan.block_sizes)} blocks ({decoded / n:.3g}x the store)"
        )
    return notes


def _chunks(row_chunks: tuple[int, ...] | None) -> dict[str, int] | None:
    if row_chunks is None:
        return None
    return {"count": len(row_chunks), "largest": max(row_chunks)}


def _storage_and_codec(records: Records, blocks: Any) -> tuple[str, str]:
    """Where the blocks are read from ("memory", "local", a URL's protocol) and the codec."""
    reader = chunk_reader(records.array) or chunk_reader(blocks)
    if reader is None and records.input_type in TABLE_TYPES:  # read in its own tasks
        return storage_kind(records.location or ""), TABLE_TYPES[records.input_type]
    if reader is None:
        return "memory", "none"
    location = records.location or ""
    storage = storage_kind(location)
    compressors = getattr(reader.array, "compressors", ()) or ()
    names = [type(c).__name__.lower().removesuffix("codec") for c in compressors]
    return storage, "+".join(names) or "none"


def _memory(
    plan: DesignPlan,
    layout: GraphLayout,
    shape: ClusterShape,
    machine: MachineModel,
    itemsize: int,
    records: Records,
) -> dict[str, Any]:
    """A worker's peak resident bytes: docs/operations.md's "Memory on the workers" as a number.

    Baseline (an idle worker), then per running thread: the blocks its segment holds and
    the kernel's prepared copy of a group's blocks, the read buffer, the kernel's tile
    scratch and its group's d x d block-pair sums
    (:func:`~dask_dppca.graph.worker_tasks.thread_bytes`); then the exact sums: a segment
    task's running sum and its copy, or a worker task's shared sums and its merged total;
    and the exact sums of the tasks the worker has finished, waiting for their merge.
    """
    d = plan.n_features
    exact_sum = exact_sum_bytes(d)
    buffer = read_buffer_bytes(plan, layout.rows_per_read, itemsize) if layout.reads_in_tasks else 0
    per_thread = thread_bytes(plan, layout.held_blocks, layout.blocks_per_task, buffer)
    tasks_per_worker = math.ceil(layout.n_kernel_tasks / shape.workers)
    if layout.batch is not None:  # worker tasks: threads share a few sums
        running, per_task = layout.batch.threads, per_thread
        sums = (layout.batch.sums + 1) * exact_sum
    else:  # a segment task a thread, each with its sum and the sum's copy
        running = min(shape.threads_per_worker, layout.n_segments)
        per_task, sums = per_thread + 2 * exact_sum, 0
    # An in-process worker (the embedded cluster's) shares this process and its input.
    in_process = isinstance(records.source, np.ndarray) and shape.in_process
    parts = {
        "baseline": machine.worker_baseline_bytes,
        "tasks": running * per_task + sums,
        "segment_sums": tasks_per_worker * exact_sum,
        "input_in_process": records.source.nbytes if in_process else 0,
    }
    peak = int(sum(parts.values()))
    pause = pause_fraction()
    usable = None if shape.memory_limit is None else int(shape.memory_limit * pause)
    return {
        "peak_bytes": peak,
        "parts": parts,
        "per_task_bytes": per_task,
        "block_bytes": 8 * max(plan.block_sizes) * d,
        "running_tasks": running,
        "shared_sums": 0 if layout.batch is None else layout.batch.sums,
        "segments_per_worker": tasks_per_worker,
        "held_blocks": layout.held_blocks,
        "memory_limit": shape.memory_limit,
        "pause_fraction": pause,
        "usable_bytes": usable,
    }


def _time(
    plan: DesignPlan,
    layout: GraphLayout,
    shape: ClusterShape,
    machine: MachineModel,
    row_bytes: int,
    storage: str,
    codec: str,
) -> dict[str, Any]:
    """Predicted wall seconds: the segments' pair work and reads spread over the threads
    (longest segments first onto the least loaded thread), the tasks' own cost on the
    scheduler, and the fit's fixed cost.
    """
    rate = machine.pair_rate(plan.n_features)
    read_rate, read_key = machine.read_rate(storage, codec)
    work, reads = modelled_seconds(plan, layout, machine, row_bytes, storage, codec)
    threads = shape.n_threads
    segment_seconds = [sum(work[a:b]) for a, b in layout.segments]
    if layout.batch is not None:  # a worker task: its segments on its threads, then its reads
        span = makespan(
            [
                makespan(segment_seconds[a:b], layout.batch.threads) + r / layout.batch.threads
                for (a, b), r in zip(layout.worker_tasks, reads)
            ],
            shape.workers,
        )
    else:
        span = makespan([s + r for s, r in zip(segment_seconds, reads)], threads)
    tasks = layout.n_tasks + 1
    task_seconds = tasks * machine.task_seconds
    fixed = machine.fixed_seconds + machine.storage_seconds.get(storage, 0.0)
    wall = fixed + span + task_seconds
    return {
        "wall_seconds": wall,
        "pair_seconds": sum(work) / threads,
        "read_seconds": sum(reads) / threads,
        "makespan_seconds": span,
        "task_seconds": task_seconds,
        "fixed_seconds": fixed,
        "pairs_per_second_per_core": rate,
        "read_bytes_per_second": read_rate,
        "read_rate_of": read_key,
        "machine_model": machine.source,
    }


def modelled_seconds(
    plan: DesignPlan,
    layout: GraphLayout,
    machine: MachineModel,
    row_bytes: int,
    storage: str,
    codec: str,
) -> tuple[list[float], list[float]]:
    """The machine model's seconds of each block-pair group's work, and of each kernel
    task's reads: ``(work per group, reads per task)``.

    A group: its record pairs at the kernel's rate, a kernel call a block pair and the
    row cost of its blocks' rows.  A task reading inside (a segment, or a worker task
    reading each block once for its segments): the chunk rows it decodes at the read
    rate and a read's fixed cost a block; otherwise the input's own tasks read every
    block once, spread like the work (a segment's share).
    """
    rate = machine.pair_rate(plan.n_features)
    read_rate, read_key = machine.read_rate(storage, codec)
    sizes = plan.block_sizes
    call = machine.kernel_call_seconds
    per_row = machine.row_cost(plan.n_features)
    work = [
        sum(sizes[i] * (sizes[i] - 1) // 2 if i == j else sizes[i] * sizes[j] for i, j in task)
        / rate
        + call * len(task)
        + per_row * sum(sizes[i] if i == j else sizes[i] + sizes[j] for i, j in task)
        for task in plan.tasks()
    ]
    request = machine.read_call(read_key)
    if layout.reads_in_tasks:
        reads = [
            rows * row_bytes / read_rate + request * blocks
            for rows, blocks in zip(layout.task_rows, layout.task_reads)
        ]
    else:
        whole = plan.n_samples * row_bytes / read_rate + len(sizes) * request
        reads = [whole * (b - a) / len(work) for a, b in layout.segments]
    return work, reads


def makespan(seconds: list[float], threads: int) -> float:
    """Wall seconds of tasks spread over ``threads``: longest first onto the least loaded
    thread (a task runs on one thread).

    Parameters
    ----------
    seconds : list of float
        Each task's seconds (a segment's work and reads).
    threads : int
        The threads they run on.

    Returns
    -------
    float
        The most seconds one thread is loaded with.
    """
    loads = [0.0] * max(1, min(threads, len(seconds)))
    heapq.heapify(loads)
    for s in sorted(seconds, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + s)
    return max(loads)


def _problems(
    design: Design,
    plan: DesignPlan,
    shape: ClusterShape,
    memory: dict[str, Any],
    graph: dict[str, Any],
    timing: dict[str, Any],
    machine: MachineModel,
    d: int,
) -> list[str]:
    """Why the plan does not fit, each with what to change and the number it needs."""
    problems = []
    usable, peak = memory["usable_bytes"], memory["peak_bytes"]
    if usable is not None and peak > usable:
        need = math.ceil(peak / memory["pause_fraction"])
        fixed = memory["parts"]["baseline"] + memory["parts"]["input_in_process"]
        others = peak - fixed - memory["parts"]["tasks"]
        per_task = memory["per_task_bytes"]
        fit_threads = int((usable - fixed - others) // per_task) if per_task else 0
        advice = [
            f"a memory limit of at least {format_bytes(need, up=True)} per worker (--memory-limit)"
        ]
        if 1 <= fit_threads < shape.threads_per_worker:
            advice.append(f"at most {fit_threads} thread(s) per worker (--threads)")
        if isinstance(design, RegularDesign):
            scalable = peak - fixed
            room = usable - fixed
            if room > 0 and scalable > 0:
                tile = tile_rows_for_budget(256 * 2**20, d)
                rows = int(max(plan.block_sizes) * room / scalable) // tile * tile
                if rows >= 2:
                    advice.append(
                        f"blocks of at most {rows} rows "
                        f"(RegularDesign(k=..., block_size={rows}), --block-size)"
                        if isinstance(design, RegularDesign)
                        else f"a regular design with blocks of at most {rows} rows "
                        "(design='auto' on more threads, or --design regular)"
                    )
        problems.append(
            f"memory: a worker would need {format_bytes(peak)} at its peak, above the "
            f"{format_bytes(usable)} it may use ({format_bytes(shape.memory_limit)} memory "
            f"limit x Dask's pause fraction {memory['pause_fraction']:g}); use "
            + ", or ".join(advice)
        )
    limit = graph["scheduler_task_limit"]
    if graph["n_tasks"] > limit:
        factor = graph["n_tasks"] / limit
        rows = math.ceil(max(plan.block_sizes) * factor)
        change = (
            f"blocks of at least {rows} rows (RegularDesign(k={design.k}, block_size={rows}))"
            if isinstance(design, RegularDesign)
            else "design='auto' or a RegularDesign with larger blocks"
        )
        problems.append(
            f"scheduler: the graph has {graph['n_tasks']} tasks, above the {limit} a "
            f"scheduler should carry ({graph['n_tasks'] * machine.task_seconds:.0f} s of "
            f"scheduling at {machine.task_seconds * 1e3:.2g} ms a task); use {change}"
        )
    return problems


def _accuracy(
    spectrum: ArrayLike,
    n_components: int,
    spatial_sign: SpatialSign,
    df: float | None,
    n: int,
    target: PrivacyTarget,
    mechanism: ReleaseMechanism,
    plan: DesignPlan,
) -> dict[str, Any]:
    """The utility model's median and 90% sin theta at the release's sigma (a note for a
    spatial sign it does not cover).
    """
    from .utility import UtilityModel

    if spatial_sign.name not in ("sphere", "winsor"):
        return {"note": f"the utility model covers sphere and winsor, not {spatial_sign.name!r}"}
    model = UtilityModel(
        spectrum,
        n_components,
        spatial_sign.name,
        spatial_sign.radius,
        df=df,
        n_triples=20_000,
    )
    pairs = None if plan.n_pairs == n * (n - 1) // 2 else plan.n_pairs
    quantiles = {
        f"sin_theta_p{int(p * 100)}": model.quantile(
            n, target.epsilon, target.delta, p, sigma=mechanism.sigma, n_pairs=pairs
        )
        for p in (0.5, 0.9)
    }
    return {**quantiles, "gap": model.gap, "model": "UtilityModel (first order, constants 1)"}
