"""The stage contract: what one stage of a private analysis declares and how it runs.

A stage (:class:`Stage`) is one release of an analysis: the directions, the scree, the
score map, the coordinate-wise median, or one of your own.  A stage object holds its own
parameters (``ScreeStage(methods=("clipped",))``); :func:`~dask_dppca.analysis.run.analyze`
binds each to what the analysis shares (:meth:`Stage.bound`: the seed, the groups, the
compute options), orders them by the stages each runs after (``Stage.after``), splits
the total over every stage's parts (:meth:`Stage.planned_parts`: public parameters only),
reserves them all in one transaction, and then runs each stage in turn from a typed
:class:`StageContext` to a :class:`StageOutput` (its released value and its rows of the
privacy table).  :func:`~dask_dppca.analysis.plan.plan_analysis` asks each stage for its
plan (:meth:`Stage.plan`: passes, tasks, time, memory); the command line and the report
print each further release with :meth:`Stage.summary`.  Neither the analysis nor its plan
names a stage: a new stage is a class (subclass :class:`StageBase` for the defaults) and,
to be listed by the command line and the app, an entry in the registry of
:mod:`dask_dppca.analysis.stages`.

CONTRIBUTING.md's "Adding a private statistic" walks through adding one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..compute.target import ComputeTarget
from ..privacy.budget.charging import reserve_release
from ..privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ..privacy.mechanisms.charges import PartsCharge

__all__ = [
    "PlanSetting",
    "Stage",
    "StageBase",
    "StageContext",
    "StageOutput",
    "StagePlan",
    "StageSetup",
    "claim_stage_parts",
    "counts_plan",
    "ordered",
    "release_row",
    "row_pass_plan",
    "row_runs",
    "stage_accuracy",
    "stage_after",
    "stage_bound",
    "stage_meta",
    "stage_plan",
    "stage_share",
    "stage_summary",
    "stage_title",
]

#: The stages a stage runs after by default (when they run): the scale changes what
#: every later stage reads, the directions are what most of them read.
DEFAULT_AFTER = ("scale", "directions")


@dataclass(frozen=True)
class StageContext:
    """What a stage reads and where it releases: public values and lazy data only.

    Parameters
    ----------
    records : Records
        The input (:class:`~dask_dppca.io.records.Records`): the directions' fit reads it.
    blocks : dask.array.Array, shape (n, d)
        The rows in the directions' blocks (one chunk per block of ``block_sizes``).
    pass_blocks : callable
        The rows for one pass in a few tasks a thread (rows in memory: ``blocks``).
    block_sizes, block_pairs : tuple
        The directions' public plan (the scree's U-statistic follows its design).
    directions : ndarray, shape (k, d), optional
        The released directions (None while the directions stage runs).
    split : BudgetSplit
        The analysis's split of the total: each stage reads its own parts from it.
    target : ComputeTarget
        The compute target every stage shares; its release options (trusted worker,
        progress) are bound to it.
    analysis_id, stage_id : str
        The analysis and the ledger's id of this stage's reservation.
    dataset : str
        The input's public name (for the ledger).
    n_samples, n_features : int
        Public.
    random_state : int, optional
        NOT PRIVATE: seeds the stage's noise, for tests and examples only.
    source : object, optional
        The input as given to ``analyze`` (public metadata: its column names).
    """

    records: Any
    blocks: Any
    pass_blocks: Callable[[], Any]
    block_sizes: tuple[int, ...]
    block_pairs: Any
    directions: np.ndarray | None
    split: BudgetSplit
    target: ComputeTarget
    analysis_id: str
    stage_id: str
    dataset: str
    n_samples: int
    n_features: int
    random_state: int | None = None
    source: Any = None

    @property
    def released_directions(self) -> np.ndarray:
        """The released directions (a stage after the directions reads them)."""
        if self.directions is None:
            raise RuntimeError("the directions are not released yet")
        return self.directions


@dataclass
class StageOutput:
    """A stage's release: its value (released or public only) and its privacy-table rows.

    ``rereads``, when a stage changes what the later stages read (the scale stage), maps
    the records to the records they read instead (a function of released values only,
    applied inside every later block read: :meth:`~dask_dppca.io.records.Records.scaled`).
    ``directions``, when a stage releases the directions, is what every later stage reads
    as ``StageContext.directions``; ``meta`` joins the result's ``meta`` (public).
    """

    value: Any
    rows: list[dict[str, Any]]
    rereads: Callable[[Any], Any] | None = None
    directions: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageSetup:
    """What every stage of one analysis shares, bound before anything is planned.

    Parameters
    ----------
    random_state : int, optional
        NOT PRIVATE: the analysis's seed of every noise draw (tests and examples only).
    groups : array-like, optional
        One label per row (resolved from ``analyze(groups=...)``); ``True`` when planning
        (the plan reads whether there are groups, never the labels).
    compute : Compute, optional
        The analysis's compute options (:class:`~dask_dppca.analysis.options.Compute`).
    planning : bool, default False
        Bound for :func:`~dask_dppca.analysis.plan.plan_analysis` (stand-ins, nothing read).
    """

    random_state: int | None = None
    groups: Any = None
    compute: Any = None
    planning: bool = False


@dataclass(frozen=True)
class PlanSetting:
    """What every stage's plan reads: the directions' fit plan and the machine (public).

    Parameters
    ----------
    fit : FitPlan
        The directions' fit plan (:class:`~dask_dppca.planning.fit_plan.FitPlan`): the
        cluster, the input, the memory, and the design every stage follows.
    design : object
        The design plan the fit's plan was made from (block sizes and pairs, n and d).
    in_memory : bool
        Whether the rows are in memory (a pass then reads the fit's blocks).
    model : MachineModel
        The machine model's rates.
    itemsize : int
        Bytes of one value of the input.
    n_components : int
        k.
    split : BudgetSplit
        The analysis's split (each stage's mechanisms at their share: their public
        work, such as a quantile scan's noise draws).
    """

    fit: Any
    design: Any
    in_memory: bool
    model: Any
    itemsize: int
    n_components: int
    split: Any


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
        What the figures count (public): the plan text's line for the stage.
    facts : dict
        Further public facts the plan records (the scree's ``scree_design``).
    """

    stage: str
    passes: int
    tasks: int
    segment_tasks: int
    seconds: float
    peak_bytes: int
    detail: str
    facts: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def describe(self) -> dict[str, Any]:
        """The stage as a JSON-ready dict."""
        return {k: v for k, v in self.__dict__.items() if k != "facts"}


@runtime_checkable
class Stage(Protocol):
    """One stage of a private analysis.

    A stage object needs only ``name``, :meth:`planned_parts` and :meth:`run`; the other
    members have defaults (:class:`StageBase`'s, read through :func:`stage_bound`,
    :func:`stage_after`, :func:`stage_plan`, :func:`stage_summary`, :func:`stage_title`
    and :func:`stage_share`), so a stage written before them still runs.  Two more
    members are optional: ``meta()`` (its public parameters for the result's ``meta``:
    :func:`stage_meta`) and ``accuracy(split, n, d)`` (:func:`stage_accuracy`).

    Attributes
    ----------
    name : str
        The key of its parts in the split, the ledger and ``--split`` (``"scree"``); a
        registered stage's name is its registry entry's.
    after : tuple of str
        The stages it runs after, when they run (default: the scale and the directions).
    title : str
        What a reader calls it (default: its registry entry's title, else its name).
    default_share : float
        Its share of the total when the user gives none (default: its registry entry's;
        a stage of your own names its own, or the analysis needs ``split``).
    """

    name: str
    after: tuple[str, ...]
    title: str
    default_share: float

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """Its parts before the split scales them, from public parameters only."""
        ...

    def bound(self, setup: StageSetup) -> Stage:
        """The stage that runs in one analysis: this one bound to what it shares."""
        ...

    def plan(self, setting: PlanSetting) -> StagePlan:
        """Its passes, tasks, time and memory, from public metadata only."""
        ...

    def run(self, context: StageContext) -> StageOutput:
        """Claim its reservation, release, and return what it released."""
        ...

    def summary(self, value: Any, feature_names: Sequence[str] | None = None) -> str:
        """Its released value in a few lines (post-processing, free)."""
        ...


class StageBase:
    """Defaults of the :class:`Stage` members a stage may leave out (subclass it).

    A subclass sets ``name`` and defines ``planned_parts`` and ``run``; it runs
    after the scale and the directions, binds the analysis's seed to a ``random_state``
    field if it has one, is planned as one pass over the rows, and is summarised as its
    value's text.
    """

    name: str
    after: tuple[str, ...] = DEFAULT_AFTER

    @property
    def title(self) -> str:
        """Its registry entry's title, else its name."""
        return str(_registered(self.name, "title", self.name))

    @property
    def default_share(self) -> float:
        """Its registry entry's default share, else 0 (then ``split`` must name it)."""
        return float(_registered(self.name, "default_share", 0.0))

    def bound(self, setup: StageSetup) -> Any:
        """A copy with the analysis's seed (a dataclass with ``random_state``), else itself."""
        names = {f.name for f in dataclasses.fields(self)} if dataclasses.is_dataclass(self) else ()
        if "random_state" in names:
            return dataclasses.replace(self, random_state=setup.random_state)  # type: ignore[type-var]
        return self

    def plan(self, setting: PlanSetting) -> StagePlan:
        """One pass over the rows, reading and counting every column."""
        return row_pass_plan(self.title, setting)

    def summary(self, value: Any, feature_names: Sequence[str] | None = None) -> str:
        """Its value as text."""
        return str(value)

    def meta(self) -> dict[str, Any]:
        """Its public parameters for the result's ``meta`` (recorded before it runs)."""
        return {}


def _registered(name: str, attribute: str, default: Any) -> Any:
    """An attribute of the registered stage ``name``, or ``default`` for one of your own."""
    from .stages import REGISTRY

    for info in REGISTRY:
        if info.name == name:
            return getattr(info, attribute)
    return default


def stage_title(stage: Any) -> str:
    """A stage's title (``Stage.title``, else its registry entry's, else its name)."""
    title = getattr(stage, "title", None) or _registered(stage.name, "title", stage.name)
    return str(title)


def stage_share(stage: Any) -> float:
    """A stage's default share (``Stage.default_share``, else its registry entry's)."""
    share = getattr(stage, "default_share", None)
    return float(_registered(stage.name, "default_share", 0.0) if share is None else share)


def stage_meta(stage: Any) -> dict[str, Any]:
    """A stage's public parameters for the result's ``meta`` (its ``meta()``, else none)."""
    meta = getattr(stage, "meta", None)
    return {} if meta is None else dict(meta())


def stage_after(stage: Any) -> tuple[str, ...]:
    """The stages ``stage`` runs after, when they run (``Stage.after``)."""
    return tuple(getattr(stage, "after", DEFAULT_AFTER))


def stage_bound(stage: Any, setup: StageSetup) -> Any:
    """``stage`` bound to the analysis (:meth:`Stage.bound`; a stage without it as it is)."""
    bound = getattr(stage, "bound", None)
    return stage if bound is None else bound(setup)


def stage_plan(stage: Any, setting: PlanSetting) -> StagePlan:
    """A stage's plan (:meth:`Stage.plan`; without it: one pass over the rows)."""
    plan = getattr(stage, "plan", None)
    return row_pass_plan(stage_title(stage), setting) if plan is None else plan(setting)


def stage_summary(stage: Any, value: Any, feature_names: Sequence[str] | None = None) -> str:
    """A released value's summary (:meth:`Stage.summary`; without it: its text)."""
    summary = getattr(stage, "summary", None)
    return str(value) if summary is None else str(summary(value, feature_names))


def ordered(stages: Sequence[Any]) -> list[Any]:
    """``stages`` in the order they run: each after the stages it names in
    ``Stage.after`` (those that run), else in the order given.
    """
    names = {stage.name for stage in stages}
    if len(names) != len(stages):
        raise ValueError(f"stages: each stage at most once, got {[s.name for s in stages]}")
    left, done = list(stages), []
    while left:
        ready = [s for s in left if all(a in done or a not in names for a in stage_after(s))]
        if not ready:
            raise ValueError(f"stages: {[s.name for s in left]} each run after another")
        left.remove(ready[0])
        done.append(ready[0].name)
    order = {name: i for i, name in enumerate(done)}
    return sorted(stages, key=lambda s: order[s.name])


def stage_accuracy(stage: Any, split: BudgetSplit, n_samples: int, n_features: int) -> Any:
    """A stage's public accuracy statement (its ``accuracy(split, n, d)``), or None.

    A stage whose release can be useless at a small ``n epsilon`` (a private quantile
    whose rank bound reaches its scan's start) says so here, from public values only,
    before anything is reserved: ``{"rank_error_95": ..., "useless": [...]}``.
    """
    accuracy = getattr(stage, "accuracy", None)
    return None if accuracy is None else accuracy(split, n_samples, n_features)


@contextmanager
def claim_stage_parts(context: StageContext, stage: str) -> Iterator[None]:
    """Claim the analysis's reservation of ``stage``'s parts for this stage's releases.

    The analysis reserved every stage's parts together before reading; the stage claims
    its own (charged when the block ends, kept charged if it fails: conservative).
    """
    with reserve_release(
        PartsCharge(context.split.stage_parts(stage)),
        fit_id=context.stage_id,
        dataset=context.dataset,
    ):
        yield


def release_row(stage: str, release: str, described: dict[str, Any], where: str) -> dict[str, Any]:
    """One row of the privacy table from a mechanism's ``describe()`` and where it was drawn."""
    row = {"stage": stage, "release": release, **described, "released_on": where}
    if "sigma" in row:
        row["noise"] = row.pop("sigma")
    elif "scale" in row:
        row["noise"] = row.pop("scale")
    return row


def row_runs(setting: PlanSetting) -> tuple[tuple[int, ...], list[float]]:
    """The runs of rows a pass reads (:func:`~dask_dppca.graph.lanes.pass_block_sizes`, or
    the fit's blocks when the rows are in memory) and each run's seconds to read and prepare.
    """
    from ..graph.lanes import pass_block_sizes

    fit, plan, model = setting.fit, setting.design, setting.model
    d, threads = plan.n_features, fit.cluster.n_threads
    sizes = plan.block_sizes
    runs = sizes if setting.in_memory else pass_block_sizes(sizes, d, threads)
    read_rate, key = model.read_rate(fit.input["storage"], fit.input["codec"])
    seconds = [
        rows * d * setting.itemsize / read_rate + model.read_call(key) + rows * model.row_cost(d)
        for rows in runs
    ]
    return tuple(runs), seconds


def row_pass_plan(
    title: str,
    setting: PlanSetting,
    light_passes: int = 0,
    held_bytes: int = 0,
    detail: str | None = None,
    draws: int = 0,
) -> StagePlan:
    """A stage that reads the rows in runs once, then makes ``light_passes`` light passes
    over two values a row (the score map's scores), holding ``held_bytes`` a worker; its
    releases draw ``draws`` integer noise values on the trusted worker (quantile scans),
    and it pays its fixed cost (``MachineModel.stage_fixed``) once.
    """
    from ..graph.scree import merge_task_count
    from ..planning.fit_plan import makespan

    fit, plan, model = setting.fit, setting.design, setting.model
    runs, read = row_runs(setting)
    threads = fit.cluster.n_threads
    per_pass = len(runs) + merge_task_count(len(runs)) + 1  # and its release
    m = fit.memory
    running = min(m["running_tasks"], len(runs))
    base = m["parts"]["baseline"] + m["parts"]["input_in_process"]
    block = running * 8 * max(runs) * plan.n_features
    once = model.stage_fixed(title) + draws * model.noise_draw_seconds
    peak = int(base + held_bytes + block)
    if not light_passes:
        seconds = makespan(read, threads) + per_pass * model.task_seconds + once
        detail = detail or f"one pass over the rows in {len(runs)} runs"
        return StagePlan(title, 1, per_pass, len(runs), seconds, peak, detail)
    light = [rows * model.row_cost(2) for rows in runs]
    tasks = len(runs) + light_passes * per_pass
    seconds = (
        makespan(read, threads)
        + light_passes * makespan(light, threads)
        + tasks * model.task_seconds
        + once
    )
    return StagePlan(title, 1 + light_passes, tasks, len(runs), seconds, peak, detail or "")


def counts_plan(title: str, setting: PlanSetting, mechanism: Any) -> StagePlan:
    """A stage that counts every column at or below every candidate of ``mechanism``'s
    grid in one pass over the rows, then scans on the trusted worker: its tasks hold
    their counts sparse (16 bytes a row and column, a run's and a merge's:
    ``ExactPositions``), its release the dense counts and their running sums (8 bytes a
    column and candidate, twice), and it draws ``mechanism.planned_draws``.
    """
    d, grid = setting.design.n_features, mechanism.candidates.size
    running = int(setting.fit.memory["running_tasks"])
    sparse = 2 * running * 16 * max(row_runs(setting)[0]) * d
    return row_pass_plan(
        title,
        setting,
        held_bytes=sparse + 2 * d * grid * 8,
        detail=f"one pass counting {d} columns on {grid} candidates, then "
        f"{mechanism.planned_draws:.3g} noise draws of its scans",
        draws=mechanism.planned_draws,
    )
