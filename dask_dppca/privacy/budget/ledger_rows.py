"""A ledger's rows: its columns, the release record, the ledger's errors, and the rules its
rows obey.

:data:`LEDGER_COLUMNS` is the one definition of a ledger file's columns: the tables'
``CREATE TABLE`` text, the migration of an older file and the hash chain's columns
(:mod:`.ledger_file`, :mod:`.ledger_chain`) are derived from it.
:class:`Release` is one row as every ledger (:mod:`.ledger`) keeps it;
:func:`checked_row` turns the values read back from a ledger file into one, refusing a
value that is not what its column holds; :func:`check_dispatch`, :func:`check_settle`
and :func:`check_fit` are the state changes a reserved row allows.  docs/ledger.md holds
the design.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NoReturn

from ..mechanisms.parts import PrivacyPart, part_from_dict

__all__ = [
    "COUNTED",
    "HOST",
    "LEDGER_COLUMNS",
    "Column",
    "LedgerError",
    "LedgerReplacedError",
    "Release",
    "check_dispatch",
    "check_fit",
    "check_settle",
    "checked_row",
    "columns",
    "create_tables_sql",
    "is_number",
]

#: States that count as spent.
COUNTED = ("reserved", "committed")

#: This machine, as the rows name it.
HOST = socket.gethostname()


@dataclass(frozen=True)
class Column:
    """One column of a ledger file.

    Attributes
    ----------
    table : {"budget", "releases"}
        The table holding it: the totals, or one row per release.
    name : str
    sql : str
        Its type and constraints, as ``CREATE TABLE`` and ``ALTER TABLE ... ADD COLUMN``
        write them.
    added : {"created", "write", "parts", "chain"}
        When a file gets it: in format 1's ``CREATE TABLE`` (``created``); added, nullable,
        by any write to an older file (``write``); with the first row stated as privacy
        parts, which raises the file to format 2 (``parts``); with the hash chain, format 3
        (``chain``).
    hashed : {"chain", "seal", ""}
        What covers it (:mod:`.ledger_chain`): a row's chain link (fixed when the row is
        written), its seal (changed by a settlement), or neither.
    """

    table: Literal["budget", "releases"]
    name: str
    sql: str
    added: Literal["created", "write", "parts", "chain"]
    hashed: Literal["chain", "seal", ""] = ""


def _budget(name: str, sql: str, added: Literal["created", "chain"] = "created") -> Column:
    return Column("budget", name, sql, added)


def _row(
    name: str,
    sql: str,
    hashed: Literal["chain", "seal", ""],
    added: Literal["created", "write", "parts", "chain"] = "created",
) -> Column:
    return Column("releases", name, sql, added, hashed)


#: Every column of a ledger file, each table's in the order of its file (older files add
#: the later ones in this order too).  The order is part of the file format: the chain
#: hashes a row's columns in it, and the ``CREATE TABLE`` text follows it.
LEDGER_COLUMNS: tuple[Column, ...] = (
    _budget("epsilon", "REAL NOT NULL"),
    _budget("delta", "REAL NOT NULL"),
    _budget("created", "REAL NOT NULL"),
    _budget("format", "INTEGER NOT NULL"),
    _budget("ledger_id", "TEXT", "chain"),  # the ledger's random id, fixed at creation
    _budget("head", "TEXT", "chain"),  # the chain hash of the last row (or the genesis)
    _row("id", "INTEGER PRIMARY KEY AUTOINCREMENT", "chain"),
    _row("state", "TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'cancelled'))", "seal"),
    _row("reserved_at", "REAL NOT NULL", "chain"),
    _row("settled_at", "REAL", "seal"),
    _row("fit_id", "TEXT NOT NULL", "chain"),
    _row("label", "TEXT NOT NULL", "chain"),
    _row("dataset", "TEXT NOT NULL", "chain"),
    _row("sensitivity", "REAL NOT NULL", "chain"),
    _row("sigma", "REAL NOT NULL", "chain"),
    _row("excess", "REAL NOT NULL", "chain"),
    _row("epsilon", "REAL", "chain"),
    _row("delta", "REAL", "chain"),
    _row("pid", "INTEGER NOT NULL", "chain"),
    # 'reserved' or 'dispatched' (NULL: written without stages)
    _row("stage", "TEXT", "seal", "write"),
    _row("dispatched_at", "REAL", "seal", "write"),
    _row("host", "TEXT", "chain", "write"),  # the machine of the reserving process
    _row("note", "TEXT", "seal", "write"),  # why the row was settled as it was (resolve)
    _row("parts", "TEXT", "chain", "parts"),  # JSON privacy parts (NULL: sensitivity / sigma)
    _row("chain", "TEXT", "", "chain"),  # over the fixed columns and the previous chain
    _row("seal", "TEXT", "", "chain"),  # over the chain and the settlement columns
)


def columns(
    table: str, *, added: tuple[str, ...] | None = None, hashed: str | None = None
) -> tuple[Column, ...]:
    """The columns of ``table`` in file order, those ``added`` so or ``hashed`` so only.

    Parameters
    ----------
    table : {"budget", "releases"}
    added : tuple of str, optional
        Keep the columns a file gets at one of these moments (:class:`Column`).
    hashed : str, optional
        Keep the columns covered so.

    Returns
    -------
    tuple of Column
    """
    return tuple(
        column
        for column in LEDGER_COLUMNS
        if column.table == table
        and (added is None or column.added in added)
        and (hashed is None or column.hashed == hashed)
    )


#: How each table's ``CREATE TABLE`` text separates its columns (the budget's fit on one
#: line); part of the text SQLite keeps in the file.
_CREATE_SEPARATOR = {"budget": ", ", "releases": ",\n    "}


def create_tables_sql() -> str:
    """The ``CREATE TABLE`` statements of a format-1 ledger (its ``created`` columns).

    Returns
    -------
    str
        Both tables' statements, ``;``-terminated; the later columns are added by
        :func:`~.ledger_file.add_missing_columns` and :func:`~.ledger_file.add_parts_column`.
    """
    statements = []
    for table, separator in _CREATE_SEPARATOR.items():
        body = separator.join(f"{c.name} {c.sql}" for c in columns(table, added=("created",)))
        statements.append(f"CREATE TABLE IF NOT EXISTS {table} (\n    {body}\n);\n")
    return "\n" + "".join(statements)


class LedgerError(RuntimeError):
    """A budget's ledger cannot be read or charged here (missing, foreign, unreachable).

    Examples
    --------
    >>> import os, tempfile
    >>> import dask_dppca as dd
    >>> missing = os.path.join(tempfile.mkdtemp(), "study.ledger")
    >>> try:
    ...     dd.PrivacyBudget.open(missing)
    ... except dd.LedgerError:
    ...     print("no ledger there")
    no ledger there
    """


class LedgerReplacedError(LedgerError):
    """The file at a ledger's path is no longer the ledger a budget or a reservation was
    made in (deleted and created again, or swapped): its ledger id differs.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> issubclass(dd.LedgerReplacedError, dd.LedgerError)  # caught with the others
    True
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


# -- the state changes of a reserved row ---------------------------------------------------


def check_fit(found: str, fit_id: str | None, release_id: int, path: str | None) -> None:
    """Raise :class:`LedgerReplacedError` unless row ``release_id`` (of fit ``found``)
    belongs to ``fit_id`` (when given): a row of that number in a replaced file is another.
    """
    if fit_id is not None and found != fit_id:
        where = f"ledger {path}" if path else "this budget"
        raise LedgerReplacedError(
            f"{where}: release {release_id} there belongs to fit {found!r}, not to fit "
            f"{fit_id!r} that reserved it: the file was replaced after the reservation"
        )


def check_dispatch(current: str, release_id: int) -> None:
    """Raise :class:`LedgerError` unless a row in state ``current`` may be dispatched."""
    if current != "reserved":
        raise LedgerError(
            f"release {release_id} is {current}, not reserved (budget resolve settled it "
            "after its process seemed gone): its release must not draw"
        )


def check_settle(current: str, state: str, release_id: int) -> None:
    """Raise unless a row in state ``current`` may become ``state`` (committed, cancelled)."""
    if state not in ("committed", "cancelled"):
        raise ValueError(f"state: must be 'committed' or 'cancelled', got {state!r}")
    if current != "reserved":
        raise LedgerError(
            f"release {release_id} is {current}, not reserved: it cannot become {state}"
        )


# -- the values of a row read back from a file ----------------------------------------------


def is_number(value: object) -> bool:
    """Whether ``value`` is an int or a float (not a bool): what a REAL column may hold."""
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


def checked_row(path: str | None, values: dict[str, object]) -> Release:
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
        if not (is_number(value) and test(float(value))):  # type: ignore[arg-type]
            bad(column, meaning)
        values[column] = float(value)  # type: ignore[arg-type]
    for column, (test, meaning) in _OPTIONAL_NUMBERS.items():
        value = values.get(column)
        if value is None:
            continue
        if not (is_number(value) and test(float(value))):  # type: ignore[arg-type]
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


def _parts_of(text: object) -> tuple[PrivacyPart, ...]:
    if text is None or text == "":
        return ()
    if not isinstance(text, str):
        raise TypeError("parts: not text")
    records = json.loads(text)
    if not isinstance(records, list):
        raise ValueError("parts: not a list")
    return tuple(part_from_dict(record) for record in records)
