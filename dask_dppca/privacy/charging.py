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
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self, cast

from .budget import (
    BUDGET_ENV,
    BudgetKey,
    PrivacyBudget,
    Reservation,
    open_budgets,
    publish_budgets,
)
from .ledger import LedgerError, ledger_path
from .lineage import ancestor_budgets

__all__ = [
    "BUDGET_ENV",
    "BudgetCarrier",
    "BudgetRequiredError",
    "active_budgets",
    "current_budget",
    "default_budget",
    "release_dispatched",
    "reserve_release",
    "set_default_budget",
]

_DEFAULT_LOCK = threading.RLock()
_DEFAULT: dict[str, PrivacyBudget] = {}  # ledger path -> the default budget opened on it
# Fit id -> its reservations not yet dispatched (see release_dispatched).
_UNDISPATCHED: dict[str, tuple[Reservation, ...]] = {}
_UNDISPATCHED_LOCK = threading.Lock()


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
                "charge it; use PrivacyBudget(epsilon, delta, ledger=PATH)"
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


def active_budgets(refuse_in_memory_ancestors: bool = True) -> tuple[PrivacyBudget, ...]:
    """The budgets a fit in this process charges now: the default, every open ``with``
    block (in any thread), outermost first, then every ledger a running ancestor process
    registered (:mod:`.lineage`); one entry per ledger.

    Parameters
    ----------
    refuse_in_memory_ancestors : bool, default True
        Raise when an ancestor holds an in-memory budget (False: leave it out).

    Raises
    ------
    LedgerError
        If an ancestor process holds an in-memory budget (no other process can charge
        it: the fit is refused rather than left uncharged), or a ledger is missing.
    """
    default = default_budget()
    inherited = ancestor_budgets()
    if inherited.memory_in and refuse_in_memory_ancestors:
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
    return _unique(([default] if default is not None else []) + open_budgets() + from_ancestors)


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

    The code that draws calls :func:`release_dispatched` with ``fit_id`` before anything
    can draw: each ledger row then records that its release was dispatched (until then
    the row proves that nothing was drawn, ``budget resolve``).

    Yields
    ------
    tuple of Reservation
        Empty when no budget is active.
    """
    budgets = _unique([*active_budgets(), *carried, *_named(named)])
    if required and not budgets:
        raise BudgetRequiredError(
            "this fit must be charged to a privacy budget (the budget-required flag is set) "
            "but has none: set a default ledger (dd.set_default_budget, DASK_DPPCA_BUDGET or "
            "the Dask configuration key dask-dppca.ledger), open a budget with 'with', or "
            "pass --budget LEDGER; nothing was released"
        )
    reservations: list[Reservation] = []
    try:
        for budget in budgets:
            reservations.append(
                budget.reserve(
                    mechanism, label=label or f"DPPCA fit {fit_id}", fit_id=fit_id, dataset=dataset
                )
            )
    except BaseException:
        _settle(reservations, "cancel")
        _cancel_strays(budgets, reservations, fit_id)
        raise
    if fit_id:
        with _UNDISPATCHED_LOCK:
            _UNDISPATCHED[fit_id] = tuple(reservations)
    try:
        yield tuple(reservations)
    except BaseException:
        if reservations and abandon is not None and abandon():
            _settle(reservations, "cancel")
        raise
    else:
        _settle(reservations, "commit")
    finally:
        with _UNDISPATCHED_LOCK:
            _UNDISPATCHED.pop(fit_id, None)


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
        it) or cannot be written: the release must not draw then.
    """
    with _UNDISPATCHED_LOCK:
        reservations = _UNDISPATCHED.pop(fit_id, ())
    for reservation in reservations:
        reservation.dispatch()


def _cancel_strays(
    budgets: Sequence[PrivacyBudget], reservations: Sequence[Reservation], fit_id: str
) -> None:
    """Cancel rows of ``fit_id`` that this process reserved but never got back: an
    interrupt (SIGINT, SIGTERM) after a row was written and before ``reserve`` returned.
    Nothing was dispatched yet, so nothing was drawn.
    """
    if not fit_id:
        return
    known = {(r.budget._key, r.release.id) for r in reservations}
    for budget in budgets:
        try:
            strays = [
                row
                for row in budget._ledger.rows()
                if row.fit_id == fit_id
                and row.pid == os.getpid()
                and row.state == "reserved"
                and (budget._key, row.id) not in known
            ]
            for row in strays:
                budget._ledger.settle(row.id, "cancelled")
        except (LedgerError, TimeoutError):
            pass  # a row left reserved counts as spent: never an under-count


def _settle(reservations: Sequence[Reservation], action: str) -> None:
    """Commit or cancel each; a failure leaves that one reserved (counted) and warns."""
    for reservation in reservations:
        try:
            getattr(reservation, action)()
        except (LedgerError, TimeoutError) as error:
            warnings.warn(
                f"could not {action} {reservation!r} ({error}); it stays reserved "
                "and counts as spent",
                RuntimeWarning,
                stacklevel=3,
            )


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
