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

The layout only ever grows by added nullable columns (``_ADDED_COLUMNS``), which a write
adds to an older file the first time it opens it.

Waits for the write lock are bounded (:data:`LOCK_TIMEOUT` seconds, then a
:class:`TimeoutError` naming the ledger).
"""

from __future__ import annotations

import json
import math
import os
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

from .parts import PrivacyPart, part_from_dict, part_to_dict

__all__ = [
    "LOCK_TIMEOUT",
    "Ledger",
    "LedgerError",
    "MemoryLedger",
    "Release",
    "Resolution",
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

#: Columns added to the layout since format 1, each nullable: ``(name, SQL type)``.
#: A write adds the missing ones to an older file (``ALTER TABLE ... ADD COLUMN``).
_ADDED_COLUMNS = (
    ("stage", "TEXT"),  # 'reserved' or 'dispatched' (NULL: written without stages)
    ("dispatched_at", "REAL"),
    ("host", "TEXT"),  # the machine of the reserving process
    ("note", "TEXT"),  # why the row was settled as it was (budget resolve)
)

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

    def dispatch(self, release_id: int) -> None:
        """Mark a reserved row dispatched (its release may draw from now on)."""
        ...

    def settle(self, release_id: int, state: str, note: str = "") -> None:
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
            row = replace(release, id=len(self._rows) + 1, pid=self._pid, host=_HOST)
            self._rows.append(row)
            return row

    def dispatch(self, release_id: int) -> None:
        """Mark a reserved row dispatched (its release may draw from now on)."""
        self._guard()
        with self._lock:
            row = self._rows[release_id - 1]
            _check_dispatch(row.state, release_id)
            self._rows[release_id - 1] = replace(row, stage="dispatched", dispatched_at=time.time())

    def settle(self, release_id: int, state: str, note: str = "") -> None:
        """Mark a reserved row committed or cancelled."""
        self._guard()
        with self._lock:
            row = self._rows[release_id - 1]
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

    def _refuse(self, *args: object) -> NoReturn:
        raise LedgerError(self.reason)

    record = dispatch = settle = rows = _refuse


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
        self._migrated = False

    # -- creating and opening ---------------------------------------------------------

    @classmethod
    def open_or_create(cls, path: str, epsilon: float, delta: float) -> SQLiteLedger:
        """Open the ledger at ``path``, creating it with these totals if it does not exist.

        A new ledger is written complete in a temporary file beside ``path`` and linked
        into place only then (``os.link`` fails if ``path`` exists), so no process ever
        sees a half-made ledger, and a file found at ``path`` must already be one: an
        empty or foreign file is refused, never initialised as a fresh budget.

        Raises
        ------
        ValueError
            If the ledger exists with other totals.
        LedgerError
            If ``path`` exists and holds no ledger (an empty file, another database).
        """
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(path):
            _create(path, epsilon, delta)
        found = cls.open(path).totals
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
            If there is no ledger at ``path`` (no file, an empty file, another database).
        """
        _refuse_empty(path)
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
            try:
                if _read_totals(db, self.location) != self._totals:
                    raise LedgerError(
                        f"ledger {self.location}: its totals changed under this budget"
                    )
                if write and not self._migrated:
                    _add_missing_columns(db)
                    self._migrated = True
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def record(self, release: Release, admit: Admit) -> Release:
        """Run ``admit`` on the counted rows and insert ``release``, in one transaction."""
        with self._transaction(write=True) as db:
            admit(_rows(db, self.location, counted_only=True))
            row = replace(release, pid=os.getpid(), host=_HOST)
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

    def dispatch(self, release_id: int) -> None:
        """Mark a reserved row dispatched: from now on its release may draw.

        Raises
        ------
        LedgerError
            If the row is no longer reserved (``budget resolve`` cancelled it): the
            release must then not draw.
        """
        with self._transaction(write=True) as db:
            _check_dispatch(_state(db, release_id), release_id)
            db.execute(
                "UPDATE releases SET stage = 'dispatched', dispatched_at = ? WHERE id = ?",
                (time.time(), release_id),
            )

    def settle(self, release_id: int, state: str, note: str = "") -> None:
        """Mark a reserved row committed or cancelled."""
        with self._transaction(write=True) as db:
            _check_settle(_state(db, release_id), state, release_id)
            db.execute(
                "UPDATE releases SET state = ?, settled_at = ?, note = ? WHERE id = ?",
                (state, time.time(), note or None, release_id),
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
                    db.execute(
                        "UPDATE releases SET state = ?, settled_at = ?, note = ? WHERE id = ?",
                        (outcome, time.time(), f"budget resolve: {why}", row.id),
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


def _state(db: sqlite3.Connection, release_id: int) -> str:
    found = db.execute("SELECT state FROM releases WHERE id = ?", (release_id,)).fetchone()
    if found is None:
        raise LedgerError(f"no release {release_id} in this ledger")
    return str(found[0])


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
    folder = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(prefix=".ledger-", suffix=".tmp", dir=folder)
    os.close(handle)
    try:
        with _connect(temporary, create=True) as db:
            db.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            _add_missing_columns(db)
            db.execute(
                "INSERT INTO budget VALUES (?, ?, ?, ?)", (epsilon, delta, time.time(), _FORMAT)
            )
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
    with os.fdopen(handle, "wb") as out, open(source, "rb") as data:
        out.write(data.read())
        out.flush()
        os.fsync(out.fileno())


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


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Add the columns of :data:`_ADDED_COLUMNS` an older file lacks (inside a write)."""
    present = {info[1] for info in db.execute("PRAGMA table_info(releases)")}
    for name, kind in _ADDED_COLUMNS:
        if name not in present:
            db.execute(f"ALTER TABLE releases ADD COLUMN {name} {kind}")


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
    db.execute("UPDATE budget SET format = ?", (_PARTS_FORMAT,))


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
    present = {info[1] for info in db.execute("PRAGMA table_info(releases)")}
    # An older file: fewer columns; "parts" only once a row with parts was written.
    columns = [name for name in (*_COLUMNS, "parts") if name in present]
    # Every row is read and checked, also for the counted ones: a row whose state is
    # damaged must raise, not drop out of the count.
    rows = [
        _checked_row(path, dict(zip(columns, values)))
        for values in db.execute(f"SELECT {', '.join(columns)} FROM releases ORDER BY id")
    ]
    return [row for row in rows if row.counted] if counted_only else rows
