"""A private PCA analysis under one budget: a loop over the registered stages.

:func:`analyze` reads top to bottom: check every parameter, choose the stages
(:mod:`dask_dppca.analysis.stages`: the directions, the scree, the score map, and any
optional ones asked for), plan every stage's parts and split the total (epsilon, delta)
over them by the public rule (:func:`~dask_dppca.privacy.mechanisms.accounting.split_budget`), show
the split and check that every active budget can pay for the whole analysis before
anything is read; then reserve every stage in one transaction and run the stages in
turn (:class:`~dask_dppca.analysis.stage.Stage`), each one Dask reduction released on
the trusted worker.

The result, :class:`~dask_dppca.analysis.result.PrivateAnalysis`, holds only released
values and public parameters: re-plotting, choosing k, saving and loading never
recompute or spend anything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from ..compute import ClusterTarget, compute_target
from ..compute.budget_config import budgets_to_charge
from ..compute.failures import lost_scheduler
from ..compute.progress import run_progress
from ..compute.trusted.placement import ReleaseOptions, untrusted_warning_given
from ..graph import pass_block_sizes
from ..io import open_records
from ..io.fingerprint import check_unchanged, store_fingerprint
from ..kernel import SpatialSign
from ..privacy.budget.charging import reserve_transaction
from ..privacy.mechanisms.accounting import BudgetSplit, compose, split_budget
from ..privacy.mechanisms.calibration import validate_privacy_parameters
from ..privacy.mechanisms.charges import PartsCharge
from ..privacy.mechanisms.parts import part_to_dict
from ..privacy.notices import NON_FINITE_NOTE, directions_note, groups_advice, release_notices
from ..validation import integer_at_least
from .features import input_feature_names
from .result import PrivateAnalysis, privacy_table_text, pve_topk, split_rows
from .stage import Stage, StageContext, StageOutput, stage_accuracy
from .stages import build_stage, chosen_around_directions, default_shares, stage_info
from .stages.directions import DirectionsStage, check_spatial_sign
from .stages.score_map import PrivateScoreMapStage, resolve_groups
from .stages.scree import ScreeStage

__all__ = ["analysis_split", "analyze", "check_charge", "planned_split"]

logger = logging.getLogger(__name__)


def analyze(
    X: Any,
    n_components: int = 5,
    *,
    epsilon: float = 3.0,
    delta: float = 1e-5,
    split: Mapping[str, float] | None = None,
    methods: Sequence[str] = ("clipped", "winsorized", "huber", "robust"),
    score_map: Stage | bool | None = True,
    groups: Any = None,
    group_domain: Sequence[Any] | None = None,
    score_axes: tuple[int, int] = (0, 1),
    bins: tuple[int, int] | None = None,
    score_methods: Sequence[str] = ("additive",),
    mono: bool = False,
    stages: Sequence[str] = (),
    scale: str = "none",
    design: Any = "auto",
    spatial_sign: str = "sphere",
    radius: float | None = None,
    scheduler: Any = None,
    trusted_worker: str | None = None,
    require_trusted: bool = False,
    random_state: int | None = None,
    progress: bool = False,
    component: str | None = None,
    storage_options: dict[str, Any] | None = None,
    allow_fill_values: bool = False,
    show_split: Callable[[str], Any] | None = None,
) -> PrivateAnalysis:
    """Release a private PCA analysis of ``X`` under ONE total (epsilon, delta).

    Parameters
    ----------
    X : array-like, dask array, Zarr store or path, xarray, dask DataFrame
        As for :meth:`~dask_dppca.decomposition.estimator.DPPCA.fit`.
    n_components : int, default 5
        k, the directions and scree values released.
    epsilon, delta : float
        The total the whole analysis spends (exact composition of all its parts).
    split : mapping of str to float, optional
        Public stage shares (default: each registered stage's, directions 1/2, scree
        1/4, score map 1/4, median 1/10; the shares of the stages that run are
        renormalised).
    methods : sequence of str
        Scree estimators: any of ``"clipped"``, ``"winsorized"``, ``"huber"``,
        ``"robust"`` (the robust one costs nothing beyond the quantiles all need).
    score_map : Stage or bool, default True
        True: the private score map of components ``score_axes``
        (:class:`~dask_dppca.analysis.stages.score_map.PrivateScoreMapStage`); False or
        None: none; or a stage of your own (:class:`~dask_dppca.analysis.stage.Stage`).
        Its parts join the split.
    groups : array-like or str, optional
        One label per row, or the name of a column / variable / array of ``X``
        (:func:`~dask_dppca.analysis.stages.score_map.resolve_groups`): per-group score maps.
    group_domain : sequence, optional
        The PUBLIC labels of ``groups`` (required with it); others count as "other".
    score_axes : (int, int), default (0, 1)
        The components of the score map (0-based).
    bins : (int, int), optional
        The score map's grid; by default one that grows with n epsilon, from public
        parameters only (:func:`~dask_dppca.analysis.stages.score_map.auto_bins`).
    score_methods : sequence of str, default ("additive",)
        The score map's histograms: ``"additive"`` and/or ``"sparse"``.
    mono : bool, default False
        Monotone (non-increasing) post-processing of each method's values.
    stages : sequence of str, default ()
        Optional registered stages to add (:data:`~dask_dppca.analysis.stages.REGISTRY`),
        e.g. ``["median"]``: the private coordinate-wise median.  Their parts join the
        split; their releases are in ``result.stages``.
    scale : {"none", "robust"}, default "none"
        "robust": first release per column a private median (the centre) and a private
        quantile range (the scale: q75 - q25, else q95 - q5, else q99 - q1, else 1), at
        the scale stage's share, and analyse ``(x - centre) / scale``: for a table whose
        columns are in different units (docs/privacy.md, "Private robust scaling").  The
        directions are then unit vectors in the scaled coordinates
        (``result.original_loadings()`` gives them in the original units) and
        ``result.stages["scale"]`` holds the released centre and scale.  "none": the data
        as they are; a notice says when one column carries a whole direction (the mark of
        columns in different units).  Not the default: scaling changes what the
        directions estimate and costs a share of the budget, which data in one unit
        (images, sensors, embeddings) should not pay.
    spatial_sign : {"sphere", "winsor"}, default "sphere"
        The directions' spatial sign (:class:`~dask_dppca.decomposition.estimator.DPPCA`): "sphere"
        estimates the spatial Kendall matrix's eigenvectors (the covariance's for
        elliptical data); "winsor" with a PUBLIC ``radius`` in the data's units (of
        ``(x_i - x_j) / sqrt 2``) counts pairs closer than it with their full
        difference: covariance-like directions on bounded data (docs/method.md).
    radius : float, optional
        The winsorizing radius (``spatial_sign="winsor"``).  Never tune it on the data.
    design, scheduler, trusted_worker, require_trusted, progress, component, storage_options
        As for :class:`~dask_dppca.decomposition.estimator.DPPCA` and its ``fit``.
    random_state : int, optional
        NOT PRIVATE: seeds every noise draw, for tests and examples only.
    allow_fill_values : bool, default False
        As for :meth:`~dask_dppca.decomposition.estimator.DPPCA.fit`: read
        chunks missing from a Zarr store as its fill value (a store written sparsely on purpose).
    show_split : callable, optional
        Called with the split table (text) before anything is read (``print`` shows it).

    Returns
    -------
    PrivateAnalysis

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_t(3, size=(2000, 4))  # any rows
    >>> result = dd.analyze(X, n_components=2, score_map=False, scheduler="threads")
    >>> result.directions.shape
    (2, 4)
    >>> sorted(result.scree["values"])
    ['clipped', 'huber', 'robust', 'winsorized']
    >>> result.meta["composed_epsilon"] <= 3.0  # the default total
    True
    """
    k = integer_at_least("n_components", n_components, 1)
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    sign = check_spatial_sign(spatial_sign, radius)
    fit_parameters = dict(
        spatial_sign=spatial_sign, radius=radius, design=design, trusted_worker=trusted_worker,
        require_trusted=require_trusted, random_state=random_state, progress=progress,
    )  # fmt: skip
    scree = ScreeStage(methods, mono, random_state)
    X, map_stage = _map_stage(
        X, score_map, groups, group_domain, score_axes, bins, score_methods, random_state, component
    )
    chosen = _stages(stages, scale, fit_parameters, scree, map_stage, random_state)
    analysis_id = uuid.uuid4().hex
    records = open_records(  # metadata only
        X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
    )
    divided = analysis_split(chosen, k, records.shape[1], eps, dlt, split)
    n_known, d = records.shape
    stated = {}  # a DataFrame's n is counted on the cluster: checked there
    if n_known == n_known:
        stated = _accurate_enough(chosen, divided, int(n_known), d)  # refused before shown
    budgets = _shown_and_checked(divided, analysis_id, show_split, _advice(stated))
    meta = {
        "analysis_id": analysis_id,
        "epsilon": eps,
        "delta": dlt,
        "shares": divided.shares,
        "scale": divided.scale,
        "composed_epsilon": compose(divided.all_parts).epsilon(dlt),
        "n_components": k,
        "methods": list(scree.methods),
        "private": random_state is None,
        "parts": [part_to_dict(p) for p in divided.all_parts],
        "scaling": "robust" if any(stage.name == "scale" for stage in chosen) else "none",
        "non_finite": NON_FINITE_NOTE,  # the same for every analysis: data-independent
        **_sign_meta(sign),
    }
    released = _Released(chosen, map_stage, meta)
    try:
        _run_stages(
            X, records, chosen, divided, released, analysis_id, budgets, scheduler,
            ReleaseOptions(trusted_worker, require_trusted, progress), storage_options,
            random_state,
        )  # fmt: skip
    except BaseException as error:
        if released.has("directions"):
            _attach_partial(error, released.result(complete=False), released.titles())
        raise
    return released.result(complete=True)


def _advice(stated: Mapping[str, Any]) -> list[str]:
    """Advice from the stages' public accuracy, shown with the split before anything is
    spent: a group domain too large for the budget.
    """
    return [a for a in map(groups_advice, stated.values()) if a is not None]


def _shown_and_checked(
    divided: BudgetSplit,
    analysis_id: str,
    show_split: Callable[[str], Any] | None,
    advice: Sequence[str] = (),
) -> tuple[Any, ...]:
    """Log and show the split (and any ``advice``); every budget this analysis charges,
    each checked for the whole analysis before any cluster starts (resolved once, as a
    fit's: :func:`~dask_dppca.compute.budget_config.budgets_to_charge`).
    """
    shown = privacy_table_text(split_rows(divided), ("stage", "release", "guarantee", "parameter"))
    shown += "".join(f"\nadvice: {line}" for line in advice)
    logger.info("analysis %s: split\n%s", analysis_id, shown)
    if show_split is not None:
        eps, dlt = divided.epsilon, divided.delta
        show_split(f"privacy split of the total (epsilon={eps:g}, delta={dlt:g}):\n{shown}")
    budgets = budgets_to_charge()
    for budget in budgets:
        check_charge(budget, divided)
    return tuple(budgets)


def _stages(
    stages: Sequence[str],
    scale: str,
    fit_parameters: dict[str, Any],
    scree: Stage,
    map_stage: Stage | None,
    random_state: int | None,
) -> list[Stage]:
    """The stages of one analysis, in the order they run."""
    before, after = chosen_around_directions(stages, scale)
    chosen: list[Stage] = [build_stage(name, random_state=random_state) for name in before]
    chosen += [DirectionsStage(fit_parameters), scree]
    chosen += [map_stage] if map_stage is not None else []
    chosen += [build_stage(name, random_state=random_state) for name in after]
    return chosen


def analysis_split(
    chosen: Sequence[Stage],
    k: int,
    d: int,
    epsilon: float,
    delta: float,
    split: Mapping[str, float] | None,
) -> BudgetSplit:
    """Every part of an analysis of ``chosen`` stages with its parameters: the split of
    the total (epsilon, delta) by the public rule (public parameters only).
    """
    if k > d:  # before the split is shown or any budget reserves it
        raise ValueError(f"n_components: must be in 1..{d} (d = {d}), got {k}")
    planned = [part for stage in chosen for part in stage.planned_parts(k, d)]
    shares = split if split is not None else default_shares([stage.name for stage in chosen])
    return split_budget(epsilon, delta, planned, shares)


def check_charge(budget: Any, divided: BudgetSplit) -> None:
    """THE ledger check of an analysis: raise
    :class:`~dask_dppca.privacy.budget.privacy_budget.BudgetExceededError` if
    ``budget`` cannot pay for every part of ``divided`` now.  :func:`analyze` checks
    every active budget with it before anything is read; the app's cost line calls it
    too (:func:`planned_split`).
    """
    budget.check(PartsCharge(divided.all_parts))


def planned_split(
    n_components: int,
    n_features: int,
    *,
    epsilon: float,
    delta: float,
    split: Mapping[str, float] | None = None,
    methods: Sequence[str] = ("clipped", "winsorized", "huber", "robust"),
    score_map: bool = True,
    grouped: bool = False,
    score_axes: tuple[int, int] = (0, 1),
    score_methods: Sequence[str] = ("additive",),
    stages: Sequence[str] = (),
    scale: str = "none",
) -> BudgetSplit:
    """The split :func:`analyze` makes with these public parameters, before it reads
    anything (the same stages, the same rule): what a page shows as the cost of the next
    release and checks with :func:`check_charge`.

    ``grouped``: whether the score map has groups (they add a part: the noisy group
    sizes); the labels themselves do not change the split.
    """
    k = integer_at_least("n_components", n_components, 1)
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    map_stage = None
    if score_map:
        labels = np.zeros(0) if grouped else None  # public: only whether there are groups
        domain = [0] if grouped else None
        map_stage = PrivateScoreMapStage(labels, domain, score_axes, None, score_methods, None)
    chosen = _stages(stages, scale, {}, ScreeStage(methods, False, None), map_stage, None)
    return analysis_split(chosen, k, int(n_features), eps, dlt, split)


def _sign_meta(sign: SpatialSign) -> dict[str, Any]:
    """The result's record of the directions' spatial sign (and what it estimates)."""
    return {
        "spatial_sign": sign.name,
        "radius": sign.radius,
        "directions_estimate": directions_note(sign.name, sign.radius),
    }


def _map_stage(
    X: Any,
    score_map: Stage | bool | None,
    groups: Any,
    group_domain: Sequence[Any] | None,
    axes: tuple[int, int],
    bins: tuple[int, int] | None,
    methods: Sequence[str],
    random_state: int | None,
    component: str | None,
) -> tuple[Any, Stage | None]:
    """The score map's stage (the default one, a stage of your own, or none), and ``X``
    (a group column named in ``X`` is taken out of it).
    """
    if score_map is True:
        X, labels = resolve_groups(X, groups, component)
        stage = PrivateScoreMapStage(labels, group_domain, axes, bins, methods, random_state)
        return X, stage
    if groups is not None or group_domain is not None:  # no stage, or a stage of its own
        raise ValueError("groups: only the default score map (score_map=True) takes groups")
    if score_map is False or score_map is None:
        return X, None
    return X, score_map


class _Released:
    """What each stage released, as it is released: whatever stops the analysis later,
    what was drawn (and paid for) goes out with the error (``partial_analysis``).
    """

    def __init__(self, chosen: list[Stage], map_stage: Stage | None, meta: dict[str, Any]):
        self.chosen = chosen
        self.map_name = None if map_stage is None else map_stage.name
        self.meta = meta
        self.outputs: dict[str, StageOutput] = {}

    def add(self, name: str, output: StageOutput) -> None:
        self.outputs[name] = output

    def has(self, name: str) -> bool:
        return name in self.outputs

    def titles(self) -> list[str]:
        return [_title(stage.name) for stage in self.chosen]

    def result(self, complete: bool) -> PrivateAnalysis:
        """The analysis of the stages released so far (all of them when ``complete``)."""
        meta = dict(self.meta)
        if not complete:
            meta["released_stages"] = [
                _title(stage.name) for stage in self.chosen if stage.name in self.outputs
            ]
        estimator = self.outputs["directions"].value
        scree = self.outputs["scree"].value if "scree" in self.outputs else None
        scree = scree or {"values": {}, "design": None}
        scree["pve_topk"] = pve_topk(scree["values"])
        meta["directions_fit_id"] = estimator.privacy_.get("fit_id")
        further = {
            name: output.value
            for name, output in self.outputs.items()
            if name not in ("directions", "scree", self.map_name)
        }
        map_output = self.outputs.get(self.map_name or "")
        result = PrivateAnalysis(
            directions=np.asarray(estimator.components_, dtype=np.float64),
            kendall_eigenvalues=np.asarray(estimator.eigenvalues_, dtype=np.float64),
            scree=scree,
            privacy=[row for output in self.outputs.values() for row in output.rows],
            score_map=None if map_output is None else map_output.value,
            meta=meta,
            stages=further,
        )
        result.notices = release_notices(result)  # post-processing of the released values
        return result


def _title(name: str) -> str:
    """A stage's title (a stage of your own: its name)."""
    try:
        return stage_info(name).title
    except ValueError:
        return name


def _run_stages(
    X: Any,
    records: Any,
    chosen: list[Stage],
    split: BudgetSplit,
    released: _Released,
    analysis_id: str,
    budgets: Any,
    scheduler: Any,
    options: ReleaseOptions,
    storage_options: dict[str, Any] | None,
    random_state: int | None,
) -> None:
    """Reserve every stage together, then run them in turn on one compute target."""
    pinned = store_fingerprint(X, storage_options)  # each later stage reads the same data

    def unchanged(before: str) -> None:
        check_unchanged(X, storage_options, pinned, before)

    # One compute target for every stage, the directions' fit included: the same
    # client (one connection to a scheduler address), and rows in memory sent once.
    with compute_target(scheduler, options) as target:
        records = records.counted(target)
        n, d = records.shape
        released.meta.update(
            n_samples=n,
            n_features=d,
            dataset=records.dataset,
            row_chunks=None if records.row_chunks is None else list(records.row_chunks),
        )
        client = target.client if isinstance(target, ClusterTarget) else scheduler
        released.meta["accuracy"] = _accurate_enough(chosen, split, n, d)
        plan, transaction = _reserve_all(chosen, split, released, client, records, target, budgets)
        try:
            with transaction as reserved, ExitStack() as later_stages:
                if records.in_memory:
                    # Kept on the workers for the whole analysis: every pass reads these
                    # blocks (a lazy input is read by each pass, never held).
                    records = records.kept_on(target, plan.block_sizes)  # scattered
                blocks = records.blocks(plan.block_sizes)
                context = StageContext(
                    records, blocks,
                    partial(_pass_blocks, records, blocks, plan.block_sizes, d, target.n_threads),
                    tuple(plan.block_sizes), plan.block_pairs, None, split, target,
                    analysis_id, "", records.dataset, n, d, random_state,
                )  # fmt: skip
                titles = [_title(stage.name) for stage in chosen]
                with run_progress(titles, options.progress) as run:
                    _run_each(
                        chosen, context, reserved, released, later_stages.enter_context,
                        unchanged, X, None if run is None else run.begin,
                    )  # fmt: skip
                unchanged("handing back the result (a stage may have read the new version)")
        except Exception as error:  # any stage, whatever the surface error
            lost = lost_scheduler(error, target, f"analysis {analysis_id}")
            if lost is None:
                raise
            raise lost from None
        del blocks, records, context  # the resident blocks leave the workers (client open)


def _reserve_all(
    chosen: list[Stage],
    split: BudgetSplit,
    released: _Released,
    client: Any,
    records: Any,
    target: Any,
    budgets: Any,
) -> tuple[Any, Any]:
    """The directions' block plan, and the transaction reserving every stage's charge:
    the directions' exact release, each other stage's parts of the split.
    """
    directions = _directions_stage(chosen)
    k = int(released.meta["n_components"])
    plan, release = directions.planned_release(k, split, client, records, target.n_threads)
    charges = [
        (stage.name, release if stage is directions else PartsCharge(split.stage_parts(stage.name)))
        for stage in chosen
    ]
    analysis_id = released.meta["analysis_id"]
    # Every stage reserved together, before anything is read: concurrent analyses
    # are admitted whole or refused whole; a stage never started is given back.
    transaction = reserve_transaction(
        charges,
        transaction_id=analysis_id,
        label=f"analysis {analysis_id}",
        dataset=records.dataset,
        budgets=budgets,
    )
    return plan, transaction


def _run_each(
    chosen: list[Stage],
    context: StageContext,
    reserved: Any,
    released: _Released,
    keep_until_done: Callable[[Any], Any],
    unchanged: Callable[[str], None],
    X: Any,
    begin: Callable[[str], None] | None = None,
) -> None:
    """Run the stages in turn, the store checked unchanged before each after the first
    (``begin`` told each stage's title as it starts: the run's progress display).
    """
    directions = _directions_stage(chosen)
    for stage in chosen:
        if begin is not None:
            begin(_title(stage.name))
        if stage is not chosen[0]:
            unchanged(f"the {_title(stage.name)}")
        output = stage.run(replace(context, stage_id=reserved.stage_id(stage.name)))
        released.add(stage.name, output)
        if output.rereads is not None:  # every later stage reads what this one says
            context = _reading(context, output.rereads(context.records))
        if stage is directions:
            context = replace(context, directions=_directions_of(output.value))
            released.meta["feature_names"] = _feature_names(context.records, X, output.value)
            # The directions' release warned of an untrusted worker, if any: once.
            keep_until_done(untrusted_warning_given())


def _directions_stage(chosen: list[Stage]) -> DirectionsStage:
    """The analysis's directions stage (every analysis has one)."""
    return next(stage for stage in chosen if isinstance(stage, DirectionsStage))


def _reading(context: StageContext, records: Any) -> StageContext:
    """``context`` reading ``records`` (the same blocks and passes, read through them)."""
    blocks = records.blocks(context.block_sizes)
    passes = partial(
        _pass_blocks, records, blocks, context.block_sizes, context.n_features,
        context.target.n_threads,
    )  # fmt: skip
    return replace(context, records=records, blocks=blocks, pass_blocks=passes)


def _accurate_enough(chosen: list[Stage], split: BudgetSplit, n: int, d: int) -> dict[str, Any]:
    """Each stage's public accuracy statement; a stage whose release would be useless at
    this ``n`` and its share of epsilon is refused here, before anything is reserved.
    """
    stated = {}
    for stage in chosen:
        accuracy = stage_accuracy(stage, split, n, d)
        if accuracy is None:
            continue
        if accuracy["useless"]:
            bound = max(accuracy["rank_error_95"].values())
            raise ValueError(
                f"epsilon: at n = {n} the {_title(stage.name)} stage's share of epsilon is too "
                "small: its quantiles' scans may stop before they meet any record (5 % or "
                f"more; within {bound:.0f} records of their ranks at 95 %), so its release "
                "could be any value; nothing was reserved or spent. Raise epsilon or the "
                "stage's --split share, or leave the stage out"
            )
        stated[stage.name] = accuracy
    return stated


def _pass_blocks(
    records: Any, blocks: Any, block_sizes: tuple[int, ...], d: int, n_threads: int
) -> Any:
    """The rows for one pass in a few tasks a thread, not one per block (rows in memory
    stay in the blocks resident on the workers).
    """
    if records.in_memory:
        return blocks
    return records.blocks(pass_block_sizes(block_sizes, d, n_threads))


def _directions_of(estimator: Any) -> np.ndarray:
    return np.asarray(estimator.components_, dtype=np.float64)


def _feature_names(records: Any, X: Any, estimator: Any) -> list[str] | None:
    """A table's columns (public), else the input's names (:func:`input_feature_names`)."""
    named = records.feature_names
    return list(named) if named is not None else input_feature_names(X, estimator)


def _attach_partial(error: BaseException, partial: PrivateAnalysis, titles: list[str]) -> None:
    """Give ``error`` the stages released before it (``error.partial_analysis``) and a
    note naming what was released and what was not.
    """
    done = partial.meta.get("released_stages", [])
    missing = [s for s in titles if s not in done]
    if not missing:
        partial.meta.pop("released_stages", None)  # all drawn: only the return was cut short
    try:
        error.partial_analysis = partial  # type: ignore[attr-defined]
    except AttributeError:  # an exception type without a __dict__: the note says it
        pass
    error.add_note(
        f"the analysis released {', '.join(done)}"
        + (f"; not released: {', '.join(missing)}" if missing else "")
    )
