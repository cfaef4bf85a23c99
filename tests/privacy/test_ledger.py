"""The durable ledger: reserve before the draw, commit after, across threads and processes.

Real processes (``subprocess`` and scikit-learn's loky workers), real SIGKILLs and a real
SQLite file; no mocks.  Seeds here generate TEST DATA only.
"""

from __future__ import annotations

import base64
import os
import pickle
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dask.array as da
import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import Pipeline

import dask_dppca as dd
from dask_dppca.privacy.budget import ledger_file
from dask_dppca.privacy.budget.charging import BUDGET_ENV, active_budgets, set_default_budget
from dask_dppca.privacy.budget.privacy_budget import (
    BudgetExceededError,
    GaussianCharge,
    LedgerError,
    PrivacyBudget,
)
from dask_dppca.privacy.mechanisms.calibration import calibrate_sigma

#: The race of docs/privacy.md ("Concurrency, measured"): releases calibrated to
#: epsilon = 0.5 (at DPPCA's default delta)
#: against a (2, 1e-5) budget.
RACE_SIGMA = calibrate_sigma(1.0, 0.5, 1e-6)
SUBPROCESS_TIMEOUT = 120


def _python(code: str, *args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    """A fresh Python process running ``code`` (stdout piped, text)."""
    full_env = {name: value for name, value in os.environ.items() if name != BUDGET_ENV}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=SUBPROCESS_TIMEOUT)
    assert process.returncode == 0, err
    return out


def _x(n: int = 40, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))  # test data only


@pytest.fixture
def ledger(tmp_path):
    return str(tmp_path / "study.ledger")


@pytest.fixture
def default_ledger(ledger):
    """A (2, 1e-5) ledger made the process default; removed again afterwards."""
    budget = set_default_budget(PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True))
    try:
        yield budget
    finally:
        set_default_budget(None)


def _drain(budget: PrivacyBudget) -> int:
    """How many (sensitivity 1, RACE_SIGMA) releases fit in what the budget has left, one
    after the other; a fresh (2, 1e-5) budget gives what one process gets alone."""
    count = 0
    while True:
        try:
            budget.spend(GaussianCharge(1.0, RACE_SIGMA))
        except BudgetExceededError:
            return count
        count += 1


# -- the file: totals, reopening, restart -------------------------------------------------------


def test_opening_with_other_totals_is_refused(ledger):
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True).spend(GaussianCharge(1.0, 5.0))
    same = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    assert same.releases == 1
    with pytest.raises(ValueError, match=r"holds a budget of \(epsilon=2.0, delta=1e-05\)"):
        PrivacyBudget(3.0, 1e-5, ledger=ledger, create=True)
    with pytest.raises(ValueError, match="delta=1e-05"):
        PrivacyBudget(2.0, 1e-6, ledger=ledger, create=True)
    opened = PrivacyBudget.open("file://" + ledger)
    assert (opened.epsilon, opened.delta, opened.ledger) == (2.0, 1e-5, ledger)


def test_missing_and_foreign_files_are_refused(tmp_path):
    with pytest.raises(LedgerError, match="cannot open"):
        PrivacyBudget.open(tmp_path / "missing.ledger")
    assert not (tmp_path / "missing.ledger").exists()  # opening never creates
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a database " * 100)
    with pytest.raises(LedgerError, match="not a dask-dppca ledger"):
        PrivacyBudget.open(foreign)
    with pytest.raises(ValueError, match="ledger: only local files"):
        PrivacyBudget(1.0, 1e-6, ledger="s3://bucket/study.ledger", create=True)
    other = tmp_path / "app.sqlite"  # someone else's database is left untouched
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(LedgerError, match="other tables"):
        PrivacyBudget(1.0, 1e-6, ledger=other, create=True)
    with sqlite3.connect(other) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]


def test_an_empty_ledger_file_is_refused_never_taken_for_a_fresh_budget(tmp_path):
    empty = tmp_path / "study.ledger"
    empty.touch()  # a truncated file, or one `touch`ed on purpose
    for attempt in (
        lambda: PrivacyBudget(2.0, 1e-5, ledger=empty, create=True),
        lambda: PrivacyBudget.open(empty),
        lambda: set_default_budget(str(empty)),
    ):
        with pytest.raises(LedgerError, match=r"the file is empty \(0 bytes\)"):
            attempt()
    assert empty.stat().st_size == 0  # left as it was
    assert BUDGET_ENV not in os.environ


@pytest.mark.slow
def test_two_processes_creating_one_ledger_both_get_it_and_neither_sees_it_half_made(tmp_path):
    """A new ledger appears complete (written aside, then linked): racing creators agree."""
    path = tmp_path / "new.ledger"
    code = """
        import sys
        from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget
        print(PrivacyBudget(2.0, 1e-5, ledger=sys.argv[1], create=True).releases)
        """
    racers = [_python(code, str(path)) for _ in range(3)]
    assert [_finish(racer).strip() for racer in racers] == ["0", "0", "0"]
    assert [p.name for p in tmp_path.iterdir()] == ["new.ledger"]  # no temporary left


def test_without_hard_links_a_new_ledger_is_copied_into_place_never_over_one(tmp_path, monkeypatch):
    def no_links(source, target):
        raise PermissionError("this file system has no hard links")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "copied.ledger"
    first = PrivacyBudget(2.0, 1e-5, ledger=path, create=True)
    first.spend(GaussianCharge(1.0, 5.0))
    assert PrivacyBudget(2.0, 1e-5, ledger=path, create=True).releases == 1  # opened, not replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copied.ledger"]


def _corrupt(ledger: str, statement: str, rebuild: bool = False) -> None:
    """Edit the file behind the budget's back (``rebuild``: without the NOT NULLs first,
    as a hand-made or damaged file may be: SQLite stores a NaN as NULL)."""
    with sqlite3.connect(ledger) as db:
        if rebuild:
            columns = [info[1] for info in db.execute("PRAGMA table_info(releases)")]
            db.execute("ALTER TABLE releases RENAME TO old")
            db.execute(f"CREATE TABLE releases ({', '.join(columns)})")
            db.execute("INSERT INTO releases SELECT * FROM old")
            db.execute("DROP TABLE old")
        db.execute(statement)


@pytest.mark.parametrize(
    "statement, rebuild, needle",
    [
        ("UPDATE releases SET sigma = 'abc'", False, "column sigma: holds 'abc'"),
        ("UPDATE releases SET sigma = 0", False, "column sigma: holds 0.0"),
        ("UPDATE releases SET sigma = -2.5", False, "column sigma: holds -2.5"),
        ("UPDATE releases SET sigma = NULL", True, "column sigma: holds None"),  # a NaN
        ("UPDATE releases SET sensitivity = 'one'", False, "column sensitivity"),
        ("UPDATE releases SET sensitivity = 9e999", False, "column sensitivity: holds inf"),
        ("UPDATE releases SET excess = -1", False, "column excess"),
        ("UPDATE releases SET epsilon = 'big'", False, "column epsilon: holds 'big'"),
        ("UPDATE releases SET reserved_at = 'yesterday'", False, "column reserved_at"),
        ("UPDATE releases SET label = x'ff'", False, "column label: holds b'\\xff'"),
        ("UPDATE releases SET state = 'spent'", True, "column state: holds 'spent'"),
    ],
)
def test_corrupt_values_raise_ledger_error_naming_the_row_and_column(
    ledger, statement, rebuild, needle
):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    budget.spend(GaussianCharge(1.0, 5.0))
    _corrupt(ledger, statement, rebuild)
    for use in (
        lambda: budget.releases,
        lambda: budget.remaining(),
        lambda: budget.describe(),
        lambda: budget.as_dict(),
        lambda: budget.reserve(GaussianCharge(1.0, 5.0)),
        lambda: PrivacyBudget.open(ledger).spent_epsilon,
    ):
        with pytest.raises(LedgerError, match=rf"release row 1, {re.escape(needle)}"):
            use()
    with sqlite3.connect(ledger) as db:  # the refused reservation wrote nothing
        assert db.execute("SELECT COUNT(*) FROM releases").fetchone() == (1,)


@pytest.mark.parametrize(
    "statement", ["UPDATE budget SET epsilon = 'two'", "UPDATE budget SET delta = 0"]
)
def test_corrupt_totals_raise_ledger_error(ledger, statement):
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    _corrupt(ledger, statement)
    with pytest.raises(LedgerError, match="invalid totals in table budget"):
        PrivacyBudget.open(ledger)


def test_an_older_ledger_gains_the_new_columns_and_keeps_its_rows(ledger):
    """A file of the first layout (no stage, host, note columns) is read as it is and
    migrated by the first write; its rows keep counting, and resolve never cancels them."""
    with sqlite3.connect(ledger) as db:
        for statement in filter(str.strip, ledger_file.SCHEMA.split(";")):
            db.execute(statement)
        db.execute("INSERT INTO budget VALUES (2.0, 1e-5, 0, 1)")
        db.execute(
            "INSERT INTO releases (state, reserved_at, fit_id, label, dataset, sensitivity, "
            "sigma, excess, pid) VALUES ('reserved', 0, 'f', 'old', '', 1, 5, 0, 999999999)"
        )
    budget = PrivacyBudget.open(ledger)
    assert budget.releases == 1 and budget.spent[0].stage is None
    budget.spend(GaussianCharge(1.0, 5.0))
    with sqlite3.connect(ledger) as db:
        columns = {info[1] for info in db.execute("PRAGMA table_info(releases)")}
    assert {"stage", "dispatched_at", "host", "note"} <= columns
    (done,) = budget.resolve()
    assert done.outcome == "committed" and budget.releases == 2


def test_a_ledger_replaced_under_a_budget_is_refused(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    os.remove(ledger)
    with pytest.raises(LedgerError, match="was deleted"):
        budget.spend(GaussianCharge(1.0, 5.0))  # never silently recreated empty
    PrivacyBudget(4.0, 1e-5, ledger=ledger, create=True)
    with pytest.raises(LedgerError, match="totals changed"):
        budget.check(GaussianCharge(1.0, 5.0))


@pytest.mark.slow
def test_a_new_process_sees_the_same_spent_and_remaining_and_the_env_default_charges_it(ledger):
    """Restart: spend here, read in a fresh process; a fit there under DASK_DPPCA_BUDGET is
    charged to the same file and seen here."""
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    budget.spend(GaussianCharge(1.0, RACE_SIGMA), label="first")
    budget.reserve(GaussianCharge(1.0, RACE_SIGMA), label="crashed")  # never committed: counts
    here = (
        budget.releases,
        repr(budget.spent_epsilon),
        repr(budget.remaining()),
        repr(budget.remaining(3)),
    )
    process = _python(
        """
        import numpy as np
        import dask_dppca as dd
        from dask_dppca.privacy.budget.charging import default_budget
        budget = default_budget()
        print(budget.releases, repr(budget.spent_epsilon), repr(budget.remaining()),
              repr(budget.remaining(3)))
        x = np.random.default_rng(0).standard_normal((40, 3))  # test data only
        dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(x)
        """,
        env={BUDGET_ENV: ledger},
    )
    there = tuple(_finish(process).split())
    assert there == (str(here[0]), *here[1:])
    rows = budget.spent
    assert [r.state for r in rows] == ["committed", "reserved", "committed"]
    assert rows[-1].pid == process.pid and rows[-1].label.startswith("DPPCA fit ")
    assert rows[-1].dataset == "ndarray 40 x 3" and rows[-1].epsilon == 0.5


# -- reserve, commit, cancel -------------------------------------------------------------------


@pytest.mark.parametrize("storage", ["memory", "ledger"])
def test_a_reservation_counts_until_cancelled(storage, ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger if storage == "ledger" else None, create=True)
    reservation = budget.reserve(
        GaussianCharge(1.0, RACE_SIGMA, epsilon=0.5, delta=1e-6), fit_id="abc", dataset="x.zarr"
    )
    assert budget.releases == 1 and budget.spent_epsilon > 0
    assert budget.spent[0].state == "reserved" and budget.spent[0].fit_id == "abc"
    reservation.cancel()
    assert budget.releases == 0 and budget.spent_epsilon == 0.0
    with pytest.raises(LedgerError, match="is cancelled, not reserved"):
        reservation.commit()
    kept = budget.reserve(GaussianCharge(1.0, RACE_SIGMA))
    kept.commit()
    with pytest.raises(LedgerError, match="is committed, not reserved"):
        kept.cancel()
    assert [r.state for r in budget._ledger.rows()] == ["cancelled", "committed"]


@pytest.mark.slow
def test_sigkill_between_reservation_and_commit_still_counts(ledger):
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    process = _python(
        """
        import sys, time
        from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, PrivacyBudget
        charge = GaussianCharge(1.0, float(sys.argv[2]))
        PrivacyBudget.open(sys.argv[1]).reserve(charge, label="killed")
        print("reserved", flush=True)
        time.sleep(120)
        """,
        ledger,
        repr(RACE_SIGMA),
    )
    assert process.stdout.readline().strip() == "reserved"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=SUBPROCESS_TIMEOUT)
    assert process.returncode == -signal.SIGKILL
    budget = PrivacyBudget.open(ledger)
    (row,) = budget.spent
    assert row.state == "reserved" and row.label == "killed" and row.pid == process.pid
    assert budget.releases == 1
    assert _drain(PrivacyBudget(2.0, 1e-5)) - 1 == _drain(budget)  # one fewer release fits


@pytest.mark.slow
def test_a_fit_killed_while_it_computes_stays_charged(ledger):
    """End to end: a DPPCA fit under DASK_DPPCA_BUDGET is SIGKILLed while its graph runs
    (after the reservation, before the noise): the ledger keeps the reservation."""
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    process = _python(
        """
        import time
        import dask.array as da
        import numpy as np
        import dask_dppca as dd
        x = da.from_array(np.random.default_rng(0).standard_normal((40, 3)), chunks=(20, 3))
        slow = x.map_blocks(lambda block: time.sleep(120) or block, meta=np.empty((0, 0)))
        dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(slow)
        """,
        env={BUDGET_ENV: ledger},
    )
    budget = PrivacyBudget.open(ledger)
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    try:
        while not budget.spent and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=SUBPROCESS_TIMEOUT)
    assert process.returncode == -signal.SIGKILL, process.stderr.read()
    (row,) = budget.spent
    assert row.state == "reserved" and row.pid == process.pid and row.epsilon == 0.5


def test_a_local_fit_that_fails_before_its_release_gives_the_reservation_back(default_ledger):
    def broken(block):
        raise OSError("disk gone")

    x = da.from_array(_x(), chunks=(20, 3)).map_blocks(broken, meta=np.empty((0, 0)))
    with pytest.raises(OSError, match="disk gone"):
        dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(x)
    assert [r.state for r in default_ledger._ledger.rows()] == ["cancelled"]
    assert default_ledger.releases == 0


def test_a_fit_that_fails_after_its_release_began_stays_charged(default_ledger, monkeypatch):
    from dask_dppca.privacy.mechanisms import mechanism

    def draw_and_die(*args, **kwargs):
        raise RuntimeError("died mid-draw")

    monkeypatch.setattr(mechanism, "add_symmetric_noise", draw_and_die)
    with pytest.raises(RuntimeError, match="mid-draw"):
        dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(_x())
    (row,) = default_ledger.spent
    assert row.state == "reserved"


# -- concurrency: processes and threads --------------------------------------------------------

_RACER = """
import os, sys, time
from dask_dppca.privacy.budget.privacy_budget import (
    BudgetExceededError, GaussianCharge, PrivacyBudget, Release)
path, go, mode, sigma = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
budget = PrivacyBudget.open(path)
open(f"{go}.ready.{os.getpid()}", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(go):
    assert time.monotonic() < deadline, "no start signal"
    time.sleep(0.001)
won = 0
while True:
    try:
        if mode == "reserve":
            reservation = budget.reserve(GaussianCharge(1.0, sigma), label=str(os.getpid()))
            time.sleep(0.01)  # the draw: the lock is free, the others get their turn
            reservation.commit()
        else:  # a naive ledger: check, then record without holding the lock
            budget.check(GaussianCharge(1.0, sigma))
            time.sleep(0.2)
            budget._ledger.record(Release(1.0, sigma), lambda rows: None)
    except BudgetExceededError:
        break
    won += 1
print(won)
"""


def _race(ledger: str, tmp_path, mode: str, n_processes: int = 4) -> list[int]:
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    go = tmp_path / f"go-{mode}"
    racers = [_python(_RACER, ledger, str(go), mode, repr(RACE_SIGMA)) for _ in range(n_processes)]
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    while len(list(tmp_path.glob(f"{go.name}.ready.*"))) < n_processes:  # all imported
        assert time.monotonic() < deadline and all(r.poll() is None for r in racers), (
            "racers not ready"
        )
        time.sleep(0.01)
    go.touch()
    return [int(_finish(racer)) for racer in racers]


@pytest.mark.slow
def test_four_processes_racing_never_get_more_than_one_alone(ledger, tmp_path):
    alone = _drain(PrivacyBudget(2.0, 1e-5))
    assert alone == 16
    won = _race(ledger, tmp_path, "reserve")
    budget = PrivacyBudget.open(ledger)
    assert sum(won) == budget.releases == alone, won
    assert len({row.pid for row in budget.spent}) >= 2, won  # they really raced
    assert budget.spent_epsilon <= 2.0


@pytest.mark.slow
def test_the_race_test_catches_a_ledger_that_checks_outside_its_lock(tmp_path):
    """The same race against check-then-record: the processes overspend together."""
    won = _race(str(tmp_path / "naive.ledger"), tmp_path, "naive")
    assert sum(won) > _drain(PrivacyBudget(2.0, 1e-5)), won


def test_threads_are_charged_by_the_default_and_by_an_open_block(default_ledger):
    with ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda seed: dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(_x(seed=seed)),
                range(4),
            )
        )
    assert default_ledger.releases == 4
    block = PrivacyBudget(5.0, 1e-5)
    with block:
        with ThreadPoolExecutor(2) as pool:
            list(
                pool.map(
                    lambda seed: dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(_x(seed=seed)),
                    range(2),
                )
            )
    assert block.releases == 2 and default_ledger.releases == 6


def test_threads_racing_on_a_ledger_never_overspend(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    won = []

    def spend_until_refused():
        mine = PrivacyBudget.open(ledger)  # its own object, the same file
        while True:
            try:
                mine.reserve(GaussianCharge(1.0, RACE_SIGMA)).commit()
            except BudgetExceededError:
                return
            won.append(1)

    threads = [threading.Thread(target=spend_until_refused) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SUBPROCESS_TIMEOUT)
    assert len(won) == budget.releases == _drain(PrivacyBudget(2.0, 1e-5))


# -- no escapes: default, nesting, pickles, workers ---------------------------------------------


def test_nested_budgets_charge_every_enclosing_one(default_ledger):
    outer, inner = PrivacyBudget(5.0, 1e-5), PrivacyBudget(1.0, 1e-6)
    with outer:
        with inner:
            assert active_budgets() == (default_ledger, outer, inner)
            dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(_x())
            with pytest.raises(BudgetExceededError, match=r"epsilon=1, delta=1e-06"):
                dd.DPPCA(epsilon=0.9, scheduler="synchronous").fit(_x())
    assert (default_ledger.releases, outer.releases, inner.releases) == (1, 1, 1)
    # The refused fit had reserved in the default and the outer budget first: given back.
    assert [r.state for r in outer._ledger.rows()] == ["committed", "cancelled"]
    assert active_budgets() == (default_ledger,)


def test_the_same_ledger_is_charged_once(default_ledger, ledger):
    with PrivacyBudget.open(ledger):
        dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(_x())
    assert default_ledger.releases == 1


def test_a_default_budget_needs_a_ledger_and_a_missing_one_refuses_fits(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="must have a ledger file"):
        set_default_budget(PrivacyBudget(1.0, 1e-6))
    monkeypatch.setenv(BUDGET_ENV, str(tmp_path / "gone.ledger"))
    with pytest.raises(LedgerError, match=f"{BUDGET_ENV}="):
        dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(_x())


def test_set_default_budget_exports_the_ledger_to_child_processes(default_ledger, ledger):
    assert os.environ[BUDGET_ENV] == ledger
    assert set_default_budget(ledger).ledger == ledger  # a path works too
    set_default_budget(None)
    assert BUDGET_ENV not in os.environ and active_budgets() == ()
    set_default_budget(default_ledger)


def test_a_ledger_budget_pickles_to_the_same_file(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    twin = pickle.loads(pickle.dumps(budget))
    twin.spend(GaussianCharge(1.0, RACE_SIGMA))
    assert budget.releases == 1 and twin.ledger == ledger


@pytest.mark.slow
def test_an_in_memory_budget_pickles_to_itself_here_and_refuses_use_elsewhere():
    budget = PrivacyBudget(2.0, 1e-5)
    assert pickle.loads(pickle.dumps(budget)) is budget
    payload = base64.b64encode(pickle.dumps(budget)).decode()
    out = _finish(
        _python(
            """
        import base64, pickle, sys
        from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, LedgerError
        budget = pickle.loads(base64.b64decode(sys.argv[1]))
        try:
            budget.spend(GaussianCharge(1.0, 10.0))
        except LedgerError as error:
            print("refused:", error)
        """,
            payload,
        )
    )
    assert out.startswith("refused:") and "has no ledger file" in out and "ledger=PATH" in out


def test_a_forked_child_cannot_charge_its_copy_of_an_in_memory_budget():
    budget = PrivacyBudget(2.0, 1e-5)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened and leave at once
        try:
            budget.spend(GaussianCharge(1.0, 10.0))
            os.write(write, b"charged its own copy")
        except LedgerError:
            os.write(write, b"refused")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 100) == b"refused"
    assert budget.releases == 0


@pytest.fixture
def loky_workers():
    """scikit-learn's loky workers, shut down afterwards: a worker keeps the environment
    (so the DASK_DPPCA_BUDGET) it was started with, and must not charge this test's
    ledger during a later test."""
    yield
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True, kill_workers=True)


def _pipeline():
    return Pipeline(
        [
            ("pca", dd.DPPCA(n_components=2, epsilon=0.5, scheduler="synchronous")),
            ("ols", LinearRegression()),
        ]
    )


def _regression_data():
    x = _x(n=100, d=4, seed=3)
    return x, x @ np.array([1.0, -2.0, 0.5, 0.0])


@pytest.mark.slow
def test_cross_val_score_in_worker_processes_charges_every_fold(loky_workers, default_ledger):
    x, y = _regression_data()
    scores = cross_val_score(_pipeline(), x, y, cv=5, n_jobs=2)
    assert np.all(np.isfinite(scores))
    rows = default_ledger.spent
    assert len(rows) == 5 and {r.state for r in rows} == {"committed"}
    assert os.getpid() not in {r.pid for r in rows}  # charged from the loky workers


@pytest.mark.slow
def test_workers_started_before_the_default_are_charged_through_the_pickled_estimator(
    loky_workers, ledger
):
    """loky reuses its workers: ones started without DASK_DPPCA_BUDGET still charge the
    default, because the estimator sent to them carries it."""
    x, y = _regression_data()
    cross_val_score(_pipeline(), x, y, cv=2, n_jobs=2)  # starts (or reuses) the workers
    budget = set_default_budget(PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True))
    try:
        cross_val_score(_pipeline(), x, y, cv=3, n_jobs=2)
    finally:
        set_default_budget(None)
    assert budget.releases == 3
    with budget:  # an open block travels the same way
        cross_val_score(_pipeline(), x, y, cv=2, n_jobs=2)
    assert budget.releases == 5


@pytest.mark.slow
def test_cross_val_score_under_an_in_memory_block_is_refused_in_the_workers(loky_workers):
    x, y = _regression_data()
    with PrivacyBudget(2.0, 1e-5) as budget:
        with pytest.raises(LedgerError, match="has no ledger file"):
            cross_val_score(_pipeline(), x, y, cv=3, n_jobs=2, error_score="raise")
    assert budget.releases == 0


def test_clones_and_copies_carry_the_budgets_they_were_made_under(ledger):
    import copy

    from sklearn.base import clone

    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    est = dd.DPPCA(epsilon=0.5, scheduler="synchronous")
    with budget:
        copied = copy.deepcopy(est)
    assert est.carried_budgets == ()  # the original is unchanged
    cloned = clone(copied)
    assert [b.ledger for b in cloned.carried_budgets] == [ledger]
    cloned.fit(_x())  # outside the block: charged through the copy
    assert budget.releases == 1
    assert "_carried_budgets" not in pickle.loads(pickle.dumps(est)).__dict__


# -- remaining(): exact from the composition -----------------------------------------------------


@pytest.mark.parametrize("storage", ["memory", "ledger"])
@pytest.mark.parametrize("k", [1, 3])
def test_k_releases_at_remaining_k_fit_and_slightly_more_do_not(storage, k, ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger if storage == "ledger" else None, create=True)
    budget.spend(GaussianCharge(0.4, 1.0))
    epsilon = budget.remaining(k)
    assert 0.0 < epsilon < 2.0
    sigma = calibrate_sigma(1.0, epsilon, budget.delta)
    more = calibrate_sigma(1.0, epsilon * (1 + 1e-9), budget.delta)
    for _ in range(k - 1):
        budget.spend(GaussianCharge(1.0, sigma))
    budget.check(GaussianCharge(1.0, sigma))
    with pytest.raises(BudgetExceededError):
        budget.check(GaussianCharge(1.0, more))
    budget.spend(GaussianCharge(1.0, sigma))
    assert budget.remaining() < 1e-6


def test_remaining_on_an_empty_budget_is_its_epsilon_and_a_fit_there_fits(default_ledger):
    assert default_ledger.remaining() == pytest.approx(2.0, rel=1e-12)
    assert default_ledger.remaining() <= 2.0
    dd.DPPCA(epsilon=1.0, scheduler="synchronous").fit(
        _x()
    )  # the example of docs/privacy.md ("Planning: remaining()"): delta 1e-6
    left = default_ledger.remaining()
    assert 1.0 < left < 2.0
    dd.DPPCA(epsilon=left, delta=1e-5, scheduler="synchronous").fit(_x())  # plan with it
    assert default_ledger.remaining() < 1e-6
    with pytest.raises(BudgetExceededError):
        dd.DPPCA(epsilon=0.01, delta=1e-5, scheduler="synchronous").fit(_x())


def test_remaining_is_zero_when_nothing_fits_and_k_is_validated():
    budget = PrivacyBudget(1.0, 1e-6)
    budget.spend(GaussianCharge(1.0, calibrate_sigma(1.0, 1.0, 1e-6)))
    assert budget.remaining() < 1e-6
    budget.spend(GaussianCharge(1.0, 1e9))
    assert budget.remaining() == 0.0 and budget.remaining(5) == 0.0
    with pytest.raises(ValueError, match="k: must be a positive integer"):
        budget.remaining(0)
    fresh = PrivacyBudget(1.0, 1e-6)
    assert fresh.remaining(1) > fresh.remaining(2) > fresh.remaining(4) > 0.0


# -- reporting ---------------------------------------------------------------------------------


def test_describe_and_html_show_spent_remaining_and_every_release(ledger):
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    budget.reserve(
        GaussianCharge(1.0, RACE_SIGMA, epsilon=0.5, delta=1e-6),
        label="<b>x</b>",
        dataset="s3://bucket/x.zarr",
    ).commit()
    budget.reserve(GaussianCharge(1.0, RACE_SIGMA)).cancel()
    text = budget.describe()
    assert f"remaining: one more release of epsilon <= {budget.remaining():.6g}" in text
    assert "1 counted (1 committed, 0 reserved), 1 cancelled" in text
    assert f"epsilon={budget.spent_epsilon:.6g}" in text and ledger in text
    assert "s3://bucket/x.zarr" in text and "cancelled" in text.splitlines()[-1]
    page = budget._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert page.count("<td>committed</td>") == page.count("<td>cancelled</td>") == 1
    assert f"epsilon &lt;= {budget.remaining():.6g}" in page


def test_the_ledger_is_plain_sqlite_readable_by_any_tool(ledger):
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True).spend(
        GaussianCharge(1.0, RACE_SIGMA), label="by hand"
    )
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT epsilon, delta FROM budget").fetchall() == [(2.0, 1e-5)]
        assert db.execute("SELECT state, label, sigma FROM releases").fetchall() == [
            ("committed", "by hand", RACE_SIGMA)
        ]
