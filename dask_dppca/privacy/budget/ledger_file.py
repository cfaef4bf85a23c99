"""A ledger's SQLite file: its layout and migrations, creating and opening it, and reading
its rows back checked value by value and against the hash chain (:mod:`.ledger_chain`).

:class:`~dask_dppca.privacy.budget.ledger.SQLiteLedger` runs its transactions on what this
module opens; docs/ledger.md holds the design (why SQLite, the layout's growth, the
checks on every read).
"""

from __future__ import annotations

import errno
import math
import os
import secrets
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from .ledger_chain import genesis, link
from .ledger_rows import LedgerError, Release, checked_row, columns, create_tables_sql, is_number

__all__ = [
    "COLUMNS",
    "FORMAT",
    "LOCK_TIMEOUT",
    "READABLE_FORMATS",
    "SCHEMA",
    "add_missing_columns",
    "add_parts_column",
    "connect",
    "create_file",
    "disk_full",
    "identity",
    "present_columns",
    "read_rows",
    "read_totals",
    "refuse_empty",
]

#: Seconds a ledger operation waits for another process's write lock before giving up.
LOCK_TIMEOUT = 60.0

#: Layouts this version reads: 1; 2 = 1 plus the nullable ``parts`` column holding
#: rows with mixed parts (a file becomes 2 when its first such row is written, so a
#: version that cannot count them refuses the file instead of under-counting it); 3 =
#: the ledger id and the hash chain (``chain`` and ``seal``), which a version that does
#: not keep the chain must not write to (its rows would break it), so it refuses the file.
READABLE_FORMATS = (1, 2, 3)
_PARTS_FORMAT = 2
_CHAIN_FORMAT = 3
#: Version of the layout of a new ledger (a write raises an older file to it).
FORMAT = _CHAIN_FORMAT

#: The tables of a format-1 ledger (generated from :data:`~.ledger_rows.LEDGER_COLUMNS`);
#: the later columns are added by :func:`add_missing_columns` and :func:`add_parts_column`.
SCHEMA = create_tables_sql()

#: The columns of a release row (:class:`~.ledger_rows.Release`'s stored fields), in order:
#: format 1's and those any write adds (the parts and the chain's are read apart).
COLUMNS = tuple(column.name for column in columns("releases", added=("created", "write")))


# -- opening ---------------------------------------------------------------------------------


@contextmanager
def connect(path: str, create: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection in autocommit mode (transactions are explicit), always closed.

    Without ``create`` the file must exist (SQLite's ``mode=rw``): an operation on a
    ledger that was deleted fails instead of starting an empty one.  SQLite's errors
    leave as :class:`~.ledger_rows.LedgerError` (or ``TimeoutError`` for a lock held
    beyond :data:`LOCK_TIMEOUT`), naming the ledger.
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
        if disk_full(error):
            raise LedgerError(
                f"ledger {path}: disk full ({error}): nothing was recorded; free space on "
                "its file system and try again"
            ) from None
        raise LedgerError(f"ledger {path}: {error}") from None
    except sqlite3.DatabaseError as error:
        raise LedgerError(f"ledger {path}: not a dask-dppca ledger ({error})") from None
    finally:
        db.close()


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's SQLITE_FULL, or the file system's ENOSPC."""
    code = getattr(error, "sqlite_errorcode", None)
    return (
        code == sqlite3.SQLITE_FULL
        or "disk is full" in str(error)
        or (isinstance(error, OSError) and error.errno == errno.ENOSPC)
    )


def refuse_empty(path: str) -> None:
    """A file at ``path`` with no bytes is no ledger (SQLite would take it for a new one)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return  # missing: connect says so
    if size == 0:
        raise LedgerError(
            f"ledger {path}: the file is empty (0 bytes), not a dask-dppca ledger; it is "
            "not used as a fresh budget. Restore the ledger from a backup, or remove the "
            "file to start a new budget on purpose"
        )


def read_totals(db: sqlite3.Connection, path: str) -> tuple[float, float]:
    """The (epsilon, delta) the file holds; LedgerError for a file that holds no ledger,
    one of a format this version does not read, or unsound totals.
    """
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
    if layout not in READABLE_FORMATS:
        raise LedgerError(
            f"ledger {path}: file format {layout!r}, this version reads {READABLE_FORMATS}"
        )
    if not (
        is_number(epsilon)
        and is_number(delta)
        and math.isfinite(epsilon)
        and epsilon > 0
        and 0 < delta < 1
    ):
        raise LedgerError(
            f"ledger {path}: invalid totals in table budget (epsilon={epsilon!r}, "
            f"delta={delta!r}): epsilon must be a finite number > 0 and delta in (0, 1)"
        )
    return float(epsilon), float(delta)


# -- the layout and its migrations ------------------------------------------------------------


def present_columns(db: sqlite3.Connection, table: str = "releases") -> set[str]:
    """The columns ``table`` has in this file."""
    return {info[1] for info in db.execute(f"PRAGMA table_info({table})")}


def identity(db: sqlite3.Connection) -> tuple[str | None, str | None]:
    """The file's (ledger id, chain head); (None, None) for a file of an older layout."""
    present = present_columns(db, "budget")
    if "ledger_id" not in present or "head" not in present:
        return None, None
    found = db.execute("SELECT ledger_id, head FROM budget").fetchone()
    ledger_id, head = found if found else (None, None)
    return (
        ledger_id if isinstance(ledger_id, str) else None,
        head if isinstance(head, str) else None,
    )


def _layout(db: sqlite3.Connection) -> int:
    found = db.execute("SELECT format FROM budget").fetchone()
    return found[0] if found and isinstance(found[0], int) else 0


def _stored_names(db: sqlite3.Connection) -> list[str]:
    """The row columns this file has, in file order (:data:`COLUMNS`, parts, chain, seal)."""
    present = present_columns(db)
    return [column.name for column in columns("releases") if column.name in present]


def add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring an older file up to this layout (inside a write): the columns added since
    format 1, a ledger id, and the hash chain over the rows it holds.

    The rows of a file without a chain are checked value by value first; the chain then
    vouches for them as they are from this write on.
    """
    _add_columns(db, "releases", ("write", "chain"))
    _add_columns(db, "budget", ("chain",))
    ledger_id, head = identity(db)
    if ledger_id and head:
        return
    if not ledger_id:
        db.execute("UPDATE budget SET ledger_id = ?", (secrets.token_hex(16),))
    previous = genesis(db)
    names = _stored_names(db)
    for values in db.execute(f"SELECT {', '.join(names)} FROM releases ORDER BY id").fetchall():
        stored = dict(zip(names, values))
        # Only sound rows are sealed.
        checked_row(None, {n: v for n, v in stored.items() if n not in ("chain", "seal")})
        chain, seal = link(previous, stored)
        db.execute(
            "UPDATE releases SET chain = ?, seal = ? WHERE id = ?", (chain, seal, stored["id"])
        )
        previous = chain
    db.execute("UPDATE budget SET head = ?, format = MAX(format, ?)", (previous, _CHAIN_FORMAT))


def _add_columns(db: sqlite3.Connection, table: str, added: tuple[str, ...]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` each column of ``table`` ``added`` so that it lacks."""
    present = present_columns(db, table)
    for column in columns(table, added=added):
        if column.name not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column.name} {column.sql}")


def add_parts_column(db: sqlite3.Connection) -> None:
    """Migrate a layout-1 file in place (inside the caller's write transaction): the
    nullable ``parts`` column, and format 2 so that older versions refuse the file.
    """
    _add_columns(db, "releases", ("parts",))
    db.execute("UPDATE budget SET format = MAX(format, ?)", (_PARTS_FORMAT,))


# -- reading the rows back --------------------------------------------------------------------


def read_rows(db: sqlite3.Connection, path: str | None, counted_only: bool) -> list[Release]:
    """Every row (or the counted ones), each checked value by value and against the hash
    chain: LedgerError naming the first row that fails.
    """
    names = _stored_names(db)
    ledger_id, head = identity(db)
    # A file in the chained layout must carry its chain (a removed head is an edit too).
    chained = head is not None or _layout(db) >= _CHAIN_FORMAT
    previous = genesis(db) if chained else ""
    # Every row is read and checked, also for the counted ones: a row whose state is
    # damaged must raise, not drop out of the count.
    rows = []
    last = None
    for values in db.execute(f"SELECT {', '.join(names)} FROM releases ORDER BY id"):
        stored = dict(zip(names, values))
        fields = {name: stored[name] for name in names if name not in ("chain", "seal")}
        row = checked_row(path, fields)
        if chained:
            chain, seal = link(previous, stored)
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


# -- creating ---------------------------------------------------------------------------------


def create_file(path: str, epsilon: float, delta: float) -> None:
    """Write a complete new ledger to a temporary file, then link it to ``path``.

    Another process creating the same ledger at the same time wins or loses the link;
    the loser's file is discarded and it opens the winner's.
    """
    try:
        _create_aside(path, epsilon, delta)
    except (OSError, LedgerError) as error:
        if not disk_full(error):
            raise
        raise LedgerError(
            f"ledger {path}: disk full, the ledger was not created (no file left there): {error}"
        ) from None


def _create_aside(path: str, epsilon: float, delta: float) -> None:
    folder = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(prefix=".ledger-", suffix=".tmp", dir=folder)
    os.close(handle)
    try:
        with connect(temporary, create=True) as db:
            db.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.execute(
                "INSERT INTO budget (epsilon, delta, created, format) VALUES (?, ?, ?, ?)",
                (epsilon, delta, time.time(), FORMAT),
            )
            add_missing_columns(db)  # the ledger id and the chain's head
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
