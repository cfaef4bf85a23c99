"""The plan of a whole analysis before a core turns: each stage's tasks, time and memory,
and the privacy split.

:func:`plan_analysis` answers what :func:`~dask_dppca.analysis.run.analyze` would do, with
its defaults (read from ``analyze``'s own signature, so the two cannot drift apart):
the directions' fit (a :class:`~dask_dppca.planning.fit_plan.FitPlan` at the directions' share),
the scree's passes over the pair sub-design (the same segments
:mod:`dask_dppca.graph.scree` builds: :func:`~dask_dppca.graph.scree.scree_segments`),
the score map's passes over the rows (runs of
:func:`~dask_dppca.graph.lanes.pass_block_sizes`), and the split table the analysis
shows (the same :func:`~dask_dppca.privacy.mechanisms.accounting.split_budget`).  Public metadata
only: no chunk is read, no budget or ledger touched, no cluster started.

The scree's and the score map's times are a model (the machine model's rates applied to
their work, and the fit's fixed cost once a stage), not measured: a scree pair costs about
what a kernel pair does (a difference and its norms in d), a score map pass about a row's
projection.  On the synchronous scheduler at n = 4 x 10^4, d = 32 (a loaded 2-core
machine, CPU seconds) the directions took 3.4 s against 3.7 modelled, the scree 0.57
against 0.88 (0.58 with one fixed cost), the score map 0.06 against 1.0 (0.4 with one
fixed cost: its light passes cost less than a fit's fixed cost).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ..io.records import open_records
from ..planning.fit_plan import FitPlan, makespan
from ..planning.formatting import format_bytes, format_seconds
from ..planning.machine import MachineModel, planning_model
from ..privacy.mechanisms.accounting import BudgetSplit, split_budget
from ..privacy.mechanisms.calibration import validate_privacy_parameters
from ..privacy.notices import groups_advice
from ..validation import integer_at_least

__all__ = ["AnalysisPlan", "StagePlan", "analyze_defaults", "plan_analysis"]

#: Bins of a scree histogram (the public grid of :mod:`dask_dppca.kernel.scree_stats`).
_SCREE_BINS = 8193
#: The score map's passes over the scores (centre, radius, histograms), after the one
#: that projects the rows (``compute/trusted/score_map.release_score_map``).
SCORE_MAP_PASSES = 3


def analyze_defaults() -> dict[str, Any]:
    """``analyze``'s keyword defaults, read from its signature (k, epsilon, delta,
    methods, score map, ...): a plan of an analysis plans what ``analyze`` would run.
    """
    from .run import analyze

    return {
        name: p.default
        for name, p in inspect.signature(analyze).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


@dataclass(frozen=True)
class StagePlan:
    """One stage of an analysis: its passes over the data, tasks, time and memory.

    Attributes
    ----------
    stage : str
        The stage's title (``"directions"``, ``"scree"``, ``"score map"``, ...).
    passes : int
        Passes over the data (graphs computed one after another).
    tasks : int
        Graph tasks of all its passes together (segments, merges, inputs, releases).
    segment_tasks : int
        The segment (or row-run) tasks of one pass.
    seconds : float
        Modelled wall seconds.
    peak_bytes : int
        Modelled peak resident bytes of one worker.
    detail : str
        What the figures count (public).
    """

    stage: str
    passes: int
    tasks: int
    segment_tasks: int
    seconds: float
    peak_bytes: int
    detail: str

    def describe(self) -> dict[str, Any]:
        """The stage as a JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class AnalysisPlan:
    """What ``analyze`` would do, predicted from public metadata (:func:`plan_analysis`).

    Attributes
    ----------
    parameters : dict
        k, the total epsilon and delta, the methods, the score map's, and which of them
        are ``analyze``'s defaults.
    directions : FitPlan
        The directions' fit at its share of the budget.
    stages : tuple of StagePlan
        Directions, scree and (when planned) score map, in the order they run.
    split : BudgetSplit
        The split of the total, as the analysis makes it.
    split_text : str
        The split table exactly as ``analyze`` shows it (``show_split``).
    scree_design : dict
        ``n_pairs`` and ``max_degree`` of the scree's pair sub-design.
    machine_model : str
        Where the time figures came from (saved, calibrated or built in).

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> from dask_dppca.planning.machine import DEFAULT_MODEL
    >>> plan = dd.plan_analysis(np.zeros((2000, 4)), n_components=2, machine=DEFAULT_MODEL)
    >>> isinstance(plan, dd.AnalysisPlan), plan.n_tasks > 0, plan.wall_seconds > 0
    (True, True, True)
    >>> "privacy split of the total" in plan.split_text
    True
    """

    parameters: dict[str, Any]
    directions: FitPlan
    stages: tuple[StagePlan, ...]
    split: BudgetSplit
    split_text: str
    scree_design: dict[str, int]
    machine_model: str
    accuracy: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_seconds(self) -> float:
        """Modelled wall seconds of the whole analysis (the stages run one after another)."""
        return float(sum(s.seconds for s in self.stages))

    @property
    def n_tasks(self) -> int:
        """Graph tasks of all stages together."""
        return int(sum(s.tasks for s in self.stages))

    @property
    def peak_worker_bytes(self) -> int:
        """The largest stage's peak resident bytes of one worker."""
        return int(max(s.peak_bytes for s in self.stages))

    @property
    def fits(self) -> bool:
        """Whether the directions' fit (the analysis's heaviest stage) fits the cluster."""
        return self.directions.fits

    def stage(self, name: str) -> StagePlan:
        """The stage called ``name``."""
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(f"stage: no stage {name!r} in this plan")

    def describe(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict."""
        return {
            "parameters": self.parameters,
            "stages": [s.describe() for s in self.stages],
            "wall_seconds": self.wall_seconds,
            "n_tasks": self.n_tasks,
            "peak_worker_bytes": self.peak_worker_bytes,
            "split": self.split.table(),
            "scree_design": self.scree_design,
            "machine_model": self.machine_model,
            "directions": self.directions.describe(),
            "fits": self.fits,
            "accuracy": self.accuracy,
        }

    def to_json(self) -> str:
        """:meth:`describe` as JSON text."""
        return json.dumps(self.describe(), indent=2, default=str)

    def __str__(self) -> str:
        return _text(self)


def plan_analysis(
    X: Any,
    n_components: int | None = None,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    split: Mapping[str, float] | None = None,
    methods: Sequence[str] | None = None,
    score_map: bool | None = None,
    grouped: bool | Sequence[Any] = False,
    score_axes: tuple[int, int] | None = None,
    score_methods: Sequence[str] | None = None,
    design: Any = None,
    spatial_sign: str | None = None,
    radius: float | None = None,
    scheduler: Any = None,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit: int | str | None = None,
    machine: MachineModel | str | None = None,
    component: str | None = None,
    storage_options: dict[str, Any] | None = None,
    allow_fill_values: bool = False,
    stages: Sequence[str] | None = None,
    scale: str | None = None,
) -> AnalysisPlan:
    """The plan of ``analyze(X, ...)``: each stage's tasks, time and memory, and the split.

    Reads public metadata only.  Every parameter left out takes ``analyze``'s default
    (:func:`analyze_defaults`).

    Parameters
    ----------
    X, n_components, epsilon, delta, split, methods, score_axes, score_methods, design,
    spatial_sign, radius, scheduler, component, storage_options, allow_fill_values, stages
    scale
        As for :func:`~dask_dppca.analysis.run.analyze`.
    score_map : bool, optional
        Whether the default score map is planned (``analyze``'s default: yes).
    grouped : bool or sequence, default False
        Whether the score map is per group (``groups=`` with a ``group_domain``): the
        split then holds the noisy group sizes.  Or the PUBLIC ``group_domain`` itself:
        the plan then also says whether its groups are too many for the budget (their
        average size below the noise of a group's size), and refuses a domain above
        ``MAX_GROUP_DOMAIN`` (1000) labels as
        ``analyze`` does.
    workers, threads, memory_limit
        The cluster to plan for, as for ``DPPCA.plan``.
    machine : MachineModel, str or os.PathLike, optional
        The machine model or its file; default :func:`~dask_dppca.planning.machine.planning_model`
        (the saved one, else a calibration kept per machine).

    Returns
    -------
    AnalysisPlan

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> from dask_dppca.planning.machine import DEFAULT_MODEL  # built-in times, no calibration
    >>> X = np.zeros((2000, 4))  # only its shape is read
    >>> plan = dd.plan_analysis(X, n_components=2, machine=DEFAULT_MODEL)
    >>> [stage.stage for stage in plan.stages]
    ['directions', 'scree', 'score map']
    >>> plan.parameters["epsilon"], plan.parameters["delta"]
    (3.0, 1e-05)
    """
    from .result import privacy_table_text, split_rows
    from .stages import default_shares
    from .stages.directions import check_spatial_sign
    from .stages.scree import check_methods

    given = {
        "n_components": n_components,
        "epsilon": epsilon,
        "delta": delta,
        "methods": methods,
        "score_map": score_map,
        "score_axes": score_axes,
        "score_methods": score_methods,
        "design": design,
        "spatial_sign": spatial_sign,
        "stages": stages,
        "scale": scale,
    }
    defaults = analyze_defaults()
    chosen = {name: defaults[name] if v is None else v for name, v in given.items()}
    k = integer_at_least("n_components", chosen["n_components"], 1)
    eps, dlt = validate_privacy_parameters(chosen["epsilon"], chosen["delta"])
    scree_methods = check_methods(chosen["methods"])
    check_spatial_sign(chosen["spatial_sign"], radius)
    records = open_records(
        X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
    )
    planned_stages = _planned_stages(chosen, scree_methods, grouped)
    planned = [p for stage in planned_stages for p in stage.planned_parts(k, records.shape[1])]
    names = [stage.name for stage in planned_stages]
    divided = split_budget(eps, dlt, planned, split if split is not None else default_shares(names))
    shown = privacy_table_text(split_rows(divided), ("stage", "release", "guarantee", "parameter"))
    model = machine if isinstance(machine, MachineModel) else planning_model(machine)
    fit = _directions_plan(
        X, k, divided, chosen, radius, scheduler, model,
        dict(workers=workers, threads=threads, memory_limit=memory_limit, component=component,
             storage_options=storage_options, allow_fill_values=allow_fill_values),
    )  # fmt: skip
    design_plan, in_memory, itemsize = _design_plan(records, fit, chosen["design"])
    scree, scree_design = _scree_stage(fit, design_plan, scree_methods, k, model, itemsize)
    plans = [
        (_directions_stage(fit) if name == "directions" else scree)
        if name in ("directions", "scree")  # the others: passes over the rows
        else _row_pass_stage(name, fit, design_plan, in_memory, model, itemsize)
        for name in names
    ]
    return AnalysisPlan(
        parameters={
            "n_components": k,
            "epsilon": eps,
            "delta": dlt,
            "methods": list(scree_methods),
            "score_map": "score_map" in names,
            "grouped": grouped is not False and "score_map" in names,
            "stages": names,
            "analyze_defaults": sorted(n for n, v in given.items() if v is None),
        },
        directions=fit,
        stages=tuple(plans),
        split=divided,
        split_text=f"privacy split of the total (epsilon={eps:g}, delta={dlt:g}):\n{shown}",
        scree_design=scree_design,
        machine_model=model.source,
        accuracy=_accuracy(planned_stages, divided, records.shape, _domain_given(grouped)),
    )


def _domain_given(grouped: bool | Sequence[Any]) -> bool:
    """Whether ``grouped`` is the group domain itself, not just True or False."""
    return not isinstance(grouped, bool)


def _accuracy(
    stages: list[Any], split: BudgetSplit, shape: tuple[int, int], domain_given: bool
) -> dict[str, Any]:
    """Each quantile stage's public accuracy (its rank bound), when n is known; the
    groups' advice only when the plan was given the group domain (not a stand-in).
    """
    from .stage import stage_accuracy

    n, d = shape
    if n != n:  # a DataFrame's n is counted on the cluster: stated by the analysis
        return {}
    stated = {}
    for stage in stages:
        accuracy = stage_accuracy(stage, split, int(n), int(d))
        if accuracy is not None:
            if not domain_given:
                accuracy.pop("groups", None)
            stated[stage.name] = accuracy
    return stated


def _planned_stages(
    chosen: dict[str, Any], methods: Sequence[str], grouped: bool | Sequence[Any]
) -> list[Any]:
    """The stages ``analyze`` would run, as stand-ins that state their parts (nothing read)."""
    from .stages import build_stage, chosen_around_directions
    from .stages.directions import DirectionsStage
    from .stages.score_map import PrivateScoreMapStage
    from .stages.scree import ScreeStage

    planned: list[Any] = [DirectionsStage(), ScreeStage(methods)]
    if chosen["score_map"]:
        # planned_parts reads whether there are labels, never the labels: a stand-in.
        planned.append(
            PrivateScoreMapStage(
                labels=True if grouped is not False else None,
                domain=(None if grouped is False else ("group",) if grouped is True else grouped),
                axes=chosen["score_axes"],
                methods=chosen["score_methods"],
            )
        )
    before, after = chosen_around_directions(chosen["stages"], chosen["scale"])
    return [*map(build_stage, before), *planned, *map(build_stage, after)]


def _directions_plan(
    X: Any,
    k: int,
    divided: Any,
    chosen: dict[str, Any],
    radius: float | None,
    scheduler: Any,
    model: MachineModel,
    options: dict[str, Any],
) -> FitPlan:
    """The directions' fit plan at the split's mu (as ``analyze`` fits them)."""
    from ..decomposition.estimator import DPPCA
    from .stages.directions import directions_target

    mu_dir = divided.part("directions", "directions")
    assert hasattr(mu_dir, "mu")  # the directions' part is Gaussian (as analyze asserts)
    eps_dir, dlt_dir = directions_target(mu_dir.mu, divided.delta / 2.0)
    estimator = DPPCA(
        n_components=k,
        epsilon=eps_dir,
        delta=dlt_dir,
        spatial_sign=chosen["spatial_sign"],
        radius=radius,
        design=chosen["design"],
        scheduler=scheduler,
    )
    plan: FitPlan = estimator.plan(X, machine=model, check=False, **options)
    return plan


def _design_plan(records: Any, fit: FitPlan, design: Any) -> tuple[Any, bool, int]:
    """The design plan the fit's plan was made from (the same :func:`plan_blocks` call),
    whether the rows are in memory, and the input's item size.
    """
    from ..design import plan_blocks

    n, d = fit.input["shape"]
    _, plan = plan_blocks(n, d, records.row_chunks, design, fit.cluster.n_threads)
    return plan, records.in_memory, int(np.dtype(records.dtype).itemsize)


def _directions_stage(fit: FitPlan) -> StagePlan:
    g = fit.graph
    return StagePlan(
        "directions",
        1,
        fit.n_tasks,
        int(g["segment_tasks"]),
        fit.wall_seconds,
        fit.peak_worker_bytes,
        f"{fit.design['n_pairs']:.4g} record pairs over {fit.design['n_blocks']} blocks",
    )


@cache
def _scree_pairs(a: int, b: int, same: bool) -> int:
    """Record pairs of the scree sub-design of one block pair (blocks of ``a``, ``b`` rows)."""
    from ..kernel.scree_stats import scree_design

    return scree_design((a,), ((0, 0),))[0] if same else scree_design((a, b), ((0, 1),))[0]


def scree_passes(methods: Sequence[str]) -> int:
    """The scree's passes over its pair sub-design: the quantiles' histograms, the
    Gaussian means (clipped, winsorized, Huber step 1) together, and each later Huber step.
    """
    from .stages.scree import HUBER_STEPS

    means = any(m in methods for m in ("clipped", "winsorized", "huber"))
    return 1 + int(means) + (HUBER_STEPS - 1 if "huber" in methods else 0)


def _scree_stage(
    fit: FitPlan,
    plan: Any,
    methods: Sequence[str],
    k: int,
    model: MachineModel,
    itemsize: int,
) -> tuple[StagePlan, dict[str, int]]:
    """The scree's passes over the same segments :mod:`dask_dppca.graph.scree` builds."""
    from ..graph.scree import merge_task_count, scree_segments
    from ..kernel.scree_stats import scree_design

    d = plan.n_features
    sizes, threads = plan.block_sizes, fit.cluster.n_threads
    reads = bool(fit.graph["reads_in_tasks"])
    segments = scree_segments(sizes, plan.block_pairs, d, threads, reads)
    n_pairs, degree = scree_design(tuple(sizes), tuple(plan.block_pairs))
    rate, per_row, call = model.pair_rate(d), model.row_cost(d), model.kernel_call_seconds
    storage, codec = fit.input["storage"], fit.input["codec"]
    read_rate, key = model.read_rate(storage, codec)
    seconds = []
    for segment in segments:
        work = 0.0
        for i, j in segment.pairs.tolist():
            pairs = _scree_pairs(sizes[i], sizes[j], i == j)
            rows = sizes[i] if i == j else sizes[i] + sizes[j]
            work += pairs / rate + call + per_row * rows
        if reads:
            rows = int(sum(sizes[b] for b in segment.blocks.tolist()))
            work += rows * d * itemsize / read_rate + model.read_call(key) * len(segment.blocks)
        seconds.append(work)
    if not reads:  # the input's own tasks read every block once, spread like the work
        whole = plan.n_samples * d * itemsize / read_rate
        seconds = [s + whole / len(seconds) for s in seconds]
    passes = scree_passes(methods)
    per_pass = len(segments) + merge_task_count(len(segments)) + 1  # and its release
    if not reads:
        per_pass += int(fit.graph["input_tasks"])
    pass_seconds = makespan(seconds, threads) + per_pass * model.task_seconds
    m = fit.memory
    histograms = 2 * (k + 1) * _SCREE_BINS * 8  # a segment's and a merge's counts
    per_task = (m["held_blocks"] + 2) * m["block_bytes"] + histograms
    running = min(m["running_tasks"], len(segments))
    peak = int(m["parts"]["baseline"] + m["parts"]["input_in_process"] + running * per_task)
    stage = StagePlan(
        "scree",
        passes,
        passes * per_pass,
        len(segments),
        passes * pass_seconds + model.fixed_seconds,  # a stage's fixed cost, once
        peak,
        f"{passes} passes over {n_pairs:.4g} sub-design pairs (64-row sub-blocks)",
    )
    return stage, {"n_pairs": int(n_pairs), "max_degree": int(degree)}


def _row_pass_stage(
    name: str, fit: FitPlan, plan: Any, in_memory: bool, model: MachineModel, itemsize: int
) -> StagePlan:
    """A stage that reads the rows in runs (the score map: a projection then three light
    passes; any other registered stage: one pass reading and counting every column).
    """
    from ..graph.scree import merge_task_count
    from .stages import stage_info

    runs, read = _row_runs(fit, plan, in_memory, model, itemsize)
    threads = fit.cluster.n_threads
    per_pass = len(runs) + merge_task_count(len(runs)) + 1  # and its release
    m = fit.memory
    running = min(m["running_tasks"], len(runs))
    base = m["parts"]["baseline"] + m["parts"]["input_in_process"]
    block = running * 8 * max(runs) * plan.n_features
    if name != "score_map":
        seconds = makespan(read, threads) + per_pass * model.task_seconds + model.fixed_seconds
        detail = f"one pass over the rows in {len(runs)} runs"
        return StagePlan(
            stage_info(name).title, 1, per_pass, len(runs), seconds, int(base + block), detail
        )
    light = [rows * model.row_cost(2) for rows in runs]
    tasks = len(runs) + SCORE_MAP_PASSES * per_pass
    seconds = (
        makespan(read, threads)
        + SCORE_MAP_PASSES * makespan(light, threads)
        + tasks * model.task_seconds
        + model.fixed_seconds  # a stage's fixed cost, once
    )
    scores = 16 * plan.n_samples // max(fit.cluster.workers, 1)  # the persisted (n, 2) scores
    return StagePlan(
        "score map",
        1 + SCORE_MAP_PASSES,
        tasks,
        len(runs),
        seconds,
        int(base + scores + block),
        f"a projection of the rows in {len(runs)} runs, then {SCORE_MAP_PASSES} passes "
        "(centre, radius, histograms)",
    )


def _row_runs(
    fit: FitPlan, plan: Any, in_memory: bool, model: MachineModel, itemsize: int
) -> tuple[tuple[int, ...], list[float]]:
    """The runs of rows a pass reads (:func:`pass_block_sizes`, or the fit's blocks when
    the rows are in memory) and each run's seconds to read and prepare.
    """
    from ..graph.lanes import pass_block_sizes

    d, threads = plan.n_features, fit.cluster.n_threads
    runs = plan.block_sizes if in_memory else pass_block_sizes(plan.block_sizes, d, threads)
    read_rate, key = model.read_rate(fit.input["storage"], fit.input["codec"])
    seconds = [
        rows * d * itemsize / read_rate + model.read_call(key) + rows * model.row_cost(d)
        for rows in runs
    ]
    return tuple(runs), seconds


def _accuracy_lines(accuracy: dict[str, Any], n: Any) -> list[str]:
    """The quantile stages' rank bounds in words; a useless one says analyze refuses it."""
    lines = []
    for name, stated in accuracy.items():
        bound = max(stated["rank_error_95"].values())
        line = (
            f"{name}: each quantile within {bound:.0f} records of its rank "
            f"({bound / float(n):.1%} of n) with 95 % probability"
        )
        if stated["useless"]:
            line += (
                " -- USELESS at this n and share (the release could be any value): "
                "analyze refuses it; raise epsilon or the stage's share"
            )
        lines.append(line)
        advice = groups_advice(stated)
        if advice is not None:
            lines.append(f"{name}: {advice}")
    return lines


def _text(plan: AnalysisPlan) -> str:
    p, f = plan.parameters, plan.directions
    n, d = f.input["shape"]
    where = f.input["location"] or f.input["type"]
    defaults = ", ".join(p["analyze_defaults"]) or "none"
    header = [
        f"analysis plan for {where}: {n} x {d}, k={p['n_components']}, total epsilon "
        f"{p['epsilon']:g}, delta {p['delta']:g}, scree {'+'.join(p['methods'])}, score map "
        f"{'yes' if p['score_map'] else 'no'} (analyze's defaults: {defaults})",
        f"cluster: {f.cluster.workers} worker(s) x {f.cluster.threads_per_worker} thread(s)",
    ]
    rows = [("stage", "passes", "tasks", "time", "peak memory/worker", "what")]
    rows += [
        (
            s.stage,
            str(s.passes),
            str(s.tasks),
            format_seconds(s.seconds),
            format_bytes(s.peak_bytes),
            s.detail,
        )
        for s in plan.stages
    ]
    rows.append(
        (
            "total",
            str(sum(s.passes for s in plan.stages)),
            str(plan.n_tasks),
            format_seconds(plan.wall_seconds),
            format_bytes(plan.peak_worker_bytes),
            "",
        )
    )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    table = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    directions = ["directions' fit at its share:", *("  " + line for line in str(f).splitlines())]
    return "\n".join(
        [
            *header,
            *table,
            plan.split_text,
            *_accuracy_lines(plan.accuracy, n),
            f"machine model: {plan.machine_model}",
            *directions,
        ]
    )
