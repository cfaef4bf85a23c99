"""One definition of a ledger file's columns (ledger_rows.LEDGER_COLUMNS).

The CREATE TABLE text, the migrations of an older file, the row's columns and the hash
chain's columns are all derived from it, and must stay exactly what the file format has
always been: the text SQLite keeps in the file, and the chain hashes of existing files.
"""

from __future__ import annotations

import dataclasses
import sqlite3

from dask_dppca.privacy import GaussianCharge, PrivacyBudget
from dask_dppca.privacy.budget import ledger_chain, ledger_file, ledger_rows
from dask_dppca.privacy.budget.ledger_rows import LEDGER_COLUMNS, Release, create_tables_sql

#: The format-1 layout as it was written out by hand before the column table.
FORMAT_1 = """
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
#: What SQLite keeps of a new file's releases table after the migrations' ADD COLUMNs.
RELEASES_TAIL = ", stage TEXT, dispatched_at REAL, host TEXT, note TEXT, chain TEXT, seal TEXT)"

ROW = {
    "id": 3,
    "state": "committed",
    "reserved_at": 1.5,
    "settled_at": 2.25,
    "fit_id": "f",
    "label": "l",
    "dataset": "d",
    "sensitivity": 0.1,
    "sigma": 2.0,
    "excess": 0.0,
    "epsilon": None,
    "delta": 1e-6,
    "pid": 42,
    "stage": "dispatched",
    "dispatched_at": 2.0,
    "host": "h",
    "note": "",
    "parts": None,
}
#: The columns of a row's chain link, in the order they are hashed.
PINNED_FIXED = (
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
#: (chain, seal) of ROW after an all-zero hash, computed before the column table.
PINNED_LINK = (
    "ad974ccdfeaa7e8b1562e132d2c9101c82d78f1c97ee90c4b34b8872258138cd",
    "f3678352477b0861bc30664968dc2cfd5ac4c6616d0831df3b273ac8bd31ccd0",
)


def test_the_schema_and_the_chain_are_what_they_were():
    assert ledger_file.SCHEMA == FORMAT_1
    assert ledger_chain.FIXED == PINNED_FIXED
    assert ledger_chain.SETTLED == ("state", "settled_at", "stage", "dispatched_at", "note")
    assert ledger_chain.link("0" * 64, dict(ROW)) == PINNED_LINK
    assert ledger_file.COLUMNS == tuple(
        name for name in ROW if name != "parts"
    )  # the Release's stored fields, in file order


def test_a_new_file_holds_the_same_sql(tmp_path):
    path = str(tmp_path / "new.ledger")
    PrivacyBudget(1.0, 1e-5, ledger=path, create=True)
    with sqlite3.connect(path) as db:
        sql = dict(db.execute("SELECT name, sql FROM sqlite_master"))
    assert sql["releases"].endswith(RELEASES_TAIL)
    assert sql["budget"].endswith("format INTEGER NOT NULL\n, ledger_id TEXT, head TEXT)")


def test_a_format_1_file_migrates_in_the_table_s_order(tmp_path):
    """A hand-made format-1 file with one row: a charge adds the columns, chains the
    old row and the new one, and the file reads back."""
    path = str(tmp_path / "old.ledger")
    with sqlite3.connect(path) as db:
        db.executescript(FORMAT_1)
        db.execute("INSERT INTO budget VALUES (1.0, 1e-5, 0.0, 1)")
        db.execute(
            "INSERT INTO releases (state, reserved_at, settled_at, fit_id, label, dataset, "
            "sensitivity, sigma, excess, epsilon, delta, pid) "
            "VALUES ('committed', 1.0, 1.0, '', 'old', '', 0.1, 1.0, 0.0, NULL, NULL, 1)"
        )
    budget = PrivacyBudget.open(path)
    budget.spend(GaussianCharge(0.1, 1.0), label="new")
    with sqlite3.connect(path) as db:
        names = [info[1] for info in db.execute("PRAGMA table_info(releases)")]
    assert names == [*ledger_file.COLUMNS, "chain", "seal"]
    assert [r.label for r in PrivacyBudget.open(path).spent] == ["old", "new"]


def test_the_release_record_names_every_row_column():
    """Release is written out (its positional order is public API): it must hold every
    column a row reads back, and nothing else but the ledger id."""
    stored = {c.name for c in LEDGER_COLUMNS if c.table == "releases"} - {"chain", "seal"}
    assert {f.name for f in dataclasses.fields(Release)} == stored | {"ledger_id"}


def test_a_changed_column_table_changes_what_is_derived(monkeypatch):
    """The text and the chain come from the table: moving a column breaks the pins."""
    moved = [c for c in LEDGER_COLUMNS if c.name != "label"]
    label = next(c for c in LEDGER_COLUMNS if c.name == "label")
    monkeypatch.setattr(ledger_rows, "LEDGER_COLUMNS", (*moved, label))
    assert create_tables_sql() != FORMAT_1
    assert tuple(c.name for c in ledger_rows.columns("releases", hashed="chain")) != PINNED_FIXED
