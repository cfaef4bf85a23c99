"""A ledger that is swapped, edited, missing or on a full disk.

Real SQLite files edited behind the library's back (``sqlite3`` and raw bytes), a real
full file system (a 64 KiB tmpfs in a private mount namespace, root only); no mocks of
the ledger itself.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import struct
import subprocess
import sys
import textwrap

import pytest

from dask_dppca.cli import main
from dask_dppca.privacy.budget import ledger_file
from dask_dppca.privacy.budget.charging import release_dispatched, reserve_release
from dask_dppca.privacy.budget.privacy_budget import (
    GaussianCharge,
    LedgerError,
    LedgerReplacedError,
    PrivacyBudget,
)

#: A sigma whose 8 bytes are easy to find in the file (not integral: SQLite would store
#: an integral REAL as an integer).
ODD_SIGMA = 5.4321


@pytest.fixture
def ledger(tmp_path):
    return str(tmp_path / "study.ledger")


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def _replace(path: str, *, reserve_other: bool, epsilon: float = 2.0) -> PrivacyBudget:
    """Delete the ledger and create it again with the same totals, holding one release of
    another fit as row 1 (reserved, or committed)."""
    os.remove(path)
    again = PrivacyBudget(epsilon, 1e-5, ledger=path, create=True)
    if reserve_other:
        again.reserve(GaussianCharge(1.0, 50.0), fit_id="other", label="another fit")
    else:
        again.spend(GaussianCharge(1.0, 50.0), label="another fit")
    return again


# -- 1. identity: a replaced ledger is detected at settle time ------------------------------------


def test_a_ledger_replaced_before_the_draw_stops_the_fit_before_it_draws(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    with pytest.raises(LedgerReplacedError) as error:
        with reserve_release(GaussianCharge(1.0, 50.0), fit_id="f1", carried=[budget]):
            _replace(ledger, reserve_other=True)
            release_dispatched("f1")  # what the compute layer calls before anything draws
            pytest.fail("the release was allowed to draw")  # pragma: no cover
    text = _one_line(error)
    assert "replaced" in text and "nothing was released" in text
    (other,) = PrivacyBudget.open(ledger).spent  # the new file's row 1 is untouched
    assert (other.fit_id, other.state, other.stage) == ("other", "reserved", "reserved")


@pytest.mark.parametrize("drawn", [False, True])
def test_a_ledger_deleted_mid_fit_says_so_and_whether_the_noise_was_drawn(ledger, drawn):
    """Deleted, not replaced: the message must not say "create it first" (a ledger
    created again would start from nothing spent) and says whether the release drew."""
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    with pytest.raises(LedgerReplacedError) as error:
        with reserve_release(GaussianCharge(1.0, 50.0), fit_id="f1", carried=[budget]):
            if drawn:
                release_dispatched("f1")
            os.unlink(ledger)
            if not drawn:
                release_dispatched("f1")
                pytest.fail("the release was allowed to draw")  # pragma: no cover
    text = _one_line(error)
    assert "was deleted" in text and "restore it from a backup" in text
    assert "create it first" not in text
    assert ("WAS drawn" in text) if drawn else ("nothing was released" in text)
    assert not os.path.exists(ledger)  # nothing made an empty ledger there


def test_a_ledger_replaced_after_the_draw_fails_the_commit_and_says_where_it_is_charged(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    with pytest.raises(LedgerReplacedError) as error:
        with reserve_release(GaussianCharge(1.0, 50.0), fit_id="f1", carried=[budget]) as (
            reservation,
        ):
            release_dispatched("f1")
            _replace(ledger, reserve_other=True)  # the draw happens here
    text = _one_line(error)
    original = reservation.release.ledger_id
    assert "WAS drawn" in text and original in text and "no longer exists" in text
    # The commit did not land on the new file's row 1 (another fit's reservation).
    (other,) = PrivacyBudget.open(ledger).spent
    assert (other.fit_id, other.state) == ("other", "reserved")
    assert other.ledger_id not in ("", original)


def test_settle_matches_the_row_by_its_ledger_and_fit_not_by_its_number(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    mine = budget.reserve(GaussianCharge(1.0, 50.0), fit_id="mine")
    store = budget._ledger
    with pytest.raises(LedgerReplacedError, match="belongs to fit 'mine', not to fit 'yours'"):
        store.settle(mine.release.id, "committed", fit_id="yours", ledger_id=store.ledger_id)
    with pytest.raises(LedgerReplacedError, match="not the ledger release 1 was reserved in"):
        store.settle(mine.release.id, "committed", fit_id="mine", ledger_id="0" * 32)
    assert budget.spent[0].state == "reserved"
    mine.commit()
    assert budget.spent[0].state == "committed"


def test_a_budget_and_its_pickled_copies_refuse_a_replaced_file(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    copy = pickle.loads(pickle.dumps(budget))
    _replace(ledger, reserve_other=False)
    for use in (budget, copy):
        with pytest.raises(LedgerReplacedError, match="open it again") as error:
            use.reserve(GaussianCharge(1.0, 50.0), fit_id="late")
        _one_line(error)
    assert PrivacyBudget.open(ledger).releases == 1  # nothing was charged to the new file


# -- 2. tamper evidence: the hash chain -----------------------------------------------------------


def _three_rows(path: str) -> PrivacyBudget:
    """Rows 1 and 3 committed, row 2 reserved then dispatched (sigma ODD_SIGMA)."""
    budget = PrivacyBudget(2.0, 1e-5, ledger=path, create=True)
    budget.spend(GaussianCharge(1.0, 50.0), label="first")
    budget.reserve(GaussianCharge(1.0, ODD_SIGMA), fit_id="two", label="second").dispatch()
    budget.spend(GaussianCharge(1.0, 50.0), label="third")
    return budget


def _refused_everywhere(budget: PrivacyBudget, path: str, needle: str, capsys) -> None:
    """Every open and every use refuse the ledger with one line containing ``needle``."""
    for use in (
        lambda: PrivacyBudget.open(path),
        lambda: PrivacyBudget(2.0, 1e-5, ledger=path),
        lambda: budget.releases,
        lambda: budget.reserve(GaussianCharge(1.0, 50.0), fit_id="more"),
    ):
        with pytest.raises(LedgerError) as error:
            use()
        assert needle in _one_line(error)
    capsys.readouterr()
    assert main(["budget", "show", path]) != 0
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    "statement, needle",
    [
        # un-counting a release by its state text: the state is sealed
        ("UPDATE releases SET state = 'cancelled' WHERE id = 2", "release row 2 does not match"),
        ("UPDATE releases SET stage = 'reserved' WHERE id = 2", "release row 2 does not match"),
        # shrinking its cost, removing it, or the last row: the chain
        ("UPDATE releases SET sigma = 1e9 WHERE id = 2", "release row 2 breaks the hash chain"),
        ("DELETE FROM releases WHERE id = 2", "release row 3 breaks the hash chain"),
        ("DELETE FROM releases WHERE id = 3", "after release row 2"),
        ("UPDATE budget SET head = NULL", "head does not match"),
    ],
)
def test_a_row_edited_with_sqlite_is_detected_naming_the_row(ledger, statement, needle, capsys):
    budget = _three_rows(ledger)
    with sqlite3.connect(ledger) as db:
        db.execute(statement)
    _refused_everywhere(budget, ledger, needle, capsys)


def _flip(path: str, needle: bytes, at: int) -> None:
    """Flip one bit of byte ``at`` of every copy of ``needle`` in the file."""
    data = bytearray(open(path, "rb").read())
    start = data.find(needle)
    assert start >= 0, needle
    while start >= 0:
        data[start + at] ^= 0x01
        start = data.find(needle, start + 1)
    with open(path, "wb") as out:
        out.write(data)


@pytest.mark.parametrize(
    "needle, at, message",
    [
        (b"dispatched", 0, "release row 2, column stage"),  # ...the value check names it
        (struct.pack(">d", ODD_SIGMA), 7, "release row 2 breaks the hash chain"),  # a valid sigma
    ],
)
def test_a_raw_byte_flipped_in_the_file_is_detected_naming_the_row(
    ledger, needle, at, message, capsys
):
    budget = _three_rows(ledger)
    _flip(ledger, needle, at)
    _refused_everywhere(budget, ledger, message, capsys)


def test_every_settlement_keeps_the_chain_valid_and_each_reseals_its_row(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    seals = []

    def seal(row_id: int) -> str:
        with sqlite3.connect(ledger) as db:
            return db.execute("SELECT seal FROM releases WHERE id = ?", (row_id,)).fetchone()[0]

    one = budget.reserve(GaussianCharge(1.0, 50.0), fit_id="one")
    seals.append(seal(1))
    one.dispatch()
    seals.append(seal(1))
    one.commit()
    seals.append(seal(1))
    budget.reserve(GaussianCharge(1.0, 50.0), fit_id="two").cancel()
    budget.reserve(GaussianCharge(1.0, 50.0), fit_id="three")
    with sqlite3.connect(ledger) as db:  # a process that died without dispatching
        db.execute("UPDATE releases SET pid = 999999999 WHERE id = 3")
    with pytest.raises(LedgerError, match="release row 3 breaks the hash chain"):
        budget.resolve()  # (the pid is a fixed column: that edit is caught too)
    with sqlite3.connect(ledger) as db:
        db.execute(f"UPDATE releases SET pid = {os.getpid()} WHERE id = 3")
    assert len(set(seals)) == 3
    reopened = PrivacyBudget.open(ledger)
    assert [(r.state, r.stage) for r in reopened._ledger.rows()] == [
        ("committed", "dispatched"),
        ("cancelled", "reserved"),
        ("reserved", "reserved"),
    ]


def test_an_older_file_is_chained_by_its_first_write_and_then_verified(ledger):
    with sqlite3.connect(ledger) as db:
        for statement in filter(str.strip, ledger_file.SCHEMA.split(";")):
            db.execute(statement)
        db.execute("INSERT INTO budget VALUES (2.0, 1e-5, 0, 1)")
        db.execute(
            "INSERT INTO releases (state, reserved_at, fit_id, label, dataset, sensitivity, "
            "sigma, excess, pid) VALUES ('committed', 0, 'f', 'old', '', 1, 5, 0, 1)"
        )
    old = PrivacyBudget.open(ledger)
    assert old.releases == 1 and old.spent[0].ledger_id == ""  # read as it is
    old.spend(GaussianCharge(1.0, 50.0))
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT format FROM budget").fetchone() == (3,)
        db.execute("UPDATE releases SET state = 'cancelled' WHERE id = 1")
    with pytest.raises(LedgerError, match="release row 1 does not match its seal"):
        PrivacyBudget.open(ledger)


def test_a_structurally_damaged_file_fails_sqlites_quick_check_on_open(ledger):
    _three_rows(ledger)
    data = bytearray(open(ledger, "rb").read())
    page = int.from_bytes(data[16:18], "big")
    data[2 * page + 3 : 2 * page + 5] = b"\xff\xff"  # page 3's cell count: past its end
    with open(ledger, "wb") as out:
        out.write(data)
    with pytest.raises(LedgerError) as error:
        PrivacyBudget.open(ledger)
    assert "damaged" in _one_line(error) or "malformed" in str(error.value)


# -- 3. a missing ledger is refused unless the call creates it ------------------------------------


def test_a_missing_ledger_is_refused_unless_created_explicitly(tmp_path):
    path = tmp_path / "deleted.ledger"
    with pytest.raises(LedgerError) as error:
        PrivacyBudget(2.0, 1e-5, ledger=path)
    text = _one_line(error)
    assert "does not exist" in text and "create=True" in text and "budget create" in text
    assert not path.exists()  # never re-created full
    created = PrivacyBudget(2.0, 1e-5, ledger=path, create=True)
    created.spend(GaussianCharge(1.0, 50.0))
    assert PrivacyBudget(2.0, 1e-5, ledger=path, create=True).releases == 1  # opened
    assert PrivacyBudget(2.0, 1e-5, ledger=path).releases == 1
    with pytest.raises(ValueError, match="create: must be True or False"):
        PrivacyBudget(2.0, 1e-5, ledger=path, create="yes")


# -- 4. a full disk -------------------------------------------------------------------------------

FULL_DISK = """
    import os, subprocess, sys
    folder = sys.argv[1]
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder], check=True)
    from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, LedgerError, PrivacyBudget
    path = os.path.join(folder, "study.ledger")
    budget = PrivacyBudget(2.0, 1e-5, ledger=path, create=True)
    budget.spend(GaussianCharge(1.0, 50.0))
    handle = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(handle, b"x" * 512)
    except OSError:
        os.close(handle)
    try:
        for i in range(100):
            budget.reserve(GaussianCharge(1.0, 50.0), fit_id=f"fit{i}")
        print("reserve: no error")
    except LedgerError as error:
        print("reserve:", error)
    print("releases:", PrivacyBudget.open(path).releases)
    try:
        PrivacyBudget(2.0, 1e-5, ledger=os.path.join(folder, "new.ledger"), create=True)
        print("create: no error")
    except LedgerError as error:
        print("create:", error)
    print("files:", sorted(os.listdir(folder)))
"""


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="mounting a small tmpfs in a private mount namespace needs root",
)
def test_a_full_disk_is_reported_as_disk_full_and_leaves_no_unusable_ledger(tmp_path):
    folder = tmp_path / "small"
    folder.mkdir()
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", textwrap.dedent(FULL_DISK), str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert "disk full" in lines["reserve"] and "cannot rollback" not in lines["reserve"]
    assert lines["reserve"].startswith(f"ledger {folder}/study.ledger: disk full")
    assert lines["releases"] == "1"  # nothing recorded by the failed reservation
    assert lines["create"].startswith(f"ledger {folder}/new.ledger: disk full")
    assert lines["files"] == "['filler', 'study.ledger']"  # no new or temporary file left


def test_a_copy_cut_short_by_a_full_disk_leaves_no_file(tmp_path, monkeypatch):
    """Where hard links fail the new ledger is copied into place; a copy that fails (a
    full disk) is removed, never left as an unusable ledger."""

    def no_links(source, target):
        raise PermissionError("this file system has no hard links")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "link", no_links)
    monkeypatch.setattr(os, "fsync", full)
    path = tmp_path / "copied.ledger"
    with pytest.raises(LedgerError, match="disk full, the ledger was not created") as error:
        PrivacyBudget(2.0, 1e-5, ledger=path, create=True)
    _one_line(error)
    assert list(tmp_path.iterdir()) == []


def test_a_real_fit_whose_ledger_is_replaced_before_the_draw_fails_and_releases_nothing(
    ledger, monkeypatch
):
    """The same through DPPCA.fit (threads): the swap lands after the reservation, before
    the release task dispatches; the fit fails there, and nothing was drawn or recorded."""
    import dask.array as da
    import numpy as np

    import dask_dppca as dd
    from dask_dppca import graph as graphs  # fit imports kernel_sum_graph from it

    budget = PrivacyBudget(20.0, 1e-5, ledger=ledger, create=True)
    graph = graphs.kernel_sum_graph

    def swapped_then_graph(*args, **kwargs):
        _replace(ledger, reserve_other=True, epsilon=20.0)
        return graph(*args, **kwargs)

    monkeypatch.setattr(graphs, "kernel_sum_graph", swapped_then_graph)
    x = da.from_array(np.random.default_rng(0).standard_normal((40, 3)), chunks=20)  # test data
    model = dd.DPPCA(n_components=1, epsilon=1.0, delta=1e-6, scheduler="threads")
    with budget, pytest.raises(LedgerReplacedError) as error:
        model.fit(x)
    assert "nothing was released" in _one_line(error)
    assert not hasattr(model, "components_")
    (other,) = PrivacyBudget.open(ledger).spent
    assert other.fit_id == "other"
