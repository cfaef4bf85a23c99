"""A privacy budget that composes releases tightly, and that no fit escapes.

:class:`PrivacyBudget` keeps its releases in a ledger (:mod:`.ledger`: in this process,
or a SQLite file shared by every process) and admits one more only if the exact
composition of every counted release still fits its (epsilon, delta)
(:mod:`.arithmetic`).  A fit *reserves* its release before the noise is drawn and
*commits* it after (:class:`Reservation`), so a crash in between never under-counts.
Which budgets a fit charges is :mod:`.charging`'s job.  The design (exact Gaussian-DP
composition, why not a PLD accountant, sampler excess, storage): docs/ledger.md.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ...validation import nonnegative_finite, positive_finite
from ..mechanisms.calibration import validate_privacy_parameters
from ..mechanisms.charges import GaussianCharge, PartsCharge, charge_of
from .arithmetic import BudgetArithmetic, BudgetExceededError
from .ledger import (
    Ledger,
    MemoryLedger,
    Resolution,
    SQLiteLedger,
    UnreachableLedger,
    ledger_path,
)
from .ledger_rows import LedgerError, LedgerReplacedError, Release
from .registry import (
    BudgetKey,
    enter_budget,
    exit_budget,
    find_in_memory,
    open_budgets,
    remember_in_memory,
)
from .report import render_html, render_text, report_data, stage_name

__all__ = [
    "BudgetExceededError",
    "LedgerError",
    "LedgerReplacedError",
    "PrivacyBudget",
    "Release",
    "Reservation",
    "open_budgets",
    "stage_name",
]


class _AlreadyCharged(Exception):
    """reserve_once: the ledger already counts this fit (nothing is recorded)."""


def _check_release(sensitivity: float, sigma: float, excess: float) -> tuple[float, float, float]:
    return (
        nonnegative_finite("sensitivity", sensitivity),
        positive_finite("sigma", sigma),
        nonnegative_finite("excess", excess),
    )


def _positive_count(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: must be a positive integer, got {k!r}")
    return k


class PrivacyBudget:
    """An (epsilon, delta) budget over a sequence of Gaussian releases.

    Make it the default (:func:`.set_default_budget`) or enter it with ``with`` so that
    every :class:`~.DPPCA` fit reserves its release from it before drawing
    noise; or call :meth:`check`, :meth:`spend` and :meth:`reserve` directly::

        budget = PrivacyBudget(epsilon=2.0, delta=1e-5, ledger="study.ledger", create=True)
        with budget:
            DPPCA(epsilon=1.0, delta=1e-6).fit(X)
        budget.remaining()        # epsilon of one more release at delta=1e-5
        print(budget.describe())

    Composition is exact Gaussian-DP composition (docs/ledger.md): four releases at
    (1, 1e-6) each fit in (2.5, 1e-5), where summing epsilons would claim 4.

    Parameters
    ----------
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    ledger : str or os.PathLike, optional
        A ledger file (path or ``file://`` URL) holding the totals and every release,
        shared by every process that opens it and kept across restarts.  It must exist
        unless ``create`` is set (a deleted ledger never comes back full by itself).
        Opening one that holds other totals raises ``ValueError``.  Without it the
        releases are kept in this process only.
    create : bool, default False
        Create the ledger file with these totals if it does not exist (an existing one
        with these totals is opened).  A budget without a ledger is always new.

    Raises
    ------
    LedgerError
        If ``ledger`` does not exist and ``create`` is not set, or it holds no sound
        ledger (damaged, edited: its hash chain is checked).

    Examples
    --------
    >>> import dask_dppca as dd
    >>> budget = dd.PrivacyBudget(epsilon=2.0, delta=1e-5)  # in memory: this process only
    >>> budget.spend(dd.GaussianCharge(sensitivity=1.0, sigma=5.0), label="a release")
    >>> budget.releases
    1
    >>> 0 < budget.remaining() < 2.0
    True
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        ledger: str | os.PathLike[str] | None = None,
        *,
        create: bool = False,
    ) -> None:
        epsilon, delta = validate_privacy_parameters(epsilon, delta)
        if not isinstance(create, bool):
            raise ValueError(f"create: must be True or False, got {create!r}")
        if ledger is None:
            self._setup(epsilon, delta, MemoryLedger(), token=uuid.uuid4().hex)
        else:
            store = SQLiteLedger.open_or_create(ledger_path(ledger), epsilon, delta, create)
            self._setup(epsilon, delta, store)

    @classmethod
    def open(cls, ledger: str | os.PathLike[str]) -> PrivacyBudget:
        """The budget of an existing ledger file, with the totals it holds.

        Raises
        ------
        LedgerError
            If there is no ledger at ``ledger``.
        """
        store = SQLiteLedger.open(ledger_path(ledger))
        return cls._from(*store.totals, store)

    @classmethod
    def _from(
        cls, epsilon: float, delta: float, store: Ledger, token: str | None = None
    ) -> PrivacyBudget:
        budget = cls.__new__(cls)
        budget._setup(epsilon, delta, store, token)
        return budget

    def _setup(self, epsilon: float, delta: float, store: Ledger, token: str | None = None) -> None:
        self.epsilon, self.delta = epsilon, delta
        self._ledger = store
        where = f", ledger {store.location}" if store.location else ""
        self._arithmetic = BudgetArithmetic(epsilon, delta, where)
        if store.location is not None:
            self._key: BudgetKey = ("file", store.location)
        else:
            self._key = ("memory", token)
            if isinstance(store, MemoryLedger):
                assert token is not None  # __init__ gives every in-memory budget a token
                remember_in_memory(token, self)

    @property
    def ledger(self) -> str | None:
        """Absolute path of the ledger file, or None for a budget kept in memory."""
        return self._ledger.location

    # -- pickling: a ledger budget reopens its file; an in-memory one cannot leave ----------

    def __reduce__(self) -> tuple[Callable[..., PrivacyBudget], tuple[Any, ...]]:
        if self.ledger is not None:
            ledger_id = getattr(self._ledger, "ledger_id", "")
            return (_reopen, (self.ledger, self.epsilon, self.delta, ledger_id))
        return (_find_in_memory, (self._key[1], os.getpid(), self.epsilon, self.delta))

    # -- the context manager: open in every thread of the process ----------------------------

    def __enter__(self) -> PrivacyBudget:
        enter_budget(self._key, self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        exit_budget(self._key)

    def _counted(self) -> list[Release]:
        return [row for row in self._ledger.rows() if row.counted]

    # -- charging ---------------------------------------------------------------------------

    def check(self, charge: GaussianCharge | Any) -> None:
        """Raise if one more Gaussian release would exceed the budget now.

        Another thread or process may spend in between: :meth:`reserve` checks and
        records in one step.

        Parameters
        ----------
        charge : GaussianCharge or mechanism
            The release's charge, or a mechanism offering it as ``.charge``.

        Raises
        ------
        BudgetExceededError
            If the composition with this release is not (epsilon, delta)-DP.
        """
        c = charge_of(charge)
        if isinstance(c, PartsCharge):
            self._arithmetic.admit_parts(c.parts, self._counted())
            return
        self._arithmetic.admit(*_check_release(c.sensitivity, c.sigma, c.excess), self._counted())

    def reserve(
        self, charge: GaussianCharge | Any, *, label: str = "", fit_id: str = "", dataset: str = ""
    ) -> Reservation:
        """Check and record one release as *reserved*, atomically; it counts as spent.

        Call it before the noise is drawn, then :meth:`Reservation.commit` after (or
        :meth:`Reservation.cancel` if the noise was provably never drawn).

        Parameters
        ----------
        charge : GaussianCharge or mechanism
            As in :meth:`check`.
        label, fit_id, dataset : str
            Stored with the record.

        Returns
        -------
        Reservation

        Raises
        ------
        BudgetExceededError
            Nothing is recorded then.
        """
        return Reservation(
            self, self._record("reserved", charge_of(charge), label, fit_id, dataset)
        )

    def reserve_once(
        self, charge: GaussianCharge | Any, *, fit_id: str, label: str = "", dataset: str = ""
    ) -> Reservation | None:
        """:meth:`reserve`, unless this ledger already counts a release of ``fit_id``.

        For the ledger configured where the noise is drawn: when it is the very file the
        fit's client already reserved in, the fit is charged there once, not twice.  The
        look and the insert are one transaction.

        Returns
        -------
        Reservation or None
            None when a counted row of ``fit_id`` was already there (nothing recorded).

        Raises
        ------
        BudgetExceededError
            Nothing is recorded then.
        """
        if not fit_id:
            raise ValueError("fit_id: reserve_once needs the fit's id")
        release, admit_one = self._row("reserved", charge_of(charge), label, fit_id, dataset)

        def admit(rows: Sequence[Release]) -> None:
            if any(row.fit_id == fit_id for row in rows):
                raise _AlreadyCharged
            admit_one(rows)

        try:
            return Reservation(self, self._ledger.record(release, admit))
        except _AlreadyCharged:
            return None

    def reserve_together(
        self, charges: Sequence[tuple[str, GaussianCharge | Any, str]], *, dataset: str = ""
    ) -> list[Reservation]:
        """Check and record several releases as *reserved*, all in one atomic step.

        The releases of one analysis: they are admitted together (their composition with
        every counted row must fit) and recorded together, so another process spending in
        between sees all of them or none.  Each row records its dispatch
        (:meth:`Reservation.dispatch`): a row never dispatched provably drew nothing and is
        given back by its owner, or by ``budget resolve``.

        Parameters
        ----------
        charges : sequence of (fit_id, charge, label)
            One row each: its release id, its charge (as in :meth:`check`) and its label.
        dataset : str
            Stored with every row.

        Returns
        -------
        list of Reservation
            In the order of ``charges``.

        Raises
        ------
        BudgetExceededError
            Nothing is recorded then.
        """
        if not charges:
            raise ValueError("charges: reserve_together needs at least one release")
        rows = []
        for fit_id, charge, label in charges:
            row, _ = self._row("reserved", charge_of(charge), label, fit_id, dataset)
            rows.append(dataclasses.replace(row, stage="reserved"))

        def admit(counted: Sequence[Release]) -> None:
            self._arithmetic.admit_rows(rows, counted)

        return [Reservation(self, row) for row in self._ledger.record_many(rows, admit)]

    def spend(self, charge: GaussianCharge | Any, label: str = "") -> None:
        """Check, then record one Gaussian release as committed, atomically.

        Parameters
        ----------
        charge : GaussianCharge or mechanism
            As in :meth:`check`.
        label : str
            Free text stored with the record.

        Raises
        ------
        BudgetExceededError
            Nothing is recorded then.
        """
        self._record("committed", charge_of(charge), label, "", "")

    def _record(
        self,
        state: str,
        charge: GaussianCharge | PartsCharge,
        label: str,
        fit_id: str,
        dataset: str,
    ) -> Release:
        release, admit = self._row(state, charge, label, fit_id, dataset)
        return self._ledger.record(release, admit)

    def _row(
        self,
        state: str,
        charge: GaussianCharge | PartsCharge,
        label: str,
        fit_id: str,
        dataset: str,
    ) -> tuple[Release, Callable[[Sequence[Release]], None]]:
        """The row recording ``charge`` and the check that admits it after the counted rows."""
        # A parts row keeps sensitivity 0 and sigma 1 (mu 0): its cost is in its parts.
        row = Release(
            0.0,
            1.0,
            label=str(label),
            fit_id=str(fit_id),
            dataset=str(dataset),
            epsilon=None if charge.epsilon is None else float(charge.epsilon),
            delta=None if charge.delta is None else float(charge.delta),
            state=state,
            reserved_at=time.time(),
            stage="reserved" if state == "reserved" else None,
        )
        if isinstance(charge, PartsCharge):
            # No stage: the statistic releases mark no dispatch, so `budget resolve` must
            # treat a reserved parts row as possibly drawn (never cancel it).
            parts = charge.parts
            row = dataclasses.replace(row, parts=parts, stage=None)
            return row, lambda rows: self._arithmetic.admit_parts(parts, rows)
        sens, sig, exc = _check_release(charge.sensitivity, charge.sigma, charge.excess)
        row = dataclasses.replace(row, sensitivity=sens, sigma=sig, excess=exc)
        return row, lambda rows: self._arithmetic.admit(sens, sig, exc, rows)

    # -- planning --------------------------------------------------------------------------

    def min_sigma(self, sensitivity: float, excess: float = 0.0) -> float:
        """Smallest sigma that :meth:`check` accepts now for this sensitivity.

        Parameters
        ----------
        sensitivity : float
            > 0.
        excess : float, default 0.0

        Returns
        -------
        float

        Raises
        ------
        BudgetExceededError
            If no sigma fits (the budget is spent).
        """
        sens, _, exc = _check_release(sensitivity, 1.0, excess)
        if not sens > 0.0:
            raise ValueError(f"sensitivity: must be > 0, got {sens!r}")
        return self._arithmetic.min_sigma(self._counted(), sens, exc)

    def remaining(self, k: int = 1) -> float:
        """The largest epsilon each of ``k`` more releases at the budget's delta may have.

        Exact for the composition: ``k`` releases calibrated to ``(remaining(k),
        delta)`` (analytic calibration, exact sampler) fit, and any larger epsilon does
        not.  Releases from a sampler with a privacy excess (the lattice sampler, d > 154)
        need a margin of about ``2 k`` times that excess.

        Parameters
        ----------
        k : int, default 1

        Returns
        -------
        float
            0.0 when the budget has no room left.
        """
        return self._arithmetic.remaining(self._counted(), _positive_count(k))

    # -- reporting -------------------------------------------------------------------------

    @property
    def spent(self) -> list[Release]:
        """The releases that count as spent (reserved or committed), oldest first."""
        return self._counted()

    @property
    def releases(self) -> int:
        """Number of releases that count as spent."""
        return len(self._counted())

    @property
    def spent_mu(self) -> float:
        """Gaussian-DP parameter of the Gaussian releases so far, ``sqrt(sum mu_i^2)``
        (the other parts, if any, are composed exactly in :attr:`spent_epsilon`).
        """
        return self._arithmetic.spent_mu(self._counted())

    @property
    def spent_epsilon(self) -> float:
        """Smallest epsilon the composition so far satisfies at the budget's delta."""
        return self._arithmetic.spent_epsilon(self._counted())

    @property
    def remaining_epsilon(self) -> float:
        """``epsilon - spent_epsilon`` (>= 0), reported at the budget's delta.

        For information only: under tight composition budgets do not subtract, so
        plan with :meth:`remaining`, and use :meth:`check` or :meth:`min_sigma` to
        decide whether a given release fits.
        """
        return max(0.0, self.epsilon - self.spent_epsilon)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (``dask-dppca budget show --json``), from one read.

        Returns
        -------
        dict
            ``ledger``, ``epsilon``, ``delta`` (the totals); ``counts`` (releases per
            state, and how many count as spent); ``spent`` (``epsilon`` at the budget's
            delta and ``mu``); ``remaining`` (the epsilon each of 1, 2 or 4 more
            releases may have); ``releases``: every row with all its columns, its
            ``mu`` and whether it ``counted``.  Times are Unix seconds; JSON-ready (no
            NaN: an exhausted budget's spent epsilon is ``null`` when infinite).
        """
        return report_data(self._arithmetic, self.ledger, self._ledger.rows())

    def resolve(self, release_id: int | None = None) -> list[Resolution]:
        """Settle the reserved rows that processes which stopped left behind.

        A row whose release was never dispatched provably drew no noise and is
        cancelled (given back); any other reserved row may have drawn and is committed
        (it stays spent); one whose process still runs on this machine is left to it.
        See :meth:`~dask_dppca.privacy.budget.ledger.SQLiteLedger.resolve`.

        Parameters
        ----------
        release_id : int, optional
            One row (``id``); by default every reserved row.

        Returns
        -------
        list of Resolution
            One per row looked at: the row, what was done, and why.

        Raises
        ------
        LedgerError
            For a budget without a ledger file (nothing outlives its process), or a
            ``release_id`` the ledger does not hold.
        """
        if not isinstance(self._ledger, SQLiteLedger):
            raise LedgerError(
                "resolve: this budget has no ledger file; its reservations end with its process"
            )
        return self._ledger.resolve(release_id)

    def describe(self) -> str:
        """A plain-text report: totals, spent, remaining, and a table of every release
        (an analysis's stages on one line).
        """
        return render_text(self._arithmetic, self.ledger, self._ledger.rows())

    def _repr_html_(self) -> str:
        return render_html(self._arithmetic, self.ledger, self._ledger.rows())

    def __repr__(self) -> str:
        where = f", ledger={self.ledger!r}" if self.ledger else ""
        try:
            state = f"releases={self.releases}, spent_epsilon={self.spent_epsilon:.6g}"
        except LedgerError as error:
            state = f"unreachable: {error}"
        return f"PrivacyBudget(epsilon={self.epsilon!r}, delta={self.delta!r}{where}, {state})"


def _reopen(path: str, epsilon: float, delta: float, ledger_id: str = "") -> PrivacyBudget:
    """Unpickle a ledger budget: the same file, the same ledger (its id checked on each
    use), never created here.
    """
    return PrivacyBudget._from(epsilon, delta, SQLiteLedger(path, epsilon, delta, ledger_id))


def _find_in_memory(token: str, pid: int, epsilon: float, delta: float) -> PrivacyBudget:
    """Unpickle an in-memory budget: itself in its own process, else one that refuses use."""
    found = find_in_memory(token) if pid == os.getpid() else None
    if isinstance(found, PrivacyBudget):
        return found
    reason = (
        f"PrivacyBudget(epsilon={epsilon:g}, delta={delta:g}) has no ledger file: it lives "
        f"in process {pid} only and cannot be charged from process {os.getpid()}; create it "
        "with ledger=PATH so that other processes can charge it"
    )
    return PrivacyBudget._from(epsilon, delta, UnreachableLedger(reason), token)


class Reservation:
    """A release reserved in a budget: it counts as spent until cancelled.

    Attributes
    ----------
    budget : PrivacyBudget
    release : Release
        The recorded row (``release.id`` is its ledger row).
    """

    def __init__(self, budget: PrivacyBudget, release: Release) -> None:
        self.budget = budget
        self.release = release

    def _ids(self) -> dict[str, Any]:
        """What names this reservation's row: its fit and its ledger, with its row id."""
        return {"fit_id": self.release.fit_id, "ledger_id": self.release.ledger_id}

    def dispatch(self) -> None:
        """Record that the release is handed to the code that draws its noise.

        Call it before anything can draw: until then the ledger proves that nothing was
        drawn (``budget resolve`` cancels such a row of a process that died).

        Raises
        ------
        LedgerError
            If the row is no longer reserved (``budget resolve`` cancelled it): the
            release must not draw then.
        LedgerReplacedError
            If the ledger file was replaced since the reservation: the release must not
            draw either (nothing was released).
        """
        try:
            self.budget._ledger.dispatch(self.release.id, **self._ids())
        except LedgerReplacedError as error:
            raise LedgerReplacedError(
                f"{error}; stopped before drawing the noise: nothing was released"
            ) from None

    def commit(self) -> None:
        """Mark the release committed: its noise was drawn and released.

        Raises
        ------
        LedgerReplacedError
            If the ledger file was replaced since the reservation: the release was drawn
            and is charged only to the original ledger, which no longer exists.
        """
        try:
            self.budget._ledger.settle(self.release.id, "committed", **self._ids())
        except LedgerReplacedError as error:
            raise LedgerReplacedError(
                f"{error}; the release WAS drawn and was charged (reserved) only in the "
                f"original ledger {self.release.ledger_id}, which no longer exists there: it "
                "is not counted in the file there now"
            ) from None

    def cancel(self) -> None:
        """Give the reservation back.  Only when the noise was provably never drawn."""
        self.budget._ledger.settle(self.release.id, "cancelled", **self._ids())

    def __repr__(self) -> str:
        return f"Reservation(release {self.release.id} in {self.budget!r})"
