"""A private PCA analysis under one budget: a loop over its stage objects.

:func:`analyze` reads top to bottom: check every parameter, take the stage objects
(:mod:`dask_dppca.analysis.stages`: by default the directions, the scree and the score
map; :mod:`dask_dppca.analysis.options` maps the old keywords onto them), bind each to
what the analysis shares and order them by what each runs after, plan every stage's
parts and split the total (epsilon, delta) over them by the public rule
(:func:`~dask_dppca.privacy.mechanisms.accounting.split_budget`), show the split and check
that every active budget can pay for the whole analysis before anything is read; then
reserve every stage in one transaction and run the stages in turn
(:class:`~dask_dppca.analysis.stage.Stage`), each one Dask reduction released on the
trusted worker.  No stage is named here: what a stage needs is on its object.

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

from ..compute import ClusterTarget, compute_target
from ..compute.budget_config import budgets_to_charge
from ..compute.failures import lost_scheduler
from ..compute.progress import run_progress
from ..compute.trusted.placement import ReleaseOptions, untrusted_warning_given
from ..graph import pass_block_sizes
from ..io.fingerprint import check_unchanged, store_fingerprint
from ..privacy.budget.charging import reserve_transaction
from ..privacy.mechanisms.accounting import BudgetSplit, compose
from ..privacy.mechanisms.calibration import validate_privacy_parameters
from ..privacy.mechanisms.charges import PartsCharge
from ..privacy.mechanisms.parts import part_to_dict
from ..privacy.notices import NON_FINITE_NOTE, groups_advice
from ..validation import integer_at_least
from .options import Compute, analysis_split, bound_stages, chosen_stages, shell_stages
from .result import PrivateAnalysis, privacy_table_text, released_analysis, split_rows
from .stage import (
    Stage,
    StageContext,
    StageOutput,
    StageSetup,
    stage_accuracy,
    stage_meta,
    stage_title,
)
from .stages.score_map import resolve_groups

__all__ = ["analysis_split", "analyze", "check_charge", "planned_split"]

logger = logging.getLogger(__name__)


def analyze(
    X: Any,
    n_components: int = 5,
    *,
    epsilon: float = 3.0,
    delta: float = 1e-5,
    split: Mapping[str, float] | None = None,
    stages: Sequence[Stage] | None = None,
    groups: Any = None,
    scale: str = "none",
    compute: Compute | None = None,
    random_state: int | None = None,
    show_split: Callable[[str], Any] | None = None,
    **deprecated: Any,
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
        Public stage shares (default: each stage's; those of the stages that run are
        renormalised).
    stages : sequence of Stage, optional
        The stages, each holding its own parameters: ``DirectionsStage``, ``ScreeStage``,
        ``ScoreMapStage``, ``MedianStage``, ``ScaleStage``
        (:mod:`dask_dppca.analysis.stages`) or your own
        (:class:`~dask_dppca.analysis.stage.Stage`).  None or empty: the directions,
        scree and score map; given, exactly these (the directions added if left out),
        each after the stages it reads.  Releases beyond those three are in ``result.stages``.
    groups : array-like or str, optional
        One label per row, or the name of a column / variable / array of ``X``
        (:func:`~dask_dppca.analysis.stages.score_map.resolve_groups`): per-group score
        maps, their PUBLIC domain the score map's ``group_domain``.
    scale : {"none", "robust"}, default "none"
        "robust" adds the ``ScaleStage`` (private robust scaling, first: for columns in
        different units; docs/privacy.md, "Private robust scaling").
    compute : Compute, optional
        Where and how it reads and computes (:class:`~dask_dppca.analysis.options.Compute`).
    random_state : int, optional
        NOT PRIVATE: seeds every noise draw, for tests and examples only.
    show_split : callable, optional
        Called with the split table (text) before anything is read (``print`` shows it).
    **deprecated
        The keywords ``analyze`` took before (``methods=``, ``score_map=``,
        ``scheduler=``, ...: :data:`~dask_dppca.analysis.options.MOVED`) work until 0.3,
        each with a :class:`DeprecationWarning` naming its new place.

    Returns
    -------
    PrivateAnalysis

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_t(3, size=(2000, 4))  # any rows
    >>> result = dd.analyze(X, 2, stages=[dd.ScreeStage()], compute=dd.Compute("threads"))
    >>> result.directions.shape, result.score_map is None, sorted(result.scree["values"])
    ((2, 4), True, ['clipped', 'huber', 'robust', 'winsorized'])
    """
    k = integer_at_least("n_components", n_components, 1)
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    given, compute = chosen_stages("analyze", stages, compute, deprecated, scale)
    X, labels = (X, None) if groups is None else resolve_groups(X, groups, compute.component)
    chosen = bound_stages(given, StageSetup(random_state, labels, compute))
    records = compute.opened(X)  # metadata only
    divided = analysis_split(chosen, k, records.shape[1], eps, dlt, split)
    analysis_id = uuid.uuid4().hex
    advice = _advice(_stated(chosen, divided, records.shape))  # refused before shown
    budgets = _shown_and_checked(divided, analysis_id, show_split, advice)
    released = _Released(chosen, _meta(chosen, divided, analysis_id, k, random_state))
    return _run_or_partial(X, records, chosen, divided, released, budgets, compute, random_state)


def _run_or_partial(
    X: Any,
    records: Any,
    chosen: list[Stage],
    divided: BudgetSplit,
    released: _Released,
    budgets: Any,
    compute: Compute,
    random_state: int | None,
) -> PrivateAnalysis:
    """The analysis, its stages run; whatever stops it after the directions are released
    goes out with the stages released so far (``error.partial_analysis``).
    """
    try:
        _run_stages(X, records, chosen, divided, released, budgets, compute, random_state)
    except BaseException as error:
        if released.has_directions():
            _attach_partial(error, released.result(complete=False), released.titles())
        raise
    return released.result(complete=True)


def _stated(chosen: list[Stage], divided: BudgetSplit, shape: tuple[Any, int]) -> dict[str, Any]:
    """The stages' accuracy statements when n is known (a DataFrame's n is counted on the
    cluster: checked there), a useless stage refused.
    """
    n, d = shape
    return _accurate_enough(chosen, divided, int(n), d) if n == n else {}


def _meta(
    chosen: Sequence[Stage], divided: BudgetSplit, analysis_id: str, k: int, seed: int | None
) -> dict[str, Any]:
    """The result's public record of the analysis, before anything is read."""
    return {
        "analysis_id": analysis_id,
        "epsilon": divided.epsilon,
        "delta": divided.delta,
        "shares": divided.shares,
        "scale": divided.scale,
        "composed_epsilon": compose(divided.all_parts).epsilon(divided.delta),
        "n_components": k,
        "private": seed is None,
        "parts": [part_to_dict(p) for p in divided.all_parts],
        "scaling": "none",  # the data as they are, unless a stage says otherwise
        "non_finite": NON_FINITE_NOTE,  # the same for every analysis: data-independent
        **{key: value for stage in chosen for key, value in stage_meta(stage).items()},
    }


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
    stages: Sequence[str] = (),
    grouped: bool = False,
    scale: str = "none",
    **flat: Any,
) -> BudgetSplit:
    """The split :func:`analyze` makes with these public parameters, before it reads
    anything (the same stages, the same rule): what a page shows as the cost of the next
    release and checks with :func:`check_charge`.

    ``stages``: the optional stages named (the default ones run too); ``flat``: the
    page's flat options (``score_map=``, ``methods=``, ...:
    :func:`~dask_dppca.analysis.options.shell_stages`).  ``grouped``: whether the score
    map has groups (they add a part: the noisy group sizes); the labels themselves do not
    change the split.
    """
    k = integer_at_least("n_components", n_components, 1)
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    given = shell_stages(stages, flat, scale)
    setup = StageSetup(groups=True if grouped else None, planning=True)
    return analysis_split(bound_stages(given, setup), k, int(n_features), eps, dlt, split)


class _Released:
    """What each stage released, as it is released: whatever stops the analysis later,
    what was drawn (and paid for) goes out with the error (``partial_analysis``).
    """

    def __init__(self, chosen: list[Stage], meta: dict[str, Any]):
        self.chosen = chosen
        self.meta = meta
        self.outputs: dict[str, StageOutput] = {}

    def add(self, name: str, output: StageOutput) -> None:
        self.outputs[name] = output
        self.meta.update(output.meta)

    def has_directions(self) -> bool:
        """Whether the directions are released (a result has them, whatever else)."""
        return any(output.directions is not None for output in self.outputs.values())

    def titles(self) -> list[str]:
        return [stage_title(stage) for stage in self.chosen]

    def result(self, complete: bool) -> PrivateAnalysis:
        """The analysis of the stages released so far (all of them when ``complete``)."""
        meta = dict(self.meta)
        if not complete:
            meta["released_stages"] = [
                stage_title(stage) for stage in self.chosen if stage.name in self.outputs
            ]
        return released_analysis(self.outputs, meta)


def _run_stages(
    X: Any,
    records: Any,
    chosen: list[Stage],
    split: BudgetSplit,
    released: _Released,
    budgets: Any,
    compute: Compute,
    random_state: int | None,
) -> None:
    """Reserve every stage together, then run them in turn on one compute target."""
    analysis_id = released.meta["analysis_id"]
    storage_options = compute.storage_options
    pinned = store_fingerprint(X, storage_options)  # each later stage reads the same data

    def unchanged(before: str) -> None:
        check_unchanged(X, storage_options, pinned, before)

    options = ReleaseOptions(compute.trusted_worker, compute.require_trusted, compute.progress)
    # One compute target for every stage, the directions' fit included: the same
    # client (one connection to a scheduler address), and rows in memory sent once.
    with compute_target(compute.scheduler, options) as target:
        records = records.counted(target)
        n, d = records.shape
        released.meta.update(
            n_samples=n,
            n_features=d,
            dataset=records.dataset,
            row_chunks=None if records.row_chunks is None else list(records.row_chunks),
        )
        client = target.client if isinstance(target, ClusterTarget) else compute.scheduler
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
                    analysis_id, "", records.dataset, n, d, random_state, X,
                )  # fmt: skip
                with run_progress(released.titles(), options.progress) as run:
                    _run_each(
                        chosen, context, reserved, released, later_stages.enter_context,
                        unchanged, None if run is None else run.begin,
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
    """The block plan, and the transaction reserving every stage's charge: the exact
    release of the stage that plans the blocks (``planned_release``: the directions'
    fit), each other stage's parts of the split.
    """
    designer = next(stage for stage in chosen if hasattr(stage, "planned_release"))
    k = int(released.meta["n_components"])
    plan, release = designer.planned_release(k, split, client, records, target.n_threads)
    charges = [
        (stage.name, release if stage is designer else PartsCharge(split.stage_parts(stage.name)))
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
    begin: Callable[[str], None] | None = None,
) -> None:
    """Run the stages in turn, the store checked unchanged before each after the first
    (``begin`` told each stage's title as it starts: the run's progress display).
    """
    for stage in chosen:
        title = stage_title(stage)
        if begin is not None:
            begin(title)
        if stage is not chosen[0]:
            unchanged(f"the {title}")
        output = stage.run(replace(context, stage_id=reserved.stage_id(stage.name)))
        released.add(stage.name, output)
        if output.rereads is not None:  # every later stage reads what this one says
            context = _reading(context, output.rereads(context.records))
        if output.directions is not None:  # what every later stage projects on
            context = replace(context, directions=output.directions)
            # The directions' release warned of an untrusted worker, if any: once.
            keep_until_done(untrusted_warning_given())


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
                f"epsilon: at n = {n} the {stage_title(stage)} stage's share of epsilon is too "
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
