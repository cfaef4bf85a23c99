"""The plan of a whole analysis before a core turns: each stage's tasks, time and memory,
and the privacy split.

:func:`plan_analysis` answers what :func:`~dask_dppca.analysis.run.analyze` would do, with
its defaults (read from ``analyze``'s own signature, so the two cannot drift apart) and
the same stage objects: the fit that designs the blocks (the directions', a
:class:`~dask_dppca.planning.fit_plan.FitPlan` at their share of the split), then each
stage's own plan from it (:meth:`~dask_dppca.analysis.stage.Stage.plan`: the scree's
passes over the pair sub-design, the score map's passes over the rows, one pass over the
rows for a stage that says nothing more), and the split table the analysis shows (the same
:func:`~dask_dppca.privacy.mechanisms.accounting.split_budget`).  Public metadata only: no
chunk is read, no budget or ledger touched, no cluster started.  No stage is named here.

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
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..planning.fit_plan import FitPlan
from ..planning.formatting import format_bytes, format_seconds
from ..planning.machine import MachineModel, planning_model
from ..privacy.mechanisms.accounting import BudgetSplit
from ..privacy.mechanisms.calibration import validate_privacy_parameters
from ..privacy.notices import groups_advice
from ..validation import integer_at_least
from .options import Compute, analysis_split, bound_stages
from .stage import PlanSetting, StagePlan, StageSetup, stage_accuracy, stage_meta, stage_plan

__all__ = ["AnalysisPlan", "StagePlan", "analyze_defaults", "plan_analysis", "scree_passes"]


def scree_passes(methods: Sequence[str]) -> int:
    """The scree's passes over its pair sub-design
    (:func:`~dask_dppca.analysis.stages.scree.scree_passes`).
    """
    from .stages.scree import scree_passes as passes

    return passes(methods)


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
    accuracy : dict
        The stages' public accuracy statements.
    own_seconds : float
        The analysis's own fixed cost beside its stages' (the split, the reservations,
        the ledger: the machine model's ``stage_seconds["analysis"]``, 0 unmeasured).
    start_seconds : float
        Starting the embedded cluster with a first run's imports and compiled code, when
        the analysis would start it (the machine model's ``start_seconds``), else 0.

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
    own_seconds: float = 0.0
    start_seconds: float = 0.0

    @property
    def wall_seconds(self) -> float:
        """Modelled wall seconds of the whole analysis: its stages (run one after another),
        its own fixed cost and the embedded cluster's start when it would start it.
        """
        return float(sum(s.seconds for s in self.stages) + self.own_seconds + self.start_seconds)

    @property
    def n_tasks(self) -> int:
        """Graph tasks of all stages together."""
        return int(sum(s.tasks for s in self.stages))

    @property
    def peak_worker_bytes(self) -> int:
        """The largest stage's peak resident bytes of one worker."""
        return int(max(s.peak_bytes for s in self.stages))

    @property
    def problems(self) -> list[str]:
        """Why the analysis does not fit the cluster: the directions' fit's problems, and
        each other stage whose peak a worker is over the usable memory (a wide table's
        scale counts, say).
        """
        usable = self.directions.memory["usable_bytes"]
        over = [
            f"the {s.stage} stage needs a peak of {format_bytes(s.peak_bytes)} a worker, "
            f"over the {format_bytes(usable)} usable of the memory limit"
            for s in self.stages
            if s.stage != "directions" and usable is not None and s.peak_bytes > usable
        ]
        return [*self.directions.problems, *over]

    @property
    def fits(self) -> bool:
        """Whether every stage fits the cluster (no ``problems``)."""
        return not self.problems

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
            "own_seconds": self.own_seconds,
            "start_seconds": self.start_seconds,
            "n_tasks": self.n_tasks,
            "peak_worker_bytes": self.peak_worker_bytes,
            "split": self.split.table(),
            "scree_design": self.scree_design,
            "machine_model": self.machine_model,
            "directions": self.directions.describe(),
            "fits": self.fits,
            "problems": self.problems,
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
    stages: Sequence[Any] | None = None,
    groups: Any = None,
    scale: str | None = None,
    compute: Compute | None = None,
    machine: MachineModel | str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit: int | str | None = None,
    **deprecated: Any,
) -> AnalysisPlan:
    """The plan of ``analyze(X, ...)``: each stage's tasks, time and memory, and the split,
    from public metadata only (a parameter left out: ``analyze``'s default).

    Parameters
    ----------
    X, n_components, epsilon, delta, split, stages, scale, compute
        As for :func:`~dask_dppca.analysis.run.analyze` (each stage plans itself:
        :meth:`~dask_dppca.analysis.stage.Stage.plan`).
    groups : array-like, str or bool, optional
        Whether the score map is per group (the labels are never read): its parts then
        hold the noisy group sizes.  With the score map's PUBLIC ``group_domain``
        (``ScoreMapStage(group_domain=...)``) the plan also says whether its groups are too
        many for the budget, and refuses a domain above ``MAX_GROUP_DOMAIN`` (1000)
        labels as ``analyze`` does.
    machine : MachineModel, str or os.PathLike, optional
        The machine model or its file; default :func:`~dask_dppca.planning.machine.planning_model`
        (the saved one, else a calibration kept per machine).
    workers, threads, memory_limit
        The cluster to plan for, as for ``DPPCA.plan``.
    **deprecated
        ``plan_analysis``'s old keywords (``methods=``, ``score_map=``, ``grouped=``,
        ``scheduler=``, ...), each with a :class:`DeprecationWarning` until 0.3.

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
    given = dict(n_components=n_components, epsilon=epsilon, delta=delta)
    given.update(stages=stages, scale=scale)  # type: ignore[arg-type]
    chosen = {**{n: v for n, v in analyze_defaults().items() if n in given}, **_set(given)}
    k = integer_at_least("n_components", chosen["n_components"], 1)
    eps, dlt = validate_privacy_parameters(chosen["epsilon"], chosen["delta"])
    objects, compute, grouped = _planned_objects(stages, compute, groups, deprecated, chosen)
    planned = bound_stages(objects, StageSetup(groups=grouped, compute=compute, planning=True))
    records = compute.opened(X)
    divided = analysis_split(planned, k, records.shape[1], eps, dlt, split)
    model = machine if isinstance(machine, MachineModel) else planning_model(machine)
    cluster = dict(workers=workers, threads=threads, memory_limit=memory_limit)
    setting = _setting(X, k, divided, planned, records, compute, model, cluster)
    plans = tuple(stage_plan(stage, setting) for stage in planned)
    return AnalysisPlan(
        parameters=_parameters(k, divided, planned, given),
        directions=setting.fit,
        stages=plans,
        split=divided,
        split_text=_split_text(divided),
        scree_design=_facts(plans).get("scree_design", {}),
        machine_model=model.source,
        accuracy=_accuracy(planned, divided, records.shape),
        **_fixed_seconds(model, setting),
    )


def _fixed_seconds(model: MachineModel, setting: PlanSetting) -> dict[str, float]:
    """The analysis's own fixed cost, and the embedded cluster's start where it starts."""
    return {
        "own_seconds": model.stage_seconds.get("analysis", 0.0),
        "start_seconds": model.start_seconds if setting.fit.cluster.starts else 0.0,
    }


def _facts(plans: Sequence[StagePlan]) -> dict[str, Any]:
    """The further public facts the stages' plans record (the scree's design)."""
    return {key: value for plan in plans for key, value in plan.facts.items()}


def _set(given: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters given (not None)."""
    return {name: value for name, value in given.items() if value is not None}


def _planned_objects(
    stages: Sequence[Any] | None,
    compute: Compute | None,
    groups: Any,
    old: dict[str, Any],
    chosen: Mapping[str, Any],
) -> tuple[list[Any], Compute, Any]:
    """The stage objects, the compute options and whether the plan is grouped (True or
    None: the labels are never read), its old keywords (``grouped=`` among them) mapped
    onto them with a warning each.
    """
    from .options import chosen_stages

    grouped = old.pop("grouped", None)
    given = {name: value for name, value in old.items() if value is not None}  # None: default
    objects, compute = chosen_stages("plan_analysis", stages, compute, given, chosen["scale"])
    labelled = None if groups is None or groups is False else True
    if grouped is None:
        return objects, compute, labelled
    warnings.warn(
        "plan_analysis(grouped=...) is deprecated and will be removed in 0.3: pass "
        "groups=True (or the labels) and stages=[..., ScoreMapStage(group_domain=...)] instead",
        DeprecationWarning,
        stacklevel=3,
    )
    if grouped is False:
        return objects, compute, labelled
    if not isinstance(grouped, bool) and any(s.name == "score_map" for s in objects):
        objects, _ = chosen_stages("", objects, None, {"group_domain": grouped})
    return objects, compute, True


def _setting(
    X: Any,
    k: int,
    divided: BudgetSplit,
    planned: Sequence[Any],
    records: Any,
    compute: Compute,
    model: MachineModel,
    cluster: dict[str, Any],
) -> PlanSetting:
    """What every stage's plan reads: the plan of the fit that designs the blocks (the
    directions', at the split's mu), the machine, the input's item size.
    """
    designer = next(stage for stage in planned if hasattr(stage, "planned_fit"))
    fit, design = designer.planned_fit(
        X, k, divided, records, scheduler=compute.scheduler, machine=model,
        component=compute.component, storage_options=compute.storage_options,
        allow_fill_values=compute.allow_fill_values, **cluster,
    )  # fmt: skip
    itemsize = int(np.dtype(records.dtype).itemsize)
    return PlanSetting(fit, design, records.in_memory, model, itemsize, k, divided)


def _parameters(
    k: int, divided: BudgetSplit, planned: Sequence[Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """The plan's public parameters: k, the total, each stage's own, which stages run
    (``{name: True}``), whether there are groups, and which took ``analyze``'s defaults.
    """
    names = [stage.name for stage in planned]
    return {
        "n_components": k,
        "epsilon": divided.epsilon,
        "delta": divided.delta,
        **{key: value for stage in planned for key, value in stage_meta(stage).items()},
        **dict.fromkeys(names, True),
        "grouped": any(getattr(stage, "grouped", False) for stage in planned),
        "stages": names,
        "analyze_defaults": sorted(n for n, v in given.items() if v is None),
    }


def _split_text(divided: BudgetSplit) -> str:
    """The split table exactly as ``analyze`` shows it."""
    from .result import privacy_table_text, split_rows

    shown = privacy_table_text(split_rows(divided), ("stage", "release", "guarantee", "parameter"))
    total = f"epsilon={divided.epsilon:g}, delta={divided.delta:g}"
    return f"privacy split of the total ({total}):\n{shown}"


def _accuracy(stages: list[Any], split: BudgetSplit, shape: tuple[int, int]) -> dict[str, Any]:
    """Each quantile stage's public accuracy (its rank bound), when n is known (the
    groups' advice only when the plan was told the group domain: the stage's own say).
    """
    n, d = shape
    if n != n:  # a DataFrame's n is counted on the cluster: stated by the analysis
        return {}
    stated = {}
    for stage in stages:
        accuracy = stage_accuracy(stage, split, int(n), int(d))
        if accuracy is not None:
            stated[stage.name] = accuracy
    return stated


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
        f"{p['epsilon']:g}, delta {p['delta']:g}, stages {', '.join(s.stage for s in plan.stages)}"
        f"{' by group' if p['grouped'] else ''} (analyze's defaults: {defaults})",
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
    if plan.start_seconds:
        what = "the embedded cluster, its first run's imports and compiled code"
        rows.append(("start", "", "", format_seconds(plan.start_seconds), "", what))
    if plan.own_seconds:
        rows.append(("set-up", "", "", format_seconds(plan.own_seconds), "", "split, reservations"))
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
            "fits: yes" if plan.fits else "fits: NO (" + "; ".join(plan.problems) + ")",
            plan.split_text,
            *_accuracy_lines(plan.accuracy, n),
            f"machine model: {plan.machine_model}",
            *directions,
        ]
    )
