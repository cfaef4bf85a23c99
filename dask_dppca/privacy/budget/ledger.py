"""Where a privacy budget keeps its releases: in this process, or in a durable ledger file.

A ledger holds a budget's totals and one row per release
(:class:`~.ledger_rows.Release`), *reserved* before the release draws its noise, then
*committed*, or *cancelled* when the noise was provably never drawn; reserved and
committed rows count as spent.  :class:`MemoryLedger` keeps them in this process,
:class:`SQLiteLedger` in a SQLite file shared by every thread and process (its file:
:mod:`.ledger_file`; its rows' rules: :mod:`.ledger_rows`; its hash chain:
:mod:`.ledger_chain`).  The arithmetic (which rows fit in the totals) is the budget's
(:mod:`dask_dppca.privacy.budget.privacy_budget`).  The design (stages, identity, tamper
evidence, why SQLite): docs/ledger.md.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn, Protocol

from ..mechanisms.calibration import validate_privacy_parameters
from ..mechanisms.parts import part_to_dict
from .ledger_chain import link, reseal
from .ledger_file import (
    COLUMNS,
    LOCK_TIMEOUT,
    add_missing_columns,
    add_parts_column,
    connect,
    create_file,
    identity,
    present_columns,
    read_rows,
    read_totals,
    refuse_empty,
)
from .ledger_rows import (
    HOST,
    LedgerError,
    LedgerReplacedError,
    Release,
    check_dispatch,
    check_fit,
    check_settle,
)

__all__ = [
    "LOCK_TIMEOUT",
    "Ledger",
    "MemoryLedger",
    "Resolution",
    "SQLiteLedger",
    "UnreachableLedger",
    "ledger_path",
]

#: ``admit(counted_rows)`` raises when one more release does not fit after those rows.
Admit = Callable[[Sequence[Release]], None]


def ledger_path(ledger: str | os.PathLike[str]) -> str:
    """The absolute file path a ledger argument names (a path, or a ``file://`` URL)."""
    text = os.fspath(ledger)
    if not isinstance(text, str) or not text:
        raise ValueError(f"ledger: must be a file path or file:// URL, got {ledger!r}")
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme != "file":
            raise ValueError(
                f"ledger: only local files (a path or file:// URL) are supported, got {text!r}"
            )
        text = rest
    return os.path.abspath(os.path.expanduser(text))


class Ledger(Protocol):
    """What a budget needs of where it keeps its releases (the classes below)."""

    @property
    def location(self) -> str | None:
        """Absolute path of the ledger file, or None for a ledger without one."""
        ...

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and add ``release``, atomically."""
        ...

    def record_many(self, releases: Sequence[Release], admit: Admit) -> list[Release]:
        """Run ``admit`` on the counted rows and add every one of ``releases``, atomically."""
        ...

    def dispatch(self, release_id: int, *, fit_id: str | None = None, ledger_id: str = "") -> None:
        """Mark a reserved row dispatched (its release may draw from now on)."""
        ...

    def settle(
        self,
        release_id: int,
        state: str,
        note: str = "",
        *,
        fit_id: str | None = None,
        ledger_id: str = "",
    ) -> None:
        """Mark a reserved row committed or cancelled."""
        ...

    def rows(self) -> list[Release]:
        """Every row, oldest first."""
        ...


@dataclass(frozen=True)
class Resolution:
    """What :meth:`SQLiteLedger.resolve` did with one reserved row.

    Attributes
    ----------
    release : Release
        The row as it was before.
    outcome : {"cancelled", "committed", "left reserved"}
        ``cancelled``: its release provably drew no noise; ``committed``: it may have,
        so it stays spent; ``left reserved``: its process still runs and settles it.
    why : str
        The reason, in words.
    """

    release: Release
    outcome: str
    why: str


class MemoryLedger:
    """The releases of a budget without a ledger file: a list in this process.

    It cannot be charged from another process; a forked child that inherited it is
    refused (:class:`~.ledger_rows.LedgerError`) rather than left to charge its own copy.
    """

    location = None

    def __init__(self) -> None:
        self._rows: list[Release] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._id = secrets.token_hex(16)

    def _guard(self) -> None:
        if os.getpid() != self._pid:
            raise LedgerError(
                f"this budget has no ledger file: it lives in process {self._pid} and cannot be "
                f"charged from process {os.getpid()}; create it with ledger=PATH to share it"
            )

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and append ``release``, atomically."""
        return self.record_many([release], admit)[0]

    def record_many(self, releases: Sequence[Release], admit: Admit) -> list[Release]:
        """Run ``admit`` on the counted rows and append every one of ``releases``, atomically."""
        self._guard()
        with self._lock:
            admit([row for row in self._rows if row.counted])
            added = [
                replace(
                    release,
                    id=len(self._rows) + 1 + i,
                    pid=self._pid,
                    host=HOST,
                    ledger_id=self._id,
                )
                for i, release in enumerate(releases)
            ]
            self._rows.extend(added)
            return added

    def _row(self, release_id: int, fit_id: str | None, ledger_id: str) -> Release:
        if ledger_id and ledger_id != self._id:
            raise LedgerReplacedError(
                f"this budget is not the one release {release_id} was reserved in"
            )
        if not 1 <= release_id <= len(self._rows):
            raise LedgerError(f"no release {release_id} in this budget")
        row = self._rows[release_id - 1]
        check_fit(row.fit_id, fit_id, release_id, None)
        return row

    def dispatch(self, release_id: int, *, fit_id: str | None = None, ledger_id: str = "") -> None:
        """Mark a reserved row dispatched (its release may draw from now on)."""
        self._guard()
        with self._lock:
            row = self._row(release_id, fit_id, ledger_id)
            check_dispatch(row.state, release_id)
            self._rows[release_id - 1] = replace(row, stage="dispatched", dispatched_at=time.time())

    def settle(
        self,
        release_id: int,
        state: str,
        note: str = "",
        *,
        fit_id: str | None = None,
        ledger_id: str = "",
    ) -> None:
        """Mark a reserved row committed or cancelled."""
        self._guard()
        with self._lock:
            row = self._row(release_id, fit_id, ledger_id)
            check_settle(row.state, state, release_id)
            self._rows[release_id - 1] = replace(
                row, state=state, settled_at=time.time(), note=note
            )

    def rows(self) -> list[Release]:
        """Every row, oldest first."""
        self._guard()
        with self._lock:
            return list(self._rows)


class UnreachableLedger:
    """Stands in for a budget that cannot be charged here; every use raises ``LedgerError``.

    What an in-memory budget becomes when it is unpickled in another process (or after
    the original was garbage-collected): loading works, spending from it does not.
    """

    location = None

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise LedgerError(self.reason)

    record = record_many = dispatch = settle = rows = _refuse


class SQLiteLedger:
    """A budget's releases in a SQLite file, shared by every thread and process using it.

    Parameters
    ----------
    path : str
        Absolute path of the ledger file (see :func:`ledger_path`).
    epsilon, delta : float
        The totals this ledger must hold; checked on every operation, so a ledger
        replaced by one with other totals is refused rather than silently used.
    ledger_id : str, optional
        The ledger id the file must hold (a budget unpickled elsewhere keeps checking
        the ledger it was made for); by default the first one this object sees.
    """

    def __init__(self, path: str, epsilon: float, delta: float, ledger_id: str = "") -> None:
        self.location = path
        self._totals = (epsilon, delta)
        self._migrated = False
        self._id = ledger_id

    # -- creating and opening ---------------------------------------------------------

    @classmethod
    def open_or_create(
        cls, path: str, epsilon: float, delta: float, create: bool = True
    ) -> SQLiteLedger:
        """Open the ledger at ``path``; with ``create``, create it with these totals if it
        does not exist.

        A new ledger is written complete in a temporary file beside ``path`` and linked
        into place only then (``os.link`` fails if ``path`` exists), so no process ever
        sees a half-made ledger, and a file found at ``path`` must already be one: an
        empty or foreign file is refused, never initialised as a fresh budget.

        Raises
        ------
        ValueError
            If the ledger exists with other totals.
        LedgerError
            If ``path`` exists and holds no ledger (an empty file, another database),
            or, without ``create``, if there is no file at ``path``.
        """
        validate_privacy_parameters(epsilon, delta)  # never a ledger no budget could open
        if not os.path.lexists(path):
            if not create:
                raise LedgerError(
                    f"ledger {path} does not exist (a missing ledger is never re-created "
                    f"full by opening it); create it on purpose with PrivacyBudget({epsilon!r}, "
                    f"{delta!r}, ledger=..., create=True) or `dask-dppca budget create {path} "
                    f"--epsilon {epsilon!r} --delta {delta!r}`"
                )
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            create_file(path, epsilon, delta)
        opened = cls.open(path)
        found = opened.totals
        if found != (epsilon, delta):
            raise ValueError(
                f"ledger: {path} holds a budget of (epsilon={found[0]!r}, delta={found[1]!r}), "
                f"not (epsilon={epsilon!r}, delta={delta!r}); open it with "
                "PrivacyBudget.open(path) or use another file"
            )
        return opened

    @classmethod
    def open(cls, path: str) -> SQLiteLedger:
        """Open an existing ledger, taking its totals from the file.

        The file is checked on the way: SQLite's ``PRAGMA quick_check``, every row's
        values and the hash chain over the rows.

        Raises
        ------
        LedgerError
            If there is no ledger at ``path`` (no file, an empty file, another database),
            or it is damaged or was edited (the row named).
        """
        refuse_empty(path)
        with connect(path) as db:
            problems = [text for (text,) in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise LedgerError(
                    f"ledger {path}: the SQLite file is damaged (quick_check: "
                    f"{'; '.join(map(str, problems[:3]))})"
                )
            db.execute("BEGIN")
            try:
                totals = read_totals(db, path)
                ledger_id = identity(db)[0]
                read_rows(db, path, counted_only=False)
            finally:
                db.execute("ROLLBACK")
        try:  # a file made by an older version, or by hand, is held to today's rule
            validate_privacy_parameters(*totals)
        except ValueError as error:
            raise LedgerError(
                f"ledger {path}: its totals (epsilon={totals[0]!r}, delta={totals[1]!r}) are "
                f"outside what a budget may hold ({error}); refused"
            ) from None
        return cls(path, *totals, ledger_id=ledger_id or "")

    # -- operations ---------------------------------------------------------------------

    @property
    def totals(self) -> tuple[float, float]:
        """The (epsilon, delta) the ledger holds."""
        return self._totals

    @property
    def ledger_id(self) -> str:
        """The random id of the ledger this object works on ("" until known)."""
        return self._id

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        if self._id and not os.path.exists(self.location):
            # Not "create it first": a ledger created again there would start from
            # nothing spent.  Raised as replaced, so that a reservation's dispatch and
            # commit say whether the noise was drawn (budget.Reservation).
            raise LedgerReplacedError(
                f"ledger {self.location}: the file this budget opened (ledger id {self._id}) "
                "was deleted, and its record of what was spent with it; restore it from a "
                "backup (a ledger created again there would start from nothing spent)"
            )
        with connect(self.location) as db:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                if read_totals(db, self.location) != self._totals:
                    raise LedgerError(
                        f"ledger {self.location}: its totals changed under this budget"
                    )
                if write and not self._migrated:
                    add_missing_columns(db)
                found = identity(db)[0] or ""
                if self._id and found != self._id:
                    raise LedgerReplacedError(
                        f"ledger {self.location}: the file there is not the ledger this budget "
                        f"opened (ledger id {self._id}, now {found or 'none'}): it was replaced "
                        "(deleted and created again?); open it again to use the new one"
                    )
                # The chain is checked before every operation: a broken one is refused.
                read_rows(db, self.location, counted_only=False)
                yield db
                db.execute("COMMIT")
            except BaseException:
                # SQLite ends the transaction itself on some errors (a full disk): then
                # there is nothing to roll back, and the first error is the one to report.
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise
        if write:
            self._migrated = True
        if not self._id and found:
            self._id = found

    def _check_row(
        self, db: sqlite3.Connection, release_id: int, fit_id: str | None, ledger_id: str
    ) -> str:
        """The state of row ``release_id``, once it is the row asked for: in the ledger
        ``ledger_id`` (when given) and of ``fit_id`` (when given).
        """
        found = identity(db)[0] or ""
        if ledger_id and found != ledger_id:
            raise LedgerReplacedError(
                f"ledger {self.location}: the file there is not the ledger release {release_id} "
                f"was reserved in (ledger id {ledger_id}, now {found or 'none'}): it was "
                "replaced (deleted and created again?) after the reservation"
            )
        row = db.execute(
            "SELECT state, fit_id FROM releases WHERE id = ?", (release_id,)
        ).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.location}: no release {release_id}")
        check_fit(str(row[1]), fit_id, release_id, self.location)
        return str(row[0])

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and insert ``release``, in one transaction."""
        return self.record_many([release], admit)[0]

    def record_many(self, releases: Sequence[Release], admit: Admit) -> list[Release]:
        """Run ``admit`` on the counted rows and insert every one of ``releases``, in one
        transaction: all of them are recorded, or none.
        """
        with self._transaction(write=True) as db:
            admit(read_rows(db, self.location, counted_only=True))
            return [self._insert(db, release) for release in releases]

    def _insert(self, db: sqlite3.Connection, release: Release) -> Release:
        """Insert one row at the head of the chain, in the caller's transaction."""
        ledger_id, head = identity(db)
        assert ledger_id and head  # a write migrated the file (add_missing_columns)
        row = replace(release, pid=os.getpid(), host=HOST, ledger_id=ledger_id)
        names = list(COLUMNS[1:])
        values: list[object] = [getattr(row, name) for name in names]
        if row.parts:
            add_parts_column(db)
            names.append("parts")
            values.append(json.dumps([part_to_dict(part) for part in row.parts]))
        cursor = db.execute(
            f"INSERT INTO releases ({', '.join(names)}) VALUES ({', '.join('?' * len(values))})",
            values,
        )
        row_id = cursor.lastrowid
        assert row_id is not None  # set by the INSERT just run
        stored = {"id": row_id, **dict(zip(names, values))}
        chain, seal = link(head, stored)
        db.execute("UPDATE releases SET chain = ?, seal = ? WHERE id = ?", (chain, seal, row_id))
        db.execute("UPDATE budget SET head = ?", (chain,))
        return replace(row, id=row_id)

    def _update(self, db: sqlite3.Connection, release_id: int, changes: dict[str, object]) -> None:
        """Change a row's settlement columns and its seal, in the caller's transaction."""
        assignments = ", ".join(f"{name} = ?" for name in changes)
        db.execute(
            f"UPDATE releases SET {assignments} WHERE id = ?", (*changes.values(), release_id)
        )
        present = present_columns(db)
        names = [name for name in (*COLUMNS, "parts", "chain") if name in present]
        found = db.execute(
            f"SELECT {', '.join(names)} FROM releases WHERE id = ?", (release_id,)
        ).fetchone()
        stored = dict(zip(names, found))
        seal = reseal(str(stored["chain"]), stored)
        db.execute("UPDATE releases SET seal = ? WHERE id = ?", (seal, release_id))

    def dispatch(self, release_id: int, *, fit_id: str | None = None, ledger_id: str = "") -> None:
        """Mark a reserved row dispatched: from now on its release may draw.

        Raises
        ------
        LedgerError
            If the row is no longer reserved (``budget resolve`` cancelled it): the
            release must then not draw.
        LedgerReplacedError
            If the file is no longer the ledger ``ledger_id``.
        """
        with self._transaction(write=True) as db:
            check_dispatch(self._check_row(db, release_id, fit_id, ledger_id), release_id)
            self._update(db, release_id, {"stage": "dispatched", "dispatched_at": time.time()})

    def settle(
        self,
        release_id: int,
        state: str,
        note: str = "",
        *,
        fit_id: str | None = None,
        ledger_id: str = "",
    ) -> None:
        """Mark a reserved row committed or cancelled.

        With ``ledger_id`` and ``fit_id`` (what a :class:`~.privacy_budget.Reservation` passes) the
        row must be that fit's row in that very ledger, never merely a row of that number.

        Raises
        ------
        LedgerReplacedError
            If the file is no longer the ledger ``ledger_id``.
        """
        with self._transaction(write=True) as db:
            check_settle(self._check_row(db, release_id, fit_id, ledger_id), state, release_id)
            self._update(
                db, release_id, {"state": state, "settled_at": time.time(), "note": note or None}
            )

    def rows(self) -> list[Release]:
        """Every row, oldest first."""
        with self._transaction(write=False) as db:
            return read_rows(db, self.location, counted_only=False)

    def resolve(self, release_id: int | None = None) -> list[Resolution]:
        """Settle reserved rows left by processes that stopped before settling them.

        A reserved row whose release was never dispatched (stage ``reserved``) provably
        drew no noise: it is cancelled, in the same transaction that checks the stage,
        and a late dispatch of it is refused (:meth:`dispatch`).  Any other reserved
        row (dispatched, or without a recorded stage) may have drawn: it is committed,
        so it stays spent.  A row whose process still runs on this machine is left
        reserved (that process settles it).

        Parameters
        ----------
        release_id : int, optional
            One row; by default every reserved row.

        Returns
        -------
        list of Resolution

        Raises
        ------
        LedgerError
            If ``release_id`` names no row.
        """
        done: list[Resolution] = []
        with self._transaction(write=True) as db:
            rows = read_rows(db, self.location, counted_only=False)
            if release_id is not None:
                rows = [row for row in rows if row.id == release_id]
                if not rows:
                    raise LedgerError(f"ledger {self.location}: no release {release_id}")
            for row in rows:
                if row.state != "reserved":
                    if release_id is not None:
                        done.append(Resolution(row, row.state, f"it is already {row.state}"))
                    continue
                outcome, why = _resolution(row)
                if outcome != "left reserved":
                    self._update(
                        db,
                        row.id,
                        {
                            "state": outcome,
                            "settled_at": time.time(),
                            "note": f"budget resolve: {why}",
                        },
                    )
                done.append(Resolution(row, outcome, why))
        return done


def _resolution(row: Release) -> tuple[str, str]:
    """What ``resolve`` does with a reserved row, and why."""
    if row.host == HOST and _alive(row.pid):
        return "left reserved", f"process {row.pid} that reserved it still runs and settles it"
    if row.stage == "reserved":
        return "cancelled", "its release was never dispatched, so no noise was drawn"
    if row.stage == "dispatched":
        return "committed", (
            "its release was dispatched and may have drawn its noise, so it stays spent"
        )
    return "committed", (
        "the row does not record whether its release was dispatched (written without "
        "stages), so it may have drawn and stays spent"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
