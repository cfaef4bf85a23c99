"""The hash chain over a ledger file's rows: tamper evidence (docs/ledger.md).

Each row's ``chain`` = sha256(previous row's chain, or the genesis, + the row's fixed
columns, :data:`FIXED`); its ``seal`` = sha256(its chain + its settlement columns,
:data:`SETTLED`, the only ones an operation changes later).  Updating a row (dispatch,
commit, cancel, resolve) rewrites its seal in the same transaction and leaves every
chain as it was; the budget table's ``head`` is the last row's chain, so a removed last
row is seen too.  The genesis hashes the ledger id and the totals.  Values are hashed
typed, floats exactly (``float.hex``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence

from .ledger_rows import LEDGER_COLUMNS, columns, is_number

__all__ = ["FIXED", "SETTLED", "genesis", "link", "reseal"]

#: Columns fixed when a row is written, hashed into its chain link (in file order).
FIXED = tuple(column.name for column in columns("releases", hashed="chain"))
#: Columns a settlement changes, hashed into the row's seal (in file order).
SETTLED = tuple(column.name for column in columns("releases", hashed="seal"))
#: Columns of either table holding floats, hashed exactly (``float.hex``).
_REAL = frozenset(column.name for column in LEDGER_COLUMNS if column.sql.startswith("REAL"))


def _norm(stored: dict[str, object], name: str) -> object:
    """A column's value as hashed: typed, floats exactly (hex), NULL as None."""
    value = stored.get(name)
    if value is None:
        return None
    if name in _REAL and is_number(value):
        return ["r", float(value).hex()]  # type: ignore[arg-type]
    if isinstance(value, int) and not isinstance(value, bool):
        return ["i", value]
    if isinstance(value, str):
        return ["t", value]
    return ["?", type(value).__name__, repr(value)]


def _digest(previous: str, items: Sequence[object]) -> str:
    text = json.dumps([previous, *items], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def link(previous: str, stored: dict[str, object]) -> tuple[str, str]:
    """(chain, seal) of a row stored as ``stored`` after a row whose chain is ``previous``."""
    chain = _digest(previous, [_norm(stored, name) for name in FIXED])
    return chain, reseal(chain, stored)


def reseal(chain: str, stored: dict[str, object]) -> str:
    """The seal of a row whose chain is ``chain``, over its settlement columns as stored."""
    return _digest(chain, [_norm(stored, name) for name in SETTLED])


def genesis(db: sqlite3.Connection) -> str:
    """The hash before the first row: of the ledger id and the totals."""
    names = ("ledger_id", "epsilon", "delta", "created")
    found = db.execute(f"SELECT {', '.join(names)} FROM budget").fetchone()
    stored = dict(zip(names, found))
    return _digest("dask-dppca ledger", [_norm(stored, name) for name in names])
