"""Where a privacy budget keeps its releases: in this process, or in a durable ledger file.

A ledger holds a budget's totals (epsilon, delta) and one row per release: when it was
reserved and settled, the fit id, sensitivity, sigma, sampler excess, the fit's own
(epsilon, delta), a dataset id and a label.  A row is *reserved* before the release draws
its noise, then *committed* after, or *cancelled* when the noise was provably never
drawn.  Reserved and committed rows count as spent; a process that dies between
reservation and commit leaves its row reserved, so a crash never under-counts.

A reserved row also records its *stage*: ``reserved`` until the fit hands its release to
the code that draws (:meth:`SQLiteLedger.dispatch`, written before anything can draw),
then ``dispatched``.  Dispatching is refused unless the row is still reserved, so a
row that :meth:`SQLiteLedger.resolve` cancelled (its process died before dispatching:
provably nothing drawn) can never draw afterwards; a dispatched row left reserved is
resolved as spent (it may have drawn).  Rows written by a version without stages
(``stage`` NULL) are never cancelled by ``resolve``.  The
arithmetic (which rows fit in the totals) is the budget's
(:mod:`dask_dppca.privacy.budget`); a ledger only stores rows and runs the budget's
admission test and the insert as one atomic step.

Why SQLite (Python's standard ``sqlite3``, no new dependency) for the durable ledger:

* atomic check-and-insert across threads *and processes*: ``BEGIN IMMEDIATE`` takes the
  database's write lock before the rows are read, so two processes can never both
  admit a release that only one of them fits (no hand-written file locking);
* crash safety: every transaction is atomic and durable (rollback journal,
  ``synchronous=FULL``); a process killed mid-transaction leaves the file as it was
  before, and the next opener rolls the journal back;
* every release stays on record (time, fit, parameters), readable by the command line
  (``dask-dppca budget show LEDGER``) or any SQLite tool.

A JSON log with atomic appends would need its own locking (``fcntl``, POSIX only),
fsync discipline and torn-write recovery for the same guarantees.  SQLite's locks need a
local file system (or one with working POSIX locks): do not put a ledger on NFS.

Every value read back is checked (numbers where numbers belong, sigma > 0, ...): a
damaged or hand-edited file raises :class:`LedgerError` naming the row and the column,
and a file that exists but holds no ledger (an empty file, say) is refused, never
initialised as a fresh full budget.

Identity.  A ledger gets a random *ledger id* at creation (column ``budget.ledger_id``).
A :class:`SQLiteLedger` pins the id it first sees, every row read carries it
(``Release.ledger_id``), and :meth:`SQLiteLedger.dispatch` / :meth:`~SQLiteLedger.settle`
find their row by row id *and* ledger id *and* fit id: a file deleted and created again
with the same totals is refused (:class:`LedgerReplacedError`), never charged in place of
the original.

Tamper evidence: a hash chain over the rows.  Each row's ``chain`` is the SHA-256 of the
previous row's chain (for the first row, of a genesis over the ledger id and the totals)
and of the row's *fixed* columns (``_FIXED``: everything written once); its ``seal`` is
the SHA-256 of its chain and its *settlement* columns (``_SETTLED``: state, stage, the
settle and dispatch times, note), the only ones an operation changes later.  So a
settlement rewrites its row's seal in the same transaction and no chain changes: the
simplest design in which state changes stay verifiable without rewriting later rows.
``budget.head`` holds the last row's chain, so a removed last row is seen too.  Every
operation and every open verify the chain (an open also runs ``PRAGMA quick_check``) and
refuse a broken one with a one-line :class:`LedgerError` naming the first row that fails.
This is evidence against damage, accidents and edits by tools that do not recompute the
hashes; no secret is kept, so it is no defence against someone running this code on the
file.  Values are hashed typed, floats exactly (``float.hex``).

The layout only ever grows by added nullable columns (``_ADDED_COLUMNS``, the chain's and
the identity's), which a write adds to an older file the first time it opens it; that
write also gives the file a ledger id and chains its rows (format 3, so that a version
that does not keep the chain refuses the file rather than writing unchained rows).
A full disk is reported as ``disk full``; a ledger that cannot be created leaves no file.

Waits for the write lock are bounded (:data:`LOCK_TIMEOUT` seconds, then a
:class:`TimeoutError` naming the ledger).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import secrets
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn, Protocol

from .calibration import validate_privacy_parameters
from .parts import PrivacyPart, part_from_dict, part_to_dict

__all__ = [
    "LOCK_TIMEOUT",
    "Ledger",
    "LedgerError",
    "LedgerReplacedError",
    "MemoryLedger",
    "Release",
    "Resolution",
    "SQLiteLedger",
    "UnreachableLedger",
    "ledger_path",
]

#: Seconds a ledger operation waits for another process's write lock before giving up.
LOCK_TIMEOUT = 60.0

#: Layouts this version reads: 1; 2 = 1 plus the nullable ``parts`` column holding
#: rows with mixed parts (a file becomes 2 when its first such row is written, so a
#: version that cannot count them refuses the file instead of under-counting it); 3 =
#: the ledger id and the hash chain (:data:`_CHAIN_COLUMNS`), which a version that does
#: not keep the chain must not write to (its rows would break it), so it refuses the file.
_READABLE_FORMATS = (1, 2, 3)
_PARTS_FORMAT = 2
_CHAIN_FORMAT = 3
#: Version of the layout of a new ledger (a write raises an older file to it).
_FORMAT = _CHAIN_FORMAT

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budget (
    epsilon REAL NOT NULL, delta REAL NOT NULL, created REAL NOT NULL, format INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'cancelled')),
    reserved_at REAL NOT NULL,
    settled_at REAL,
    fit_id TEXT NOT NULL,
    label TEXT NOT NULL,
    dataset TEXT NOT NULL,
    sensitivity REAL NOT NULL,
    sigma REAL NOT NULL,
    excess REAL NOT NULL,
    epsilon REAL,
    delta REAL,
    pid INTEGER NOT NULL
);
"""

#: Columns added to the layout since format 1, each nullable: ``(name, SQL type)``.
#: A write adds the missing ones to an older file (``ALTER TABLE ... ADD COLUMN``).
_ADDED_COLUMNS = (
    ("stage", "TEXT"),  # 'reserved' or 'dispatched' (NULL: written without stages)
    ("dispatched_at", "REAL"),
    ("host", "TEXT"),  # the machine of the reserving process
    ("note", "TEXT"),  # why the row was settled as it was (budget resolve)
)

#: Added to ``budget``: the ledger's random id (its identity, fixed at creation) and the
#: chain's head (the chain hash of the last row, or of the genesis for no rows).
_BUDGET_COLUMNS = (("ledger_id", "TEXT"), ("head", "TEXT"))
#: Added to ``releases``: each row's chain hash (over its fixed columns and the previous
#: row's chain hash) and its seal (over its chain hash and its settlement columns).
_CHAIN_COLUMNS = (("chain", "TEXT"), ("seal", "TEXT"))

_COLUMNS = (
    "id",
    "state",
    "reserved_at",
    "settled_at",
    "fit_id",
    "label",
    "dataset",
    "sensitivity",
    "sigma",
    "excess",
    "epsilon",
    "delta",
    "pid",
    *(name for name, _ in _ADDED_COLUMNS),
)

#: States that count as spent.
COUNTED = ("reserved", "committed")


class LedgerError(RuntimeError):
    """A budget's ledger cannot be read or charged here (missing, foreign, unreachable)."""


class LedgerReplacedError(LedgerError):
    """The file at a ledger's path is no longer the ledger a budget or a reservation was
    made in (deleted and created again, or swapped): its ledger id differs.
    """


@dataclass(frozen=True)
class Release:
    """One Gaussian release as a budget records it.

    Attributes
    ----------
    sensitivity : float
        l2 sensitivity (including any sampler slack).
    sigma : float
        Noise standard deviation.
    label : str
        Free text, e.g. ``"DPPCA fit <id>"``.
    excess : float
        The sampler's privacy excess (0 for an exact sampler).
    fit_id : str
        The fit's public random identifier ("" for a direct ``spend``).
    dataset : str
        What was released on: a store path, or the input's type and shape.
    epsilon, delta : float or None
        The (epsilon, delta) the release itself was calibrated to, for the record (the
        budget composes ``sensitivity / sigma``, not these).
    state : {"reserved", "committed", "cancelled"}
        Reserved and committed releases count as spent.
    reserved_at, settled_at : float or None
        Unix times of the reservation and of its commit or cancellation.
    id : int
        Row number in the ledger (0 before it is recorded).
    pid : int
        The process that reserved it.
    stage : {"reserved", "dispatched"} or None
        For a reserved release: whether it was handed to the code that draws the noise
        (``dispatched``) or not yet (``reserved``); None for rows recorded without a
        stage (a direct ``spend``, or an older version).
    dispatched_at : float or None
        Unix time of the dispatch.
    host : str
        The machine of the process that reserved it.
    note : str
        Why the row was settled as it was, when ``budget resolve`` settled it.
    parts : tuple of PrivacyPart
        A release stated as parts (:mod:`.parts`: Gaussian, pure or approximate DP,
        composed exactly by :mod:`.accounting`); empty for a Gaussian release stated by
        ``sensitivity / sigma``.  A row with parts has ``sensitivity = 0``, ``sigma = 1``.
    ledger_id : str
        The random id of the ledger holding the row ("" before it is recorded, or in a
        file of an older layout not yet written to).
    """

    sensitivity: float
    sigma: float
    label: str = ""
    excess: float = 0.0
    fit_id: str = ""
    dataset: str = ""
    epsilon: float | None = None
    delta: float | None = None
    state: str = "committed"
    reserved_at: float = 0.0
    settled_at: float | None = None
    id: int = 0
    pid: int = 0
    stage: str | None = None
    dispatched_at: float | None = None
    host: str = ""
    note: str = ""
    parts: tuple[PrivacyPart, ...] = ()
    ledger_id: str = ""

    @property
    def mu(self) -> float:
        """``sensitivity / sigma``: the release's Gaussian-DP parameter."""
        return self.sensitivity / self.sigma

    @property
    def counted(self) -> bool:
        """Whether the release counts as spent (reserved or committed)."""
        return self.state in COUNTED


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
    refused (:class:`LedgerError`) rather than left to charge its own copy.
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
                    host=_HOST,
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
        _check_fit(row.fit_id, fit_id, release_id, None)
        return row

    def dispatch(self, release_id: int, *, fit_id: str | None = None, ledger_id: str = "") -> None:
        """Mark a reserved row dispatched (its release may draw from now on)."""
        self._guard()
        with self._lock:
            row = self._row(release_id, fit_id, ledger_id)
            _check_dispatch(row.state, release_id)
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
            _check_settle(row.state, state, release_id)
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
            _create(path, epsilon, delta)
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
        _refuse_empty(path)
        with _connect(path) as db:
            problems = [text for (text,) in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise LedgerError(
                    f"ledger {path}: the SQLite file is damaged (quick_check: "
                    f"{'; '.join(map(str, problems[:3]))})"
                )
            db.execute("BEGIN")
            try:
                totals = _read_totals(db, path)
                ledger_id = _identity(db)[0]
                _rows(db, path, counted_only=False)
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
        with _connect(self.location) as db:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                if _read_totals(db, self.location) != self._totals:
                    raise LedgerError(
                        f"ledger {self.location}: its totals changed under this budget"
                    )
                if write and not self._migrated:
                    _add_missing_columns(db)
                found = _identity(db)[0] or ""
                if self._id and found != self._id:
                    raise LedgerReplacedError(
                        f"ledger {self.location}: the file there is not the ledger this budget "
                        f"opened (ledger id {self._id}, now {found or 'none'}): it was replaced "
                        "(deleted and created again?); open it again to use the new one"
                    )
                # The chain is checked before every operation: a broken one is refused.
                _rows(db, self.location, counted_only=False)
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
        found = _identity(db)[0] or ""
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
        _check_fit(str(row[1]), fit_id, release_id, self.location)
        return str(row[0])

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and insert ``release``, in one transaction."""
        return self.record_many([release], admit)[0]

    def record_many(self, releases: Sequence[Release], admit: Admit) -> list[Release]:
        """Run ``admit`` on the counted rows and insert every one of ``releases``, in one
        transaction: all of them are recorded, or none.
        """
        with self._transaction(write=True) as db:
            admit(_rows(db, self.location, counted_only=True))
            return [self._insert(db, release) for release in releases]

    def _insert(self, db: sqlite3.Connection, release: Release) -> Release:
        """Insert one row at the head of the chain, in the caller's transaction."""
        ledger_id, head = _identity(db)
        assert ledger_id and head  # a write migrated the file (_add_missing_columns)
        row = replace(release, pid=os.getpid(), host=_HOST, ledger_id=ledger_id)
        names = list(_COLUMNS[1:])
        values: list[object] = [getattr(row, name) for name in names]
        if row.parts:
            _add_parts_column(db)
            names.append("parts")
            values.append(json.dumps([part_to_dict(part) for part in row.parts]))
        cursor = db.execute(
            f"INSERT INTO releases ({', '.join(names)}) VALUES ({', '.join('?' * len(values))})",
            values,
        )
        row_id = cursor.lastrowid
        assert row_id is not None  # set by the INSERT just run
        stored = {"id": row_id, **dict(zip(names, values))}
        chain, seal = _seal(head, stored)
        db.execute("UPDATE releases SET chain = ?, seal = ? WHERE id = ?", (chain, seal, row_id))
        db.execute("UPDATE budget SET head = ?", (chain,))
        return replace(row, id=row_id)

    def _update(self, db: sqlite3.Connection, release_id: int, changes: dict[str, object]) -> None:
        """Change a row's settlement columns and its seal, in the caller's transaction."""
        assignments = ", ".join(f"{name} = ?" for name in changes)
        db.execute(
            f"UPDATE releases SET {assignments} WHERE id = ?", (*changes.values(), release_id)
        )
        present = _present(db)
        names = [name for name in (*_COLUMNS, "parts", "chain") if name in present]
        found = db.execute(
            f"SELECT {', '.join(names)} FROM releases WHERE id = ?", (release_id,)
        ).fetchone()
        stored = dict(zip(names, found))
        seal = _digest(str(stored["chain"]), [_norm(stored, name) for name in _SETTLED])
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
            _check_dispatch(self._check_row(db, release_id, fit_id, ledger_id), release_id)
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

        With ``ledger_id`` and ``fit_id`` (what a :class:`~.budget.Reservation` passes) the
        row must be that fit's row in that very ledger, never merely a row of that number.

        Raises
        ------
        LedgerReplacedError
            If the file is no longer the ledger ``ledger_id``.
        """
        with self._transaction(write=True) as db:
            _check_settle(self._check_row(db, release_id, fit_id, ledger_id), state, release_id)
            self._update(
                db, release_id, {"state": state, "settled_at": time.time(), "note": note or None}
            )

    def rows(self) -> list[Release]:
        """Every row, oldest first."""
        with self._transaction(write=False) as db:
            return _rows(db, self.location, counted_only=False)

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
            rows = _rows(db, self.location, counted_only=False)
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


#: This machine, as the rows name it.
_HOST = socket.gethostname()


def _resolution(row: Release) -> tuple[str, str]:
    """What ``resolve`` does with a reserved row, and why."""
    if row.host == _HOST and _alive(row.pid):
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


def _check_dispatch(current: str, release_id: int) -> None:
    if current != "reserved":
        raise LedgerError(
            f"release {release_id} is {current}, not reserved (budget resolve settled it "
            "after its process seemed gone): its release must not draw"
        )


def _check_settle(current: str, state: str, release_id: int) -> None:
    if state not in ("committed", "cancelled"):
        raise ValueError(f"state: must be 'committed' or 'cancelled', got {state!r}")
    if current != "reserved":
        raise LedgerError(
            f"release {release_id} is {current}, not reserved: it cannot become {state}"
        )


def _create(path: str, epsilon: float, delta: float) -> None:
    """Write a complete new ledger to a temporary file, then link it to ``path``.

    Another process creating the same ledger at the same time wins or loses the link;
    the loser's file is discarded and it opens the winner's.
    """
    try:
        _create_aside(path, epsilon, delta)
    except (OSError, LedgerError) as error:
        if not _disk_full(error):
            raise
        raise LedgerError(
            f"ledger {path}: disk full, the ledger was not created (no file left there): {error}"
        ) from None


def _create_aside(path: str, epsilon: float, delta: float) -> None:
    folder = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(prefix=".ledger-", suffix=".tmp", dir=folder)
    os.close(handle)
    try:
        with _connect(temporary, create=True) as db:
            db.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            db.execute(
                "INSERT INTO budget (epsilon, delta, created, format) VALUES (?, ?, ?, ?)",
                (epsilon, delta, time.time(), _FORMAT),
            )
            _add_missing_columns(db)  # the ledger id and the chain's head
            db.execute("COMMIT")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # created meanwhile by another process: open_or_create opens theirs
        except OSError:  # a file system without hard links: copy into a new file
            _copy_exclusively(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _copy_exclusively(source: str, path: str) -> None:
    """Copy ``source`` to ``path`` only if ``path`` does not exist (never over a ledger).

    Another process opening ``path`` while it is being written sees an empty or partial
    file and is refused (a clear error), never given a fresh budget.
    """
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # created meanwhile by another process: open_or_create opens theirs
    try:
        with os.fdopen(handle, "wb") as out, open(source, "rb") as data:
            out.write(data.read())
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(path)  # a partial copy (a full disk) is no ledger: none is left
        raise


def _refuse_empty(path: str) -> None:
    """A file at ``path`` with no bytes is no ledger (SQLite would take it for a new one)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return  # missing: _connect says so
    if size == 0:
        raise LedgerError(
            f"ledger {path}: the file is empty (0 bytes), not a dask-dppca ledger; it is "
            "not used as a fresh budget. Restore the ledger from a backup, or remove the "
            "file to start a new budget on purpose"
        )


def _present(db: sqlite3.Connection, table: str = "releases") -> set[str]:
    return {info[1] for info in db.execute(f"PRAGMA table_info({table})")}


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring an older file up to this layout (inside a write): the columns of
    :data:`_ADDED_COLUMNS`, a ledger id, and the hash chain over the rows it holds.

    The rows of a file without a chain are checked value by value first; the chain then
    vouches for them as they are from this write on.
    """
    present = _present(db)
    for name, kind in (*_ADDED_COLUMNS, *_CHAIN_COLUMNS):
        if name not in present:
            db.execute(f"ALTER TABLE releases ADD COLUMN {name} {kind}")
    present_budget = _present(db, "budget")
    for name, kind in _BUDGET_COLUMNS:
        if name not in present_budget:
            db.execute(f"ALTER TABLE budget ADD COLUMN {name} {kind}")
    ledger_id, head = _identity(db)
    if ledger_id and head:
        return
    if not ledger_id:
        db.execute("UPDATE budget SET ledger_id = ?", (secrets.token_hex(16),))
    previous = _genesis(db)
    names = _stored_names(db)
    for values in db.execute(f"SELECT {', '.join(names)} FROM releases ORDER BY id").fetchall():
        stored = dict(zip(names, values))
        # Only sound rows are sealed.
        _checked_row(None, {n: v for n, v in stored.items() if n not in ("chain", "seal")})
        chain, seal = _seal(previous, stored)
        db.execute(
            "UPDATE releases SET chain = ?, seal = ? WHERE id = ?", (chain, seal, stored["id"])
        )
        previous = chain
    db.execute("UPDATE budget SET head = ?, format = MAX(format, ?)", (previous, _CHAIN_FORMAT))


def _identity(db: sqlite3.Connection) -> tuple[str | None, str | None]:
    """The file's (ledger id, chain head); (None, None) for a file of an older layout."""
    present = _present(db, "budget")
    if "ledger_id" not in present or "head" not in present:
        return None, None
    found = db.execute("SELECT ledger_id, head FROM budget").fetchone()
    ledger_id, head = found if found else (None, None)
    return (
        ledger_id if isinstance(ledger_id, str) else None,
        head if isinstance(head, str) else None,
    )


def _check_fit(found: str, fit_id: str | None, release_id: int, path: str | None) -> None:
    if fit_id is not None and found != fit_id:
        where = f"ledger {path}" if path else "this budget"
        raise LedgerReplacedError(
            f"{where}: release {release_id} there belongs to fit {found!r}, not to fit "
            f"{fit_id!r} that reserved it: the file was replaced after the reservation"
        )


# -- the hash chain ------------------------------------------------------------------------
#
# Each row's ``chain`` = sha256(previous row's chain, or the genesis, + the row's fixed
# columns); its ``seal`` = sha256(its chain + its settlement columns, the only ones an
# operation changes later).  Updating a row (dispatch, commit, cancel, resolve) rewrites
# its seal in the same transaction and leaves every chain as it was; the budget table's
# ``head`` is the last row's chain, so a removed last row is seen too.  The genesis hashes
# the ledger id and the totals.

#: Columns fixed when a row is written, hashed into its chain link.
_FIXED = (
    "id",
    "reserved_at",
    "fit_id",
    "label",
    "dataset",
    "sensitivity",
    "sigma",
    "excess",
    "epsilon",
    "delta",
    "pid",
    "host",
    "parts",
)
#: Columns a settlement changes, hashed into the row's seal.
_SETTLED = ("state", "settled_at", "stage", "dispatched_at", "note")
_REAL = {
    "created",
    "reserved_at",
    "settled_at",
    "dispatched_at",
    "sensitivity",
    "sigma",
    "excess",
    "epsilon",
    "delta",
}


def _norm(stored: dict[str, object], name: str) -> object:
    """A column's value as hashed: typed, floats exactly (hex), NULL as None."""
    value = stored.get(name)
    if value is None:
        return None
    if name in _REAL and _is_number(value):
        return ["r", float(value).hex()]  # type: ignore[arg-type]
    if isinstance(value, int) and not isinstance(value, bool):
        return ["i", value]
    if isinstance(value, str):
        return ["t", value]
    return ["?", type(value).__name__, repr(value)]


def _digest(previous: str, items: Sequence[object]) -> str:
    text = json.dumps([previous, *items], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _seal(previous: str, stored: dict[str, object]) -> tuple[str, str]:
    """(chain, seal) of a row stored as ``stored`` after a row whose chain is ``previous``."""
    chain = _digest(previous, [_norm(stored, name) for name in _FIXED])
    return chain, _digest(chain, [_norm(stored, name) for name in _SETTLED])


def _genesis(db: sqlite3.Connection) -> str:
    """The hash before the first row: of the ledger id and the totals."""
    names = ("ledger_id", "epsilon", "delta", "created")
    found = db.execute(f"SELECT {', '.join(names)} FROM budget").fetchone()
    stored = dict(zip(names, found))
    return _digest("dask-dppca ledger", [_norm(stored, name) for name in names])


def _stored_names(db: sqlite3.Connection) -> list[str]:
    """The row columns this file has, in the order :data:`_COLUMNS` (+ parts, chain, seal)."""
    present = _present(db)
    return [name for name in (*_COLUMNS, "parts", "chain", "seal") if name in present]


@contextmanager
def _connect(path: str, create: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection in autocommit mode (transactions are explicit), always closed.

    Without ``create`` the file must exist (SQLite's ``mode=rw``): an operation on a
    ledger that was deleted fails instead of starting an empty one.
    """
    mode = "rwc" if create else "rw"
    uri = f"{Path(path).as_uri()}?mode={mode}"
    try:
        db = sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT, isolation_level=None)
    except sqlite3.OperationalError as error:
        raise LedgerError(
            f"ledger {path}: cannot open it ({error}); create it first with "
            "`dask-dppca budget create` or PrivacyBudget(epsilon, delta, "
            "ledger=...)"
        ) from None
    try:
        db.execute("PRAGMA synchronous = FULL")
        yield db
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            raise TimeoutError(
                f"ledger {path}: still locked by another process after {LOCK_TIMEOUT:g} s"
            ) from None
        if _disk_full(error):
            raise LedgerError(
                f"ledger {path}: disk full ({error}): nothing was recorded; free space on "
                "its file system and try again"
            ) from None
        raise LedgerError(f"ledger {path}: {error}") from None
    except sqlite3.DatabaseError as error:
        raise LedgerError(f"ledger {path}: not a dask-dppca ledger ({error})") from None
    finally:
        db.close()


def _disk_full(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's SQLITE_FULL, or the file system's ENOSPC."""
    code = getattr(error, "sqlite_errorcode", None)
    return (
        code == sqlite3.SQLITE_FULL
        or "disk is full" in str(error)
        or (isinstance(error, OSError) and error.errno == errno.ENOSPC)
    )


def _read_totals(db: sqlite3.Connection, path: str) -> tuple[float, float]:
    try:
        found = db.execute("SELECT epsilon, delta, format FROM budget").fetchall()
    except sqlite3.OperationalError:
        tables = sorted(
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        )
        if tables:  # someone else's database: left alone
            raise LedgerError(
                f"ledger {path}: not a dask-dppca ledger (a SQLite file with other "
                f"tables: {tables})"
            ) from None
        found = []
    if len(found) != 1:
        raise LedgerError(f"ledger {path}: not a dask-dppca ledger (no budget totals)")
    epsilon, delta, layout = found[0]
    if layout not in _READABLE_FORMATS:
        raise LedgerError(
            f"ledger {path}: file format {layout!r}, this version reads {_READABLE_FORMATS}"
        )
    if not (
        _is_number(epsilon)
        and _is_number(delta)
        and math.isfinite(epsilon)
        and epsilon > 0
        and 0 < delta < 1
    ):
        raise LedgerError(
            f"ledger {path}: invalid totals in table budget (epsilon={epsilon!r}, "
            f"delta={delta!r}): epsilon must be a finite number > 0 and delta in (0, 1)"
        )
    return float(epsilon), float(delta)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# What each column of a row must hold: (test, what it means in words).
_NUMBER_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    "sensitivity": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    "sigma": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    "excess": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    "reserved_at": (math.isfinite, "a finite time"),
}
_OPTIONAL_NUMBERS: dict[str, tuple[Callable[[float], bool], str]] = {
    "settled_at": (math.isfinite, "a finite time or NULL"),
    "dispatched_at": (math.isfinite, "a finite time or NULL"),
    "epsilon": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0 or NULL"),
    "delta": (lambda v: 0 <= v < 1, "a number in [0, 1) or NULL"),
}
_TEXT = ("fit_id", "label", "dataset")
_OPTIONAL_TEXT = ("host", "note")


def _checked_row(path: str | None, values: dict[str, object]) -> Release:
    """A row read back from the file as a Release; LedgerError naming the row and column
    for any value that is not what the column holds.
    """
    row_id = values.get("id")

    def bad(column: str, meaning: str) -> NoReturn:
        raise LedgerError(
            f"ledger {path}: release row {row_id!r}, column {column}: holds "
            f"{values[column]!r}, not {meaning} (the file is damaged or was edited)"
        )

    if not isinstance(row_id, int) or isinstance(row_id, bool):
        values.setdefault("id", None)
        bad("id", "an integer")
    if values.get("state") not in ("reserved", "committed", "cancelled"):
        bad("state", "one of reserved, committed, cancelled")
    if values.get("stage") not in (None, "reserved", "dispatched"):
        bad("stage", "reserved, dispatched or NULL")
    if not isinstance(values.get("pid"), int):
        bad("pid", "an integer")
    for column, (test, meaning) in _NUMBER_RULES.items():
        value = values.get(column)
        if not (_is_number(value) and test(float(value))):  # type: ignore[arg-type]
            bad(column, meaning)
        values[column] = float(value)  # type: ignore[arg-type]
    for column, (test, meaning) in _OPTIONAL_NUMBERS.items():
        value = values.get(column)
        if value is None:
            continue
        if not (_is_number(value) and test(float(value))):  # type: ignore[arg-type]
            bad(column, meaning)
        values[column] = float(value)  # type: ignore[arg-type]
    for column in _TEXT:
        if not isinstance(values.get(column), str):
            bad(column, "text")
    for column in _OPTIONAL_TEXT:
        value = values.get(column)
        if value is None:
            values[column] = ""
        elif not isinstance(value, str):
            bad(column, "text or NULL")
    try:
        values["parts"] = _parts_of(values.get("parts"))
    except (TypeError, ValueError, KeyError):
        bad("parts", "a JSON list of privacy parts or NULL")
    return Release(**values)  # type: ignore[arg-type]


def _has_parts_column(db: sqlite3.Connection) -> bool:
    return any(row[1] == "parts" for row in db.execute("PRAGMA table_info(releases)"))


def _add_parts_column(db: sqlite3.Connection) -> None:
    """Migrate a layout-1 file in place (inside the caller's write transaction): the
    nullable ``parts`` column, and format 2 so that older versions refuse the file.
    """
    if not _has_parts_column(db):
        db.execute("ALTER TABLE releases ADD COLUMN parts TEXT")
    db.execute("UPDATE budget SET format = MAX(format, ?)", (_PARTS_FORMAT,))


def _parts_of(text: object) -> tuple[PrivacyPart, ...]:
    if text is None or text == "":
        return ()
    if not isinstance(text, str):
        raise TypeError("parts: not text")
    records = json.loads(text)
    if not isinstance(records, list):
        raise ValueError("parts: not a list")
    return tuple(part_from_dict(record) for record in records)


def _rows(db: sqlite3.Connection, path: str | None, counted_only: bool) -> list[Release]:
    """Every row (or the counted ones), each checked value by value and against the hash
    chain: LedgerError naming the first row that fails.
    """
    names = _stored_names(db)
    ledger_id, head = _identity(db)
    # A file in the chained layout must carry its chain (a removed head is an edit too).
    chained = head is not None or _layout(db) >= _CHAIN_FORMAT
    previous = _genesis(db) if chained else ""
    # Every row is read and checked, also for the counted ones: a row whose state is
    # damaged must raise, not drop out of the count.
    rows = []
    last = None
    for values in db.execute(f"SELECT {', '.join(names)} FROM releases ORDER BY id"):
        stored = dict(zip(names, values))
        fields = {name: stored[name] for name in names if name not in ("chain", "seal")}
        row = _checked_row(path, fields)
        if chained:
            chain, seal = _seal(previous, stored)
            if stored.get("chain") != chain:
                raise LedgerError(
                    f"ledger {path}: release row {row.id} breaks the hash chain: the row, "
                    "or a row before it, or the totals, were changed or removed outside "
                    "dask-dppca (or the file is damaged); the ledger is refused"
                )
            if stored.get("seal") != seal:
                raise LedgerError(
                    f"ledger {path}: release row {row.id} does not match its seal: its state "
                    "(state, stage, settled_at, dispatched_at, note) was changed outside "
                    "dask-dppca (or the file is damaged); the ledger is refused"
                )
            previous, last = chain, row.id
        rows.append(replace(row, ledger_id=ledger_id or ""))
    if chained and head != previous:
        after = f"after release row {last}" if last is not None else "(it holds none now)"
        raise LedgerError(
            f"ledger {path}: the hash chain's head does not match its last row: rows {after} "
            "were removed, or the ledger's id or totals edited, outside dask-dppca; the "
            "ledger is refused"
        )
    return [row for row in rows if row.counted] if counted_only else rows


def _layout(db: sqlite3.Connection) -> int:
    found = db.execute("SELECT format FROM budget").fetchone()
    return found[0] if found and isinstance(found[0], int) else 0
