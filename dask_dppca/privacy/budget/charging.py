"""Which budgets a fit charges, and the reservation that charges them.

A fit charges (:func:`reserve_release`), all of them or none if any refuses:

* the default budget (:func:`set_default_budget`, or the ledger named by the environment
  variable ``DASK_DPPCA_BUDGET``, which child processes inherit);
* every budget whose ``with`` block is open in any thread of the process (nested blocks
  charge every enclosing budget);
* the budgets an estimator carries because it was pickled, copied or cloned while they
  were active (:class:`BudgetCarrier`: how a fit in a joblib/loky worker of
  scikit-learn charges the parent's budgets).

Each budget is charged once per fit however many of these name it (one per ledger).
:data:`ROUTES` is the one table of these routes, in precedence order; the resolver
(:func:`resolve_budgets`) walks it.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Self, cast

from ..mechanisms.charges import GaussianCharge, PartsCharge, charge_of
from .ledger import ledger_path
from .ledger_rows import LedgerError, LedgerReplacedError
from .lineage import ancestor_budgets
from .privacy_budget import PrivacyBudget, Reservation
from .registry import BUDGET_ENV, BudgetKey, open_budgets, publish_budgets
from .report import stage_name

__all__ = [
    "BUDGET_ENV",
    "ROUTES",
    "BudgetCarrier",
    "BudgetRequiredError",
    "BudgetRoute",
    "Transaction",
    "active_budgets",
    "current_budget",
    "default_budget",
    "release_dispatched",
    "reserve_release",
    "reserve_transaction",
    "resolve_budgets",
    "set_default_budget",
    "transaction_stage_id",
]

_DEFAULT_LOCK = threading.RLock()
_DEFAULT: dict[str, PrivacyBudget] = {}  # ledger path -> the default budget opened on it
# Fit id -> its reservations not yet dispatched (see release_dispatched).
_UNDISPATCHED: dict[str, tuple[Reservation, ...]] = {}
_UNDISPATCHED_LOCK = threading.Lock()
# The analysis whose stages this thread (or task) runs, reserved together.
_TRANSACTION: ContextVar[Transaction | None] = ContextVar("dask_dppca_transaction", default=None)


class BudgetRequiredError(LedgerError):
    """A fit that must be charged found no budget to charge (the "required" flag)."""


def set_default_budget(
    budget: PrivacyBudget | str | os.PathLike[str] | None,
) -> PrivacyBudget | None:
    """Make ``budget`` the default: every fit in this process, its threads and the child
    processes started from now on charge it.

    The default must have a ledger file (the only way other processes can charge it);
    its path goes into the environment variable ``DASK_DPPCA_BUDGET``, which child
    processes (joblib/loky workers, ``subprocess``) inherit.  Setting that variable
    before Python starts has the same effect.

    Parameters
    ----------
    budget : PrivacyBudget, str, os.PathLike or None
        A budget with a ledger, or the path of an existing ledger; None removes the
        default (and the environment variable).

    Returns
    -------
    PrivacyBudget or None
        The default budget now in force.

    Examples
    --------
    >>> import os, tempfile
    >>> import dask_dppca as dd
    >>> ledger = os.path.join(tempfile.mkdtemp(), "study.ledger")
    >>> budget = dd.PrivacyBudget(epsilon=2.0, delta=1e-5, ledger=ledger, create=True)
    >>> _ = dd.set_default_budget(budget)  # every fit of this process now charges it
    >>> [b.ledger for b in dd.active_budgets()] == [budget.ledger]
    True
    >>> dd.set_default_budget(None)  # no default again
    """
    with _DEFAULT_LOCK:
        if budget is None:
            os.environ.pop(BUDGET_ENV, None)
            _DEFAULT.clear()
            publish_budgets()
            return None
        if not isinstance(budget, PrivacyBudget):
            budget = PrivacyBudget.open(budget)
        if budget.ledger is None:
            raise ValueError(
                "budget: a default budget must have a ledger file so that every process can "
                "charge it; use PrivacyBudget(epsilon, delta, ledger=PATH, create=True)"
            )
        _DEFAULT.clear()
        _DEFAULT[budget.ledger] = budget
        os.environ[BUDGET_ENV] = budget.ledger
        publish_budgets()  # child processes started before now see it too
        return budget


def default_budget() -> PrivacyBudget | None:
    """The default budget: the ledger named by ``DASK_DPPCA_BUDGET``, or None.

    Raises
    ------
    LedgerError
        If the variable names no ledger (fits then refuse rather than go uncharged).
    """
    named = os.environ.get(BUDGET_ENV)
    if not named:
        return None
    path = ledger_path(named)
    with _DEFAULT_LOCK:
        if path not in _DEFAULT:
            try:
                opened = PrivacyBudget.open(path)
            except LedgerError as error:
                raise LedgerError(f"{BUDGET_ENV}={named!r}: {error}") from None
            _DEFAULT.clear()
            _DEFAULT[path] = opened
        return _DEFAULT[path]


def _unique(budgets: Iterable[PrivacyBudget]) -> tuple[PrivacyBudget, ...]:
    """One budget per ledger file (or in-memory budget), first occurrence kept."""
    seen: dict[BudgetKey, PrivacyBudget] = {}
    for budget in budgets:
        seen.setdefault(budget._key, budget)
    return tuple(seen.values())


@dataclass(frozen=True)
class _Asked:
    """What a resolution is given besides the process's state."""

    carried: tuple[PrivacyBudget, ...] = ()
    named: tuple[tuple[str, str], ...] = ()
    refuse_in_memory_ancestors: bool = True


@dataclass(frozen=True)
class BudgetRoute:
    """One way a budget is named for the releases made now (a row of :data:`ROUTES`).

    Attributes
    ----------
    name : str
        The route's name (docs/privacy.md lists the routes by it).
    named_by : str
        How a user names a budget this way.
    refusal : str
        When the route refuses the release instead of leaving it uncharged ("" never).
    in_process : bool
        Whether the process's own state names it (:func:`active_budgets` walks those);
        the others come from the caller.
    lookup : callable
        The route's budgets now, from what the resolution was asked.
    """

    name: str
    named_by: str
    refusal: str
    in_process: bool
    lookup: Callable[[_Asked], list[PrivacyBudget]] = field(repr=False)


def _from_ancestors(asked: _Asked) -> list[PrivacyBudget]:
    inherited = ancestor_budgets()
    if inherited.memory_in and asked.refuse_in_memory_ancestors:
        raise LedgerError(
            f"process {inherited.memory_in[0]}, an ancestor of this process "
            f"({os.getpid()}), has a budget open that has no ledger file; it cannot be charged "
            "from here, so this fit is refused. Create it with ledger=PATH to share it"
        )
    from_ancestors = []
    for path in inherited.ledgers:
        try:
            from_ancestors.append(PrivacyBudget.open(path))
        except LedgerError as error:
            raise LedgerError(f"a budget of a parent process: {error}") from None
    return from_ancestors


#: Every route by which a budget is named, in precedence order: the resolver walks them
#: in this order, so the first route naming a ledger gives the budget charged for it (one
#: per ledger), the reservations follow this order, and a route's refusal comes before a
#: later route's.  docs/privacy.md lists them by these names.
ROUTES: tuple[BudgetRoute, ...] = (
    BudgetRoute(
        "default",
        f"dd.set_default_budget(budget or ledger path), or the environment variable "
        f"{BUDGET_ENV} (set before Python starts, or inherited by a child process)",
        "the variable names no ledger",
        True,
        lambda asked: [budget for budget in (default_budget(),) if budget is not None],
    ),
    BudgetRoute(
        "with-block",
        "a budget's open `with` block in any thread of the process (each of nested "
        "blocks), among them the CLI's --budget LEDGER",
        "",
        True,
        lambda asked: open_budgets(),
    ),
    BudgetRoute(
        "ancestor",
        "a ledger a running ancestor process charges (its default or open blocks, "
        "registered for its descendants)",
        "an ancestor holds an in-memory budget open, or its ledger is gone",
        True,
        _from_ancestors,
    ),
    BudgetRoute(
        "carried",
        "the budgets an estimator carries: active when it was pickled, copied or cloned",
        "",
        False,
        lambda asked: list(asked.carried),
    ),
    BudgetRoute(
        "configured",
        "the Dask configuration key dask-dppca.ledger, or its environment variable "
        "DASK_DASK_DPPCA__LEDGER (read by the caller at each release)",
        "the named ledger cannot be opened",
        False,
        lambda asked: _named(asked.named),
    ),
)


def _walk(asked: _Asked, in_process_only: bool = False) -> tuple[PrivacyBudget, ...]:
    """The budgets of every route of :data:`ROUTES`, in its order, one per ledger."""
    routes = [r for r in ROUTES if r.in_process or not in_process_only]
    return _unique([budget for route in routes for budget in route.lookup(asked)])


def active_budgets(refuse_in_memory_ancestors: bool = True) -> tuple[PrivacyBudget, ...]:
    """The budgets a fit in this process charges now: the routes of :data:`ROUTES` the
    process's own state names (the default, every open ``with`` block in any thread,
    outermost first, then every ledger a running ancestor process registered,
    :mod:`.lineage`); one entry per ledger.

    Parameters
    ----------
    refuse_in_memory_ancestors : bool, default True
        Raise when an ancestor holds an in-memory budget (False: leave it out).

    Raises
    ------
    LedgerError
        If an ancestor process holds an in-memory budget (no other process can charge
        it: the fit is refused rather than left uncharged), or a ledger is missing.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> budget = dd.PrivacyBudget(epsilon=2.0, delta=1e-5)
    >>> with budget:
    ...     budget in dd.active_budgets()
    True
    """
    return _walk(_Asked(refuse_in_memory_ancestors=refuse_in_memory_ancestors), True)


def current_budget() -> PrivacyBudget | None:
    """The most recently entered budget still open (in any thread), else the default, else None."""
    opened = open_budgets()
    return opened[-1] if opened else default_budget()


@contextmanager
def reserve_release(
    mechanism: Any,
    *,
    fit_id: str = "",
    label: str = "",
    dataset: str = "",
    carried: Iterable[PrivacyBudget] = (),
    named: Iterable[tuple[str, str]] = (),
    required: bool = False,
    abandon: Callable[[], bool] | None = None,
    budgets: Sequence[PrivacyBudget] | None = None,
) -> Iterator[tuple[Reservation, ...]]:
    """Reserve ``mechanism``'s release in every budget that must pay for it; commit when the
    block ends.

    The budgets are :func:`active_budgets` plus ``carried`` (those an estimator carries,
    :class:`BudgetCarrier`) plus the ledgers ``named`` as ``(where it was named, path)``
    pairs (the Dask configuration's default, read by the caller: this layer reads no Dask
    configuration). With ``required``, a fit with none of them is refused
    (:class:`BudgetRequiredError`) instead of running uncharged. Each reserves the
    mechanism's charge (``mechanism.charge``) in turn; if one refuses, those already
    reserved are cancelled (nothing was drawn) and the refusal propagates. Draw the noise
    inside the block. When the block returns, every reservation is committed. When it
    raises, the reservations stay counted unless ``abandon()`` proves that the release never
    drew and never will (the compute target's hook: it makes a late release refuse to draw);
    then they are cancelled.

    ``budgets``, when given, replaces that resolution (what
    :func:`resolve_budgets` returned to the caller).  Inside :func:`reserve_transaction`,
    a ``fit_id`` that is one of its stages claims the rows reserved for that stage
    instead; if the block raises before the stage was dispatched, they are given back.

    The code that draws calls :func:`release_dispatched` with ``fit_id`` before anything
    can draw: each ledger row then records that its release was dispatched (until then
    the row proves that nothing was drawn, ``budget resolve``).

    Yields
    ------
    tuple of Reservation
        Empty when no budget is active.
    """
    transaction = _TRANSACTION.get()
    claimed = transaction is not None and transaction.holds(fit_id)
    if transaction is not None and claimed:
        # A stage of an analysis: its rows were reserved with the whole analysis.
        reservations = list(transaction.claim(fit_id, mechanism))
    else:
        if budgets is None:
            budgets = resolve_budgets(carried=carried, named=named, required=required)
        reservations = _reserve_each(
            budgets, mechanism, fit_id, label or f"DPPCA fit {fit_id}", dataset
        )
    if fit_id:
        with _UNDISPATCHED_LOCK:
            _UNDISPATCHED[fit_id] = tuple(reservations)
    try:
        yield tuple(reservations)
    except BaseException:
        # A stage's rows record their dispatch: never dispatched, never drawn.
        if reservations and (
            (claimed and _undispatched(fit_id)) or (abandon is not None and abandon())
        ):
            _settle(reservations, "cancel")
        raise
    else:
        _settle(reservations, "commit")
    finally:
        with _UNDISPATCHED_LOCK:
            _UNDISPATCHED.pop(fit_id, None)


def _reserve_each(
    budgets: Sequence[PrivacyBudget], mechanism: Any, fit_id: str, label: str, dataset: str
) -> list[Reservation]:
    """Reserve ``mechanism``'s release in each of ``budgets`` in turn, all or none: if one
    refuses (or an interrupt comes), those already reserved are cancelled (nothing was
    drawn) and the error propagates.
    """
    reservations: list[Reservation] = []
    try:
        for budget in budgets:
            reservations.append(
                budget.reserve(mechanism, label=label, fit_id=fit_id, dataset=dataset)
            )
    except BaseException:
        _settle(reservations, "cancel")
        _cancel_strays(budgets, reservations, [fit_id])
        raise
    return reservations


def _undispatched(fit_id: str) -> bool:
    with _UNDISPATCHED_LOCK:
        return fit_id in _UNDISPATCHED


def resolve_budgets(
    *,
    carried: Iterable[PrivacyBudget] = (),
    named: Iterable[tuple[str, str]] = (),
    required: bool = False,
) -> tuple[PrivacyBudget, ...]:
    """Every budget a release made now must charge, one per ledger: every route of
    :data:`ROUTES`, walked in its order.

    The routes the process names (:func:`active_budgets`: the default, ``with`` blocks in
    any thread, a parent process's ledgers), then ``carried`` (:class:`BudgetCarrier`),
    then the ledgers ``named`` as ``(where it was named, path)`` (the Dask
    configuration, read by the caller: this layer reads none).

    Raises
    ------
    BudgetRequiredError
        With ``required`` and no budget at all: the release is refused, not run uncharged.
    LedgerError
        If a named ledger cannot be opened (the release is refused, never left uncharged).
    """
    budgets = _walk(_Asked(tuple(carried), tuple(named)))
    if required and not budgets:
        raise BudgetRequiredError(
            "this release must be charged to a privacy budget (the budget-required flag is "
            "set) but has none: set a default ledger (dd.set_default_budget, "
            "DASK_DPPCA_BUDGET or the Dask configuration key dask-dppca.ledger), open a "
            "budget with 'with', or pass --budget LEDGER; nothing was released"
        )
    return budgets


class Transaction:
    """The stages of one analysis, reserved together in every budget it charges.

    Made by :func:`reserve_transaction`.  Each stage's release enters
    :func:`reserve_release` with the stage's id as its ``fit_id`` and *claims* the rows
    reserved for it (its charge must be the one reserved) instead of reserving again.

    Attributes
    ----------
    transaction_id : str
    budgets : tuple of PrivacyBudget
        The budgets charged, one per ledger.
    """

    def __init__(
        self,
        transaction_id: str,
        budgets: tuple[PrivacyBudget, ...],
        charges: dict[str, GaussianCharge | PartsCharge],
        rows: dict[str, list[Reservation]],
    ) -> None:
        self.transaction_id = transaction_id
        self.budgets = budgets
        self._charges = charges
        self._rows = rows
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def stage_id(self, stage: str) -> str:
        """The release id (``fit_id`` of its rows) of ``stage``."""
        return f"{self.transaction_id}.{stage}"

    def holds(self, fit_id: str) -> bool:
        """Whether ``fit_id`` is a stage of this transaction."""
        return fit_id in self._charges

    def claim(self, fit_id: str, mechanism: Any) -> tuple[Reservation, ...]:
        """The rows reserved for stage ``fit_id``; once, with the charge reserved.

        Raises
        ------
        LedgerError
            If the stage was claimed already, or ``mechanism`` charges other than what
            was reserved (nothing may draw then: the stage is refused).
        """
        with self._lock:
            if fit_id in self._claimed:
                raise LedgerError(f"stage {fit_id} of the analysis was already released")
            reserved, asked = self._charges[fit_id], charge_of(mechanism)
            if _charge_key(reserved) != _charge_key(asked):
                raise LedgerError(
                    f"stage {fit_id}: it charges {asked!r} but the analysis reserved "
                    f"{reserved!r}; refused before anything was drawn"
                )
            self._claimed.add(fit_id)
            return tuple(self._rows[fit_id])

    def unclaimed(self) -> list[str]:
        """The stages never started (their rows are given back when the analysis ends)."""
        with self._lock:
            return [fit_id for fit_id in self._charges if fit_id not in self._claimed]

    def _close(self) -> None:
        """Give back the rows of every stage never started: they never drew."""
        with self._lock:
            left = [fit_id for fit_id in self._charges if fit_id not in self._claimed]
            self._claimed.update(left)
        for fit_id in left:
            _settle(self._rows[fit_id], "cancel")


def _charge_key(charge: GaussianCharge | PartsCharge) -> tuple[Any, ...]:
    """What a charge costs, free of its order of parts and of its record-only fields."""
    if isinstance(charge, PartsCharge):
        return ("parts", tuple(sorted(map(repr, charge.parts))))
    return ("gaussian", charge.sensitivity, charge.sigma, charge.excess)


def transaction_stage_id(stage: str) -> str | None:
    """The release id of ``stage`` in the analysis this thread runs, if it has that stage."""
    transaction = _TRANSACTION.get()
    if transaction is None:
        return None
    fit_id = transaction.stage_id(stage)
    return fit_id if fit_id in transaction.unclaimed() else None


@contextmanager
def reserve_transaction(
    stages: Sequence[tuple[str, Any]],
    *,
    transaction_id: str,
    label: str,
    dataset: str = "",
    budgets: Sequence[PrivacyBudget],
) -> Iterator[Transaction]:
    """Reserve every stage of an analysis in every budget, atomically, before anything
    is read; each stage then claims its rows (:func:`reserve_release`).

    Each budget records all the stages' rows in one ledger transaction
    (:meth:`~.privacy_budget.PrivacyBudget.reserve_together`), so that concurrent analyses
    are admitted whole or refused whole: with room for k of them, k run.  When one
    budget refuses, the rows already reserved in the others are cancelled (nothing was
    drawn).  When the block ends, however it ends, the rows of every stage never
    started are given back: those stages drew nothing.

    Parameters
    ----------
    stages : sequence of (stage, charge)
        Each stage's name and its charge (a mechanism or charge, as for
        :meth:`~.privacy_budget.PrivacyBudget.reserve`).
    transaction_id : str
        The analysis's id; stage ``s`` is released as ``f"{transaction_id}.{s}"``.
    label, dataset : str
        For the rows (each row's label is ``f"{label} {stage}"``, ``_`` read as a space).
    budgets : sequence of PrivacyBudget
        What :func:`resolve_budgets` returned (may be empty: nothing is charged).

    Yields
    ------
    Transaction
    """
    charges = {f"{transaction_id}.{stage}": charge_of(charge) for stage, charge in stages}
    if len(charges) != len(stages):
        raise ValueError("stages: each stage must be named once")
    asked = [
        (fit_id, charge, f"{label} {stage_name(fit_id)}") for fit_id, charge in charges.items()
    ]
    rows: dict[str, list[Reservation]] = {fit_id: [] for fit_id in charges}
    done: list[Reservation] = []
    try:
        for budget in budgets:
            for (fit_id, _, _), reservation in zip(
                asked, budget.reserve_together(asked, dataset=dataset)
            ):
                rows[fit_id].append(reservation)
                done.append(reservation)
    except BaseException:
        _settle(done, "cancel")
        _cancel_strays(budgets, done, list(charges))
        raise
    transaction = Transaction(transaction_id, tuple(budgets), charges, rows)
    token = _TRANSACTION.set(transaction)
    try:
        yield transaction
    finally:
        _TRANSACTION.reset(token)
        transaction._close()


def _named(named: Iterable[tuple[str, str]]) -> list[PrivacyBudget]:
    """The budgets of ledger paths named in configuration; a missing ledger refuses."""
    budgets = []
    for where, path in named:
        try:
            budgets.append(PrivacyBudget.open(path))
        except (LedgerError, ValueError) as error:
            raise LedgerError(f"{where}={path!r}: {error}") from None
    return budgets


def release_dispatched(fit_id: str) -> None:
    """Record in every ledger charged for ``fit_id`` that its release is dispatched.

    Called by the code that draws (the compute layer), before anything can draw; a
    second call, or one for a fit this process did not reserve, does nothing.

    Raises
    ------
    LedgerError
        If a ledger no longer holds the row as reserved (``budget resolve`` cancelled
        it) or cannot be written: the release must not draw then.  Also for a stage of
        the analysis this thread runs that was reserved but never claimed
        (:func:`reserve_release` with its id): its rows would be given back as never
        drawn, so the draw is refused.
    """
    transaction = _TRANSACTION.get()
    if transaction is not None and fit_id in transaction.unclaimed():
        raise LedgerError(
            f"stage {fit_id}: reserved by the analysis but never claimed; a stage draws "
            "only inside its claim (claim_stage_parts, or reserve_release with its id): "
            "refused before anything was drawn"
        )
    with _UNDISPATCHED_LOCK:
        reservations = _UNDISPATCHED.pop(fit_id, ())
    for reservation in reservations:
        reservation.dispatch()


def _cancel_strays(
    budgets: Sequence[PrivacyBudget], reservations: Sequence[Reservation], fit_ids: Sequence[str]
) -> None:
    """Cancel rows of ``fit_ids`` that this process reserved but never got back: an
    interrupt (SIGINT, SIGTERM) after a row was written and before ``reserve`` returned.
    Nothing was dispatched yet, so nothing was drawn.
    """
    wanted = {fit_id for fit_id in fit_ids if fit_id}
    if not wanted:
        return
    known = {(r.budget._key, r.release.id) for r in reservations}
    for budget in budgets:
        try:
            strays = [
                row
                for row in budget._ledger.rows()
                if row.fit_id in wanted
                and row.pid == os.getpid()
                and row.state == "reserved"
                and (budget._key, row.id) not in known
            ]
            for row in strays:
                budget._ledger.settle(
                    row.id, "cancelled", fit_id=row.fit_id, ledger_id=row.ledger_id
                )
        except (LedgerError, TimeoutError):
            pass  # a row left reserved counts as spent: never an under-count


def _settle(reservations: Sequence[Reservation], action: str) -> None:
    """Commit or cancel each; a failure leaves that one reserved (counted) and warns.

    A ledger replaced since the reservation is no failure to warn about but the fit's
    error when committing (the release was drawn and its ledger is gone: raised after
    the others are settled); when cancelling, the original ledger is gone with its row.
    """
    replaced: LedgerReplacedError | None = None
    for reservation in reservations:
        try:
            getattr(reservation, action)()
        except LedgerReplacedError as error:
            if action == "commit" and replaced is None:
                replaced = error
        except (LedgerError, TimeoutError) as error:
            warnings.warn(
                f"could not {action} {reservation!r} ({error}); it stays reserved "
                "and counts as spent",
                RuntimeWarning,
                stacklevel=3,
            )
    if replaced is not None:
        raise replaced


class BudgetCarrier:
    """Mixin for estimators: copies keep charging the budgets active where they were made.

    A copy made by pickling (how joblib/loky hands an estimator to a worker process) or
    ``copy.deepcopy`` carries every budget active at that moment and those the original
    already carried; scikit-learn's ``clone`` keeps the ones the original carries.  A fit
    of the copy charges them, in whichever process it runs: a ledger budget is reopened
    by path there; an in-memory budget cannot be charged from another process, so such a
    fit is refused (``LedgerError``) instead of going uncharged.
    """

    @property
    def carried_budgets(self) -> tuple[PrivacyBudget, ...]:
        """The budgets this estimator charges in addition to the active ones."""
        carried: tuple[PrivacyBudget, ...] = self.__dict__.get("_carried_budgets", ())
        return carried

    def __getstate__(self) -> dict[str, Any]:
        # A copy: object.__getstate__ returns the live __dict__ (typed as object; the
        # estimators this mixes into have one, and scikit-learn's returns a dict).
        state = dict(cast("dict[str, Any]", super().__getstate__()))
        # Pickling itself never refuses: a fit of the copy checks where it runs.
        carried = _unique(
            [*self.carried_budgets, *active_budgets(refuse_in_memory_ancestors=False)]
        )
        if carried:
            state["_carried_budgets"] = carried
        return state

    def __sklearn_clone__(self) -> Self:
        # A mixin: scikit-learn's BaseEstimator, after it in the MRO, has the method.
        clone: Self = super().__sklearn_clone__()  # type: ignore[misc]
        if self.carried_budgets:
            clone.__dict__["_carried_budgets"] = self.carried_budgets
        return clone
