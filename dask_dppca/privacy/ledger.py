"""Where a privacy budget keeps its releases: in this process, or in a durable ledger file.

A ledger holds a budget's totals (epsilon, delta) and one row per release: when it was
reserved and settled, the fit id, sensitivity, sigma, sampler excess, the fit's own
(epsilon, delta), a dataset id and a label.  A row is *reserved* before the release draws
its noise, then *committed* after, or *cancelled* when the noise was provably never
drawn.  Reserved and committed rows count as spent; a process that dies between
reservation and commit leaves its row reserved, so a crash never under-counts.  The
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

Waits for the write lock are bounded (:data:`LOCK_TIMEOUT` seconds, then a
:class:`TimeoutError` naming the ledger).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn, Protocol

from .parts import PrivacyPart, part_from_dict, part_to_dict

__all__ = [
    "LOCK_TIMEOUT",
    "Ledger",
    "LedgerError",
    "MemoryLedger",
    "Release",
    "SQLiteLedger",
    "UnreachableLedger",
    "ledger_path",
]

#: Seconds a ledger operation waits for another process's write lock before giving up.
LOCK_TIMEOUT = 60.0

#: Version of the file layout below; a ledger written by another version is refused.
_FORMAT = 1
#: Layouts this version reads: 1, and 2 = 1 plus the nullable ``parts`` column holding
#: rows with mixed parts (a file becomes 2 when its first such row is written, so a
#: version that cannot count them refuses the file instead of under-counting it).
_READABLE_FORMATS = (1, 2)
_PARTS_FORMAT = 2

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
)

#: States that count as spent.
COUNTED = ("reserved", "committed")


class LedgerError(RuntimeError):
    """A budget's ledger cannot be read or charged here (missing, foreign, unreachable)."""


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
    parts : tuple of PrivacyPart
        A release stated as parts (:mod:`.parts`: Gaussian, pure or approximate DP,
        composed exactly by :mod:`.accounting`); empty for a Gaussian release stated by
        ``sensitivity / sigma``.  A row with parts has ``sensitivity = 0``, ``sigma = 1``.
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
    parts: tuple[PrivacyPart, ...] = ()

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

    def settle(self, release_id: int, state: str) -> None:
        """Mark a reserved row committed or cancelled."""
        ...

    def rows(self) -> list[Release]:
        """Every row, oldest first."""
        ...


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

    def _guard(self) -> None:
        if os.getpid() != self._pid:
            raise LedgerError(
                f"this budget has no ledger file: it lives in process {self._pid} and cannot be "
                f"charged from process {os.getpid()}; create it with ledger=PATH to share it"
            )

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and append ``release``, atomically."""
        self._guard()
        with self._lock:
            admit([row for row in self._rows if row.counted])
            row = replace(release, id=len(self._rows) + 1, pid=self._pid)
            self._rows.append(row)
            return row

    def settle(self, release_id: int, state: str) -> None:
        """Mark a reserved row committed or cancelled."""
        self._guard()
        with self._lock:
            row = self._rows[release_id - 1]
            _check_settle(row.state, state, release_id)
            self._rows[release_id - 1] = replace(row, state=state, settled_at=time.time())

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

    def _refuse(self, *args: object) -> NoReturn:
        raise LedgerError(self.reason)

    record = settle = rows = _refuse


class SQLiteLedger:
    """A budget's releases in a SQLite file, shared by every thread and process using it.

    Parameters
    ----------
    path : str
        Absolute path of the ledger file (see :func:`ledger_path`).
    epsilon, delta : float
        The totals this ledger must hold; checked on every operation, so a ledger
        replaced by one with other totals is refused rather than silently used.
    """

    def __init__(self, path: str, epsilon: float, delta: float) -> None:
        self.location = path
        self._totals = (epsilon, delta)

    # -- creating and opening ---------------------------------------------------------

    @classmethod
    def open_or_create(cls, path: str, epsilon: float, delta: float) -> SQLiteLedger:
        """Open the ledger at ``path``, creating it with these totals if it does not exist.

        Raises
        ------
        ValueError
            If the ledger exists with other totals.
        """
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with _connect(path, create=True) as db:
            db.execute("BEGIN IMMEDIATE")
            tables = {
                name
                for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            if tables and "budget" not in tables:  # someone else's database: leave it alone
                db.execute("ROLLBACK")
                raise LedgerError(
                    f"ledger {path}: not a dask-dppca ledger (a SQLite file with "
                    f"other tables: {sorted(tables)})"
                )
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            if db.execute("SELECT COUNT(*) FROM budget").fetchone()[0] == 0:
                db.execute(
                    "INSERT INTO budget VALUES (?, ?, ?, ?)", (epsilon, delta, time.time(), _FORMAT)
                )
            db.execute("COMMIT")
            found = _read_totals(db, path)
        if found != (epsilon, delta):
            raise ValueError(
                f"ledger: {path} holds a budget of (epsilon={found[0]!r}, delta={found[1]!r}), "
                f"not (epsilon={epsilon!r}, delta={delta!r}); open it with "
                "PrivacyBudget.open(path) or use another file"
            )
        return cls(path, epsilon, delta)

    @classmethod
    def open(cls, path: str) -> SQLiteLedger:
        """Open an existing ledger, taking its totals from the file.

        Raises
        ------
        LedgerError
            If there is no ledger at ``path``.
        """
        with _connect(path) as db:
            totals = _read_totals(db, path)
        return cls(path, *totals)

    # -- operations ---------------------------------------------------------------------

    @property
    def totals(self) -> tuple[float, float]:
        """The (epsilon, delta) the ledger holds."""
        return self._totals

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        with _connect(self.location) as db:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            if _read_totals(db, self.location) != self._totals:
                db.execute("ROLLBACK")
                raise LedgerError(f"ledger {self.location}: its totals changed under this budget")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and insert ``release``, in one transaction."""
        with self._transaction(write=True) as db:
            admit(_rows(db, counted_only=True))
            row = replace(release, pid=os.getpid())
            names = list(_COLUMNS[1:])
            values = [getattr(row, name) for name in names]
            if row.parts:
                _add_parts_column(db)
                names.append("parts")
                values.append(json.dumps([part_to_dict(part) for part in row.parts]))
            cursor = db.execute(
                f"INSERT INTO releases ({', '.join(names)}) "
                f"VALUES ({', '.join('?' * len(values))})",
                values,
            )
            row_id = cursor.lastrowid
            assert row_id is not None  # set by the INSERT just run
            return replace(row, id=row_id)

    def settle(self, release_id: int, state: str) -> None:
        """Mark a reserved row committed or cancelled."""
        with self._transaction(write=True) as db:
            (current,) = db.execute(
                "SELECT state FROM releases WHERE id = ?", (release_id,)
            ).fetchone()
            _check_settle(current, state, release_id)
            db.execute(
                "UPDATE releases SET state = ?, settled_at = ? WHERE id = ?",
                (state, time.time(), release_id),
            )

    def rows(self) -> list[Release]:
        """Every row, oldest first."""
        with self._transaction(write=False) as db:
            return _rows(db, counted_only=False)


def _check_settle(current: str, state: str, release_id: int) -> None:
    if state not in ("committed", "cancelled"):
        raise ValueError(f"state: must be 'committed' or 'cancelled', got {state!r}")
    if current != "reserved":
        raise LedgerError(
            f"release {release_id} is {current}, not reserved: it cannot become {state}"
        )


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
        raise LedgerError(f"ledger {path}: {error}") from None
    except sqlite3.DatabaseError as error:
        raise LedgerError(f"ledger {path}: not a dask-dppca ledger ({error})") from None
    finally:
        db.close()


def _read_totals(db: sqlite3.Connection, path: str) -> tuple[float, float]:
    try:
        found = db.execute("SELECT epsilon, delta, format FROM budget").fetchall()
    except sqlite3.OperationalError:
        found = []
    if len(found) != 1:
        raise LedgerError(f"ledger {path}: not a dask-dppca ledger (no budget totals)")
    epsilon, delta, layout = found[0]
    if layout not in _READABLE_FORMATS:
        raise LedgerError(
            f"ledger {path}: file format {layout}, this version reads {_READABLE_FORMATS}"
        )
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise LedgerError(f"ledger {path}: invalid totals ({epsilon!r}, {delta!r})")
    return float(epsilon), float(delta)


def _has_parts_column(db: sqlite3.Connection) -> bool:
    return any(row[1] == "parts" for row in db.execute("PRAGMA table_info(releases)"))


def _add_parts_column(db: sqlite3.Connection) -> None:
    """Migrate a layout-1 file in place (inside the caller's write transaction): the
    nullable ``parts`` column, and format 2 so that older versions refuse the file.
    """
    if not _has_parts_column(db):
        db.execute("ALTER TABLE releases ADD COLUMN parts TEXT")
    db.execute("UPDATE budget SET format = ?", (_PARTS_FORMAT,))


def _parts_of(text: str | None) -> tuple[PrivacyPart, ...]:
    return () if not text else tuple(part_from_dict(record) for record in json.loads(text))


def _rows(db: sqlite3.Connection, counted_only: bool) -> list[Release]:
    names = (*_COLUMNS, "parts") if _has_parts_column(db) else _COLUMNS
    query = f"SELECT {', '.join(names)} FROM releases"
    if counted_only:
        query += " WHERE state IN ('reserved', 'committed')"
    rows = []
    for values in db.execute(query + " ORDER BY id"):
        fields = dict(zip(names, values))
        fields["parts"] = _parts_of(fields.get("parts"))
        rows.append(Release(**fields))
    return rows
