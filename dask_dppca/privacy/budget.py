"""A privacy budget that composes Gaussian releases tightly, and that no fit escapes.

Accounting.  Every release of this package is a Gaussian mechanism: l2 sensitivity
``Delta_i``, noise ``sigma_i``, i.e. ``mu_i``-Gaussian DP with ``mu_i = Delta_i /
sigma_i``.  Gaussian DP composes *exactly* (Dong, Roth & Su 2022, Corollary 3.3; also
under adaptive choice of the releases): k releases together are ``mu``-GDP with
``mu = sqrt(sum mu_i^2)``, which is (epsilon, delta)-DP exactly when the Balle-Wang
profile ``delta(epsilon; mu)`` is at most delta.  So the budget keeps the releases
and evaluates that closed form over them
(:func:`~dask_dppca.privacy.calibration.gaussian_dp_delta`).

Why not dp_accounting's PLD accountant for the bookkeeping: for Gaussian events it is
the same curve computed through a pessimistic discretisation of the privacy-loss
distribution (it over-reports epsilon by ~1e-4 at its default grid), slower, and
would make a release calibrated exactly to the budget fail the check.  It is the
well-kept *independent* implementation, so tests/privacy/test_budget.py checks this closed
form against ``PLDAccountant`` composing ``GaussianDpEvent`` s.

A sampler whose law is within ``e^(+-A)`` of the ideal one
(:meth:`~dask_dppca.privacy.noise.NoiseSampler.privacy_excess`) is recorded with its
``excess``; excesses add under composition and are charged as in
:func:`~dask_dppca.privacy.calibration.calibrate_sigma`.

Storage.  The releases live in a :mod:`~dask_dppca.privacy.ledger`: a list in this
process, or, with ``ledger=PATH``, a SQLite file that every thread and process shares
and that survives restarts.  A fit *reserves* its release (checked and recorded in one
transaction) before the noise is drawn and *commits* it after; a reservation counts as
spent, so a crash in between never under-counts.

Which budgets a fit charges (the default, open ``with`` blocks, carried ones) is
:mod:`~dask_dppca.privacy.charging`'s job.
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..validation import nonnegative_finite, positive_finite
from . import lineage
from .accounting import Composition, compose
from .calibration import (
    DELTA_RELATIVE_ERROR,
    _apply_excess,
    _log_delta,
    gaussian_dp_epsilon,
    gaussian_dp_mu,
    validate_privacy_parameters,
)
from .contract import ChargedGaussian, CompositeMechanism, Mechanism
from .ledger import (
    Ledger,
    LedgerError,
    LedgerReplacedError,
    MemoryLedger,
    Release,
    Resolution,
    SQLiteLedger,
    UnreachableLedger,
    ledger_path,
)
from .parts import GaussianPart, PrivacyPart, PureDPPart, part_to_dict

__all__ = [
    "BudgetExceededError",
    "GaussianCharge",
    "LedgerError",
    "LedgerReplacedError",
    "PartsCharge",
    "PrivacyBudget",
    "Release",
    "Reservation",
    "charge_of",
    "open_budgets",
    "stage_name",
]

# sqrt(sum mu_i^2) is rounded up by this factor so that float rounding never
# under-reports the composition; calibration allows for twice as much
# (calibration.MU_ROUND_UP), so a sigma calibrated to the whole budget fits.
_ROUND_UP = 1.0 + 8.0 * 2.0**-53

# Process-wide state: the budgets whose ``with`` block is open (key -> [budget, depth], in
# entry order), and the in-memory budgets by pickling token.
_STATE_LOCK = threading.RLock()
#: What tells budgets apart: ``("file", path)`` or ``("memory", token)``.
BudgetKey = tuple[str, str | None]
_OPEN: dict[BudgetKey, list[Any]] = {}  # key -> [budget, depth]
_IN_MEMORY: weakref.WeakValueDictionary[str, PrivacyBudget] = weakref.WeakValueDictionary()


#: Environment variable naming the ledger of the default budget (inherited by child
#: processes); see :mod:`~dask_dppca.privacy.charging`.
BUDGET_ENV = "DASK_DPPCA_BUDGET"


def publish_budgets() -> None:
    """Register this process's default and open budgets for its child processes
    (:mod:`~dask_dppca.privacy.lineage`).
    """
    with _STATE_LOCK:
        opened = [budget for budget, _ in _OPEN.values()]
        ledgers = [budget.ledger for budget in opened if budget.ledger is not None]
        default = os.environ.get(BUDGET_ENV)
        if default:
            try:
                ledgers.insert(0, ledger_path(default))
            except ValueError:
                pass  # a fit here refuses it (charging.default_budget)
        memory = any(budget.ledger is None for budget in opened)
        lineage.register(list(dict.fromkeys(ledgers)), memory)


class BudgetExceededError(RuntimeError):
    """A release would exceed the (epsilon, delta) of a privacy budget."""


class _AlreadyCharged(Exception):
    """reserve_once: the ledger already counts this fit (nothing is recorded)."""


@dataclass(frozen=True)
class GaussianCharge:
    """What a budget charges for one Gaussian release: ``mu = sensitivity / sigma``.

    A mechanism offers its charge as ``mechanism.charge``; the budget's
    :meth:`~PrivacyBudget.check`, :meth:`~PrivacyBudget.reserve` and
    :meth:`~PrivacyBudget.spend` take either.

    Attributes
    ----------
    sensitivity : float
        The l2 sensitivity the noise is calibrated to (slack included), >= 0.
    sigma : float
        The noise scale, > 0.
    excess : float
        The sampler's privacy excess (0 for an exact sampler).
    epsilon, delta : float or None
        The release's own calibration target, kept for the record (the budget composes
        ``sensitivity / sigma``, not these).
    """

    sensitivity: float
    sigma: float
    excess: float = 0.0
    epsilon: float | None = None
    delta: float | None = None


@dataclass(frozen=True)
class PartsCharge:
    """What a budget charges for a release stated as parts (:mod:`.parts`).

    Mixed parts (Gaussian, pure and approximate DP) are composed exactly with every
    other release (:mod:`.accounting`).  A mechanism offering ``.parts`` (and no
    ``.charge``) is charged this way.

    Attributes
    ----------
    parts : tuple of PrivacyPart
        At least one.
    epsilon, delta : float or None
        For the record only.
    """

    parts: tuple[PrivacyPart, ...]
    epsilon: float | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        if not parts or not all(
            isinstance(p, (GaussianPart, PureDPPart)) or hasattr(p, "delta") for p in parts
        ):
            raise ValueError(f"parts: expected one or more privacy parts, got {self.parts!r}")
        object.__setattr__(self, "parts", parts)


def charge_of(item: Any) -> GaussianCharge | PartsCharge:
    """The charge of a mechanism (:mod:`.contract`: exactly its parts) or a charge itself.

    A :class:`~.contract.Mechanism` or :class:`~.contract.CompositeMechanism` is charged
    its ``parts``.  A :class:`~.contract.ChargedGaussian` (the g-DPPCA release) keeps its
    Gaussian charge, whose row records the sampler's excess beside the part; that charge
    must be its one part.

    Raises
    ------
    TypeError
        For anything else.
    ValueError
        For a Gaussian charge that is not its mechanism's parts.
    """
    if isinstance(item, (GaussianCharge, PartsCharge)):
        return item
    if not isinstance(item, (Mechanism, CompositeMechanism)):
        raise TypeError(
            f"charge: expected a GaussianCharge, a PartsCharge or a mechanism (parts, "
            f"release, describe), got {type(item).__name__}"
        )
    parts = tuple(item.parts)
    if isinstance(item, ChargedGaussian):
        charge = item.charge
        if parts != (GaussianPart(charge.sensitivity / charge.sigma),):
            raise ValueError(
                f"charge: {type(item).__name__}'s Gaussian charge is not its parts {parts!r}"
            )
        return charge
    return PartsCharge(parts)


def _is_discrete(part: PrivacyPart) -> bool:
    return not isinstance(part, GaussianPart)


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

    Composition is exact Gaussian-DP composition (module docstring): four releases at
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
        if store.location is not None:
            self._key: BudgetKey = ("file", store.location)
        else:
            self._key = ("memory", token)
            if isinstance(store, MemoryLedger):
                assert token is not None  # __init__ gives every in-memory budget a token
                _IN_MEMORY[token] = self

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
        with _STATE_LOCK:
            entry = _OPEN.setdefault(self._key, [self, 0])
            entry[1] += 1
            if entry[1] == 1:
                publish_budgets()  # for child processes, whenever they were started
        return self

    def __exit__(self, *exc_info: object) -> None:
        with _STATE_LOCK:
            entry = _OPEN[self._key]
            entry[1] -= 1
            if entry[1] == 0:
                del _OPEN[self._key]
                publish_budgets()

    # -- accounting -----------------------------------------------------------------------

    def _counted(self) -> list[Release]:
        return [row for row in self._ledger.rows() if row.counted]

    @staticmethod
    def _composed(
        rows: Sequence[Release], extra: Sequence[tuple[float, float]] = ()
    ) -> tuple[float, float]:
        """(mu, excess) of ``rows`` plus extra (mu, excess) pairs, mu rounded up."""
        squares = [r.mu**2 for r in rows] + [mu**2 for mu, _ in extra]
        squares += [p.mu**2 for r in rows for p in r.parts if isinstance(p, GaussianPart)]
        excess = [r.excess for r in rows] + [exc for _, exc in extra]
        return math.sqrt(math.fsum(squares)) * _ROUND_UP, math.fsum(excess)

    @staticmethod
    def _mixed(rows: Sequence[Release], extra: Sequence[PrivacyPart] = ()) -> bool:
        """Whether ``rows`` and ``extra`` hold any non-Gaussian part (exact accountant)."""
        return any(_is_discrete(p) for p in extra) or any(
            _is_discrete(p) for r in rows for p in r.parts
        )

    @staticmethod
    def _composition(
        rows: Sequence[Release], extra: Sequence[PrivacyPart] = ()
    ) -> tuple[Composition, float]:
        """The exact composition of ``rows`` and ``extra`` parts, and the summed excess."""
        parts: list[PrivacyPart] = [GaussianPart(r.mu) for r in rows if r.mu > 0.0]
        parts += [p for r in rows for p in r.parts]
        parts += list(extra)
        return compose(parts), math.fsum(r.excess for r in rows)

    def _fits_parts(
        self, rows: Sequence[Release], extra: Sequence[PrivacyPart], excess: float = 0.0
    ) -> bool:
        """Whether ``rows`` plus ``extra`` parts (plus ``excess``) meet the budget."""
        if not self._mixed(rows, extra):
            squares = [p.mu for p in extra if isinstance(p, GaussianPart)]
            mu, total = self._composed(rows, [(m, 0.0) for m in squares])
            return self._fits(mu, total + excess)
        composition, total = self._composition(rows, extra)
        target = self._target(total + excess)
        if target is None:
            return False
        eps, dlt = target
        return composition.delta(eps) <= dlt * (1.0 - DELTA_RELATIVE_ERROR)

    def _target(self, excess: float) -> tuple[float, float] | None:
        """(epsilon, delta) the ideal Gaussian must meet; None if the excess leaves none."""
        try:
            return _apply_excess(self.epsilon, self.delta, excess)
        except ValueError:
            return None

    def _fits(self, mu: float, excess: float) -> bool:
        target = self._target(excess)
        if target is None:
            return False
        eps, dlt = target
        return _log_delta(eps, mu) <= math.log(dlt * (1.0 - DELTA_RELATIVE_ERROR))

    def _admit(self, sens: float, sig: float, exc: float, rows: Sequence[Release]) -> None:
        """Raise BudgetExceededError unless one more release fits after ``rows``."""
        mu, total_excess = self._composed(rows, [(sens / sig, exc)])
        if self._mixed(rows):
            if sens > 0.0 and not self._fits_parts(rows, [GaussianPart(sens / sig)], exc):
                composition, excess = self._composition(rows, [GaussianPart(sens / sig)])
                target = self._target(excess + exc)
                needed = (
                    math.inf
                    if target is None
                    else composition.epsilon(target[1]) + 2.0 * (excess + exc)
                )
                raise self._refusal(needed, rows, f"sensitivity={sens:.6g}, sigma={sig:.6g}")
            return
        if not self._fits(mu, total_excess):
            needed = gaussian_dp_epsilon(mu, self.delta) + 2.0 * total_excess
            raise self._refusal(needed, rows, f"sensitivity={sens:.6g}, sigma={sig:.6g}")

    def _admit_parts(self, parts: Sequence[PrivacyPart], rows: Sequence[Release]) -> None:
        """Raise BudgetExceededError unless a release of ``parts`` fits after ``rows``."""
        if not self._fits_parts(rows, parts):
            composition, excess = self._composition(rows, parts)
            target = self._target(excess)
            needed = math.inf if target is None else composition.epsilon(target[1]) + 2.0 * excess
            raise self._refusal(needed, rows, ", ".join(_part_text(p) for p in parts))

    def _refusal(
        self, needed: float, counted: Sequence[Release], asked: str
    ) -> BudgetExceededError:
        """The refusal of a release (``asked``: its parts) after ``counted``: the need
        first, then what is left, then the parts.
        """
        return BudgetExceededError(
            f"needs epsilon={needed:.6g} at delta={self.delta:g} with the {len(counted)} "
            f"release(s) so far, which would exceed the budget (epsilon={self.epsilon:g}, "
            f"delta={self.delta:g}{self._where()}){self._left(counted)}; nothing was "
            f"reserved. Asked for: {asked}"
        )

    def _left(self, rows: Sequence[Release]) -> str:
        """What a refusal after ``rows`` says is left (:meth:`remaining`'s own number)."""
        return (
            f"; left: one more release of epsilon <= {self._remaining(rows, 1):.6g} at "
            f"delta={self.delta:g}"
        )

    def _where(self) -> str:
        return f", ledger {self.ledger}" if self.ledger else ""

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
            self._admit_parts(c.parts, self._counted())
            return
        self._admit(*_check_release(c.sensitivity, c.sigma, c.excess), self._counted())

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
            self._admit_rows(rows, counted)

        return [Reservation(self, row) for row in self._ledger.record_many(rows, admit)]

    def _admit_rows(self, new: Sequence[Release], counted: Sequence[Release]) -> None:
        """Raise BudgetExceededError unless every row of ``new`` fits after ``counted``."""
        together = [*counted, *new]
        if self._mixed(together):
            fits = self._fits_parts(together, [])
        else:
            fits = self._fits(*self._composed(together))
        if fits:
            return
        composition, excess = self._composition(together)
        target = self._target(excess)
        needed = math.inf if target is None else composition.epsilon(target[1]) + 2.0 * excess
        parts = [p for row in new for p in (row.parts or (GaussianPart(row.mu),))]
        raise self._refusal(
            needed, counted, f"{len(parts)} part(s), {', '.join(_part_text(p) for p in parts)}"
        )

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
            return row, lambda rows: self._admit_parts(parts, rows)
        sens, sig, exc = _check_release(charge.sensitivity, charge.sigma, charge.excess)
        row = dataclasses.replace(row, sensitivity=sens, sigma=sig, excess=exc)
        return row, lambda rows: self._admit(sens, sig, exc, rows)

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
        rows = self._counted()
        if self._mixed(rows):
            return self._min_sigma_mixed(rows, sens, exc)
        spent_mu, spent_excess = self._composed(rows)
        target = self._target(spent_excess + exc)
        room = 0.0
        if target is not None:
            room = gaussian_dp_mu(*target) ** 2 - spent_mu**2
        if not room > 0.0:
            raise BudgetExceededError(
                f"the budget (epsilon={self.epsilon:g}, delta={self.delta:g}{self._where()}) "
                "has no room left"
            )
        sigma = sens / math.sqrt(room)
        for _ in range(10_000):  # raise sigma until the exact check accepts it
            mu, total = self._composed(rows, [(sens / sigma, exc)])
            if self._fits(mu, total):
                return sigma
            sigma *= 1.0 + 2.0**-40
        raise BudgetExceededError("min_sigma: no sigma found within the budget")  # pragma: no cover

    def _min_sigma_mixed(self, rows: Sequence[Release], sens: float, exc: float) -> float:
        """:meth:`min_sigma` after releases with non-Gaussian parts: bisection on mu."""
        if not self._fits_parts(rows, [GaussianPart(1e-300)], exc):
            raise BudgetExceededError(
                f"the budget (epsilon={self.epsilon:g}, delta={self.delta:g}{self._where()}) "
                "has no room left"
            )
        lo, hi = 0.0, 1.0
        while self._fits_parts(rows, [GaussianPart(hi)], exc):
            lo, hi = hi, 2.0 * hi
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if mid > 0.0 and self._fits_parts(rows, [GaussianPart(mid)], exc):
                lo = mid
            else:
                hi = mid
        sigma = sens / lo if lo > 0.0 else math.inf
        for _ in range(10_000):  # the check a reservation makes, on the rounded mu
            if self._fits_parts(rows, [GaussianPart(sens / sigma)], exc):
                return sigma
            sigma *= 1.0 + 2.0**-40
        raise BudgetExceededError("min_sigma: no sigma found within the budget")  # pragma: no cover

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
        return self._remaining(self._counted(), _positive_count(k))

    def _remaining(self, rows: Sequence[Release], k: int) -> float:
        """:meth:`remaining` for these counted releases (one read of the ledger)."""
        if self._mixed(rows):
            return self._remaining_mixed(rows, k)
        spent_mu, spent_excess = self._composed(rows)
        target = self._target(spent_excess)
        if target is None:
            return 0.0
        room = (gaussian_dp_mu(*target) / _ROUND_UP) ** 2 - spent_mu**2
        if not room > 0.0:
            return 0.0
        # The epsilon at which a Gaussian of the room left per release meets delta, then
        # lowered until k such releases (the largest mu an (eps, delta) Gaussian may
        # have, gaussian_dp_mu) pass the same check a reservation makes.
        eps = gaussian_dp_epsilon(math.sqrt(room / k), self.delta)
        for _ in range(200):
            if not eps > 0.0:
                return 0.0
            mu, excess = self._composed(rows, [(gaussian_dp_mu(eps, self.delta), 0.0)] * k)
            if self._fits(mu, excess):
                return eps
            eps *= 1.0 - 2.0**-42
        return 0.0  # pragma: no cover - the first candidate is within a few ulps

    def _remaining_mixed(self, rows: Sequence[Release], k: int) -> float:
        """:meth:`remaining` after releases with non-Gaussian parts: bisection on epsilon,
        with the same exact check a reservation makes (largest epsilon that fits).
        """

        def fits(eps: float) -> bool:
            return self._fits_parts(rows, [GaussianPart(gaussian_dp_mu(eps, self.delta))] * k)

        lo, hi = 0.0, self.epsilon
        if fits(hi):
            return hi
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi) or hi - lo <= 1e-12 * hi:
                break
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

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
        rows = self._counted()
        return self._composed(rows)[0] if rows else 0.0

    def _spent_epsilon(self, rows: Sequence[Release]) -> float:
        if not rows:
            return 0.0
        if self._mixed(rows):
            composition, total = self._composition(rows)
            found = self._target(total)
            if found is None:
                return math.inf
            return composition.epsilon(found[1]) + 2.0 * total
        mu, excess = self._composed(rows)
        target = self._target(excess)
        if target is None:
            return math.inf
        return gaussian_dp_epsilon(mu, target[1]) + 2.0 * excess

    @property
    def spent_epsilon(self) -> float:
        """Smallest epsilon the composition so far satisfies at the budget's delta."""
        return self._spent_epsilon(self._counted())

    @property
    def remaining_epsilon(self) -> float:
        """``epsilon - spent_epsilon`` (>= 0), reported at the budget's delta.

        For information only: under tight composition budgets do not subtract, so
        plan with :meth:`remaining`, and use :meth:`check` or :meth:`min_sigma` to
        decide whether a given release fits.
        """
        return max(0.0, self.epsilon - self.spent_epsilon)

    def _summary(self) -> tuple[list[Release], list[tuple[str, str]]]:
        rows = self._ledger.rows()
        counted = [r for r in rows if r.counted]
        states = {
            state: sum(r.state == state for r in rows)
            for state in ("committed", "reserved", "cancelled")
        }
        # Every figure from this one read: a concurrent fit cannot split the report.
        plans = ", or ".join(f"{k} of {self._remaining(counted, k):.4g} each" for k in (2, 4))
        facts = [
            ("budget", f"epsilon={self.epsilon:g}, delta={self.delta:g}"),
            ("ledger", self.ledger or "(in memory, this process only)"),
            (
                "releases",
                f"{len(counted)} counted ({states['committed']} committed, "
                f"{states['reserved']} reserved), {states['cancelled']} cancelled"
                + _analyses_text(counted),
            ),
            (
                "spent",
                f"epsilon={self._spent_epsilon(counted):.6g} at delta={self.delta:g} "
                f"(mu={self._composed(counted)[0] if counted else 0.0:.6g}; stated at the "
                "ledger's delta: a release made at a larger delta shows a smaller epsilon "
                "here than its own total)",
            ),
            (
                "remaining",
                f"one more release of epsilon <= {self._remaining(counted, 1):.6g} at delta="
                f"{self.delta:g}, or {plans}",
            ),
        ]
        return rows, facts

    _COLUMNS = (
        "id",
        "state",
        "reserved (UTC)",
        "epsilon",
        "delta",
        "sensitivity",
        "sigma",
        "dataset",
        "label",
    )

    @staticmethod
    def _cells(row: Release) -> tuple[str, ...]:
        def number(value: float | None) -> str:
            return "-" if value is None else f"{value:.4g}"

        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row.reserved_at))
        mixed = bool(row.parts)
        return (
            str(row.id),
            row.state,
            when,
            number(row.epsilon),
            number(row.delta),
            "parts" if mixed else f"{row.sensitivity:.4g}",
            "; ".join(_part_text(p) for p in row.parts) if mixed else f"{row.sigma:.4g}",
            row.dataset,
            row.label,
        )

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
        rows = self._ledger.rows()
        counted = [r for r in rows if r.counted]
        spent = self._spent_epsilon(counted)
        return {
            "ledger": self.ledger,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "counts": {
                **{
                    state: sum(r.state == state for r in rows)
                    for state in ("committed", "reserved", "cancelled")
                },
                "counted": len(counted),
            },
            "spent": {
                "epsilon": spent if math.isfinite(spent) else None,
                "mu": self._composed(counted)[0] if counted else 0.0,
            },
            "remaining": {str(k): self._remaining(counted, k) for k in (1, 2, 4)},
            "releases": [{**dataclasses.asdict(r), "mu": r.mu, "counted": r.counted} for r in rows],
        }

    def resolve(self, release_id: int | None = None) -> list[Resolution]:
        """Settle the reserved rows that processes which stopped left behind.

        A row whose release was never dispatched provably drew no noise and is
        cancelled (given back); any other reserved row may have drawn and is committed
        (it stays spent); one whose process still runs on this machine is left to it.
        See :meth:`~dask_dppca.privacy.ledger.SQLiteLedger.resolve`.

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

    @classmethod
    def _table_cells(cls, rows: Sequence[Release]) -> list[tuple[str, ...]]:
        """One line per release, the stages of one analysis on one line (its parts)."""
        lines: list[tuple[str, ...]] = []
        for group in _by_analysis(rows):
            if len(group) == 1:
                lines.append(cls._cells(group[0]))
                continue
            first = cls._cells(group[0])
            states = sorted({row.state for row in group})
            stages = ", ".join(
                stage_name(row.fit_id) + (f" ({row.state})" if len(states) > 1 else "")
                for row in group
            )
            parts = [p for row in group if row.counted for p in (row.parts or ())]
            lines.append(
                (
                    f"{group[0].id}-{group[-1].id}",
                    "/".join(states),
                    first[2],
                    "-",
                    "-",
                    "parts",
                    f"{len(parts)} parts"
                    + (" + a Gaussian" if any(not r.parts for r in group) else ""),
                    group[0].dataset,
                    f"analysis {_analysis_of(group[0])}: {stages}",
                )
            )
        return lines

    def describe(self) -> str:
        """A plain-text report: totals, spent, remaining, and a table of every release
        (an analysis's stages on one line).
        """
        rows, facts = self._summary()
        lines = [f"{name + ':':<11}{value}" for name, value in facts]
        if rows:
            table = [self._COLUMNS] + self._table_cells(rows)
            widths = [max(len(line[i]) for line in table) for i in range(len(self._COLUMNS))]
            lines.append("")
            lines += [
                "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table
            ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows, facts = self._summary()
        out = ["<div><table>"]
        out += [
            f"<tr><th style='text-align:left'>{html.escape(name)}</th>"
            f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
            for name, value in facts
        ]
        out.append("</table>")
        if rows:
            header = "".join(f"<th>{html.escape(c)}</th>" for c in self._COLUMNS)
            out.append(f"<table><tr>{header}</tr>")
            out += [
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
                for cells in self._table_cells(rows)
            ]
            out.append("</table>")
        return "".join(out) + "</div>"

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
    found = _IN_MEMORY.get(token) if pid == os.getpid() else None
    if found is not None:
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


def stage_name(fit_id: str) -> str:
    """The stage a release id ``ANALYSIS.STAGE`` names, in words (``score_map``:
    ``score map``); the id itself when it names none.
    """
    return fit_id.rpartition(".")[2].replace("_", " ")


def _analysis_of(row: Release) -> str | None:
    """The analysis a row is a stage of (its id is ``ANALYSIS.STAGE``), or None."""
    head, dot, _ = row.fit_id.rpartition(".")
    return head if dot and head else None


def _by_analysis(rows: Sequence[Release]) -> list[list[Release]]:
    """``rows`` in order, the consecutive stages of one analysis together."""
    groups: list[list[Release]] = []
    for row in rows:
        key = _analysis_of(row)
        if groups and key is not None and _analysis_of(groups[-1][0]) == key:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _analyses_text(counted: Sequence[Release]) -> str:
    """``"; 6 analyses (18 of them)"``: how many analyses the counted rows are stages of."""
    analyses = {key for row in counted if (key := _analysis_of(row)) is not None}
    if not analyses:
        return ""
    stages = sum(_analysis_of(row) is not None for row in counted)
    return f"; {len(analyses)} analys{'is' if len(analyses) == 1 else 'es'} ({stages} of them)"


def open_budgets() -> list[PrivacyBudget]:
    """The budgets whose ``with`` block is open in any thread of this process, in entry order."""
    with _STATE_LOCK:
        return [budget for budget, _ in _OPEN.values()]


def _part_text(part: PrivacyPart) -> str:
    """A part in a few characters, for reports: ``mu=0.3``, ``eps=0.1``, ``eps=0.1,delta=1e-6``."""
    record = part_to_dict(part)
    if record["kind"] == "gaussian":
        return f"mu={record['mu']:.4g}"
    if record["kind"] == "pure":
        return f"eps={record['epsilon']:.4g}"
    return f"eps={record['epsilon']:.4g},delta={record['delta']:.3g}"
