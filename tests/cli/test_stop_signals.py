"""SIGTERM and SIGHUP stop ``dask-dppca fit --budget`` as SIGINT does; ``budget show
--json`` and ``budget resolve``.

The rule: a reservation is left spent only when the noise was drawn,
and a drawn release is never given back, whatever the moment of the signal; the
command exits with 128 + the signal's number and one line.  Whether the noise was
drawn comes from an oracle outside the code under test (tests/cli/stop_trials.py).
benchmarks/bench_signals.py runs 50 such trials and prints the counts.  The data are
test data (fixed seed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from dask_dppca.cli import EXIT_USAGE, main
from dask_dppca.privacy.budget import ledger_file
from dask_dppca.privacy.budget.charging import BUDGET_ENV
from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, LedgerError, PrivacyBudget
from tests.cli import CONSOLE_SCRIPT, write_store
from tests.cli.stop_trials import Zygote, ledger_rows, measure, run_trial

#: Trials of the test (the benchmark runs 50): each kind with each signal.
KINDS = ("reserved", "drawn", "random", "after", "after", "random")


def _env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != BUDGET_ENV}


@pytest.mark.slow
def test_sigterm_and_sighup_leave_a_reservation_spent_only_when_noise_was_drawn(tmp_path):
    store = write_store(tmp_path / "x.zarr")
    rng = random.Random(20)  # the moments of the signals (test only)
    outcomes = []
    with Zygote(env=_env()) as zygote:
        duration = measure(zygote, tmp_path / "measure", store, "threads")
        for i, (kind, signum) in enumerate(
            (kind, signum) for signum in (signal.SIGTERM, signal.SIGHUP) for kind in KINDS
        ):
            outcome = run_trial(
                zygote, tmp_path / f"t{i}", store, kind, signum, duration, "threads", rng
            )
            outcomes.append(outcome)
            assert not outcome.violations(), (outcome, outcome.violations())
    by_kind = {kind: [o for o in outcomes if o.kind == kind] for kind in KINDS}
    # The chosen moments did what they are for: a stop right after the reservation gives
    # it back, one during the draw keeps it spent (both with each signal).
    assert all(not o.drawn and o.rc == 128 + o.signum for o in by_kind["reserved"])
    assert {r["state"] for o in by_kind["reserved"] for r in o.rows} == {"cancelled"}
    assert all(o.drawn and o.rc == 128 + o.signum for o in by_kind["drawn"])
    assert all([r["state"] for r in o.rows] == ["reserved"] for o in by_kind["drawn"])
    # budget resolve cannot give back a release that drew: it stays spent.
    for outcome, i in zip(outcomes, range(len(outcomes))):
        if outcome.kind == "drawn":
            ledger = str(tmp_path / f"t{i}" / "l.ledger")
            (done,) = PrivacyBudget.open(ledger).resolve()
            assert done.outcome == "committed" and "may have drawn" in done.why
            assert [r["state"] for r in ledger_rows(ledger)] == ["committed"]


@pytest.mark.cluster
def test_the_console_script_on_the_embedded_cluster_gives_back_a_stopped_reservation(tmp_path):
    """The real command (console script, default embedded cluster): SIGTERM once the
    reservation is written, while the cluster computes: exit 143, one line, given back."""
    store = write_store(tmp_path / "x.zarr")
    ledger = str(tmp_path / "l.ledger")
    PrivacyBudget(50.0, 1e-5, ledger=ledger, create=True)
    process = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "fit", store, "--budget", ledger, "--no-progress"],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ledger_rows(ledger) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    (row,) = ledger_rows(ledger)
    assert process.returncode == 143, err
    assert err.strip().splitlines() == [err.strip()] and "stopped by SIGTERM" in err
    assert row["state"] == "cancelled" and row["stage"] == "reserved"
    assert f"release 1 in {ledger}) was cancelled" in err


_LEFT_BEHIND = """
import os, sys
from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, PrivacyBudget
budget = PrivacyBudget.open(sys.argv[1])
budget.reserve(GaussianCharge(1.0, 5.0), label="never dispatched")
budget.reserve(GaussianCharge(1.0, 5.0), label="dispatched").dispatch()
os._exit(0)  # dies without settling either
"""


@pytest.mark.slow
def test_budget_resolve_gives_back_only_what_provably_drew_nothing(tmp_path, capsys):
    ledger = str(tmp_path / "l.ledger")
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    subprocess.run([sys.executable, "-c", _LEFT_BEHIND, ledger], check=True, timeout=120)
    live = budget.reserve(GaussianCharge(1.0, 5.0), label="this process")  # still running
    with sqlite3.connect(ledger) as db:  # a row written before stages existed
        db.execute(
            "INSERT INTO releases (state, reserved_at, fit_id, label, dataset, sensitivity, "
            "sigma, excess, pid) VALUES ('reserved', 0, '', 'old', '', 1, 5, 0, 1)"
        )
        # ... by a version without the hash chain: the file's next write chains it.
        db.execute("UPDATE budget SET head = NULL")
        ledger_file.add_missing_columns(db)
    assert main(["budget", "resolve", ledger]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "release 1: cancelled: its release was never dispatched, so no noise was drawn"
    assert out[1].startswith("release 2: committed: its release was dispatched and may have drawn")
    assert out[2].startswith(f"release 3: left reserved: process {os.getpid()} ")
    assert out[3].startswith("release 4: committed: the row does not record")
    states = [r["state"] for r in ledger_rows(ledger)]
    assert states == ["cancelled", "committed", "reserved", "committed"]
    assert budget.releases == 3
    # A fit that comes back for the row resolve gave back cannot draw with it.
    with pytest.raises(LedgerError, match="must not draw"):
        budget._ledger.dispatch(1)
    live.dispatch()
    live.commit()
    assert main(["budget", "resolve", ledger, "2"]) == 0
    assert "release 2: committed: it is already committed" in capsys.readouterr().out
    assert main(["budget", "resolve", ledger, "9"]) == EXIT_USAGE
    assert "holds no release 9" in capsys.readouterr().err


def test_budget_show_json_holds_the_totals_and_every_row_as_the_file_does(tmp_path, capsys):
    ledger = str(tmp_path / "l.ledger")
    budget = PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    budget.spend(GaussianCharge(1.0, 5.0), label="spent")
    budget.reserve(GaussianCharge(1.0, 4.0), label="kept").dispatch()
    budget.reserve(GaussianCharge(1.0, 3.0), label="given back").cancel()
    assert main(["budget", "show", ledger, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["epsilon"], shown["delta"], shown["ledger"]) == (2.0, 1e-5, ledger)
    assert shown["counts"] == {"committed": 1, "reserved": 1, "cancelled": 1, "counted": 2}
    assert shown["spent"]["epsilon"] == budget.spent_epsilon
    assert shown["spent"]["mu"] == budget.spent_mu
    assert shown["remaining"]["1"] == budget.remaining() and shown["remaining"]["4"] == (
        budget.remaining(4)
    )
    for row, stored in zip(shown["releases"], ledger_rows(ledger), strict=True):
        assert row["ledger_id"] == budget._ledger.ledger_id != ""
        for column, value in stored.items():  # every column, as sqlite3 reads it
            if column in ("chain", "seal"):  # the hash chain: not part of the report
                continue
            assert row[column] == (
                value if value is not None or column not in ("host", "note") else ""
            ), column
        assert row["mu"] == stored["sensitivity"] / stored["sigma"]
        assert row["counted"] == (stored["state"] != "cancelled")
    assert [r["stage"] for r in shown["releases"]] == [None, "dispatched", "reserved"]


#: A console process that signals itself at one moment (``when``): while the command's
#: modules are still being set up (the parser being built); inside a garbage collector
#: callback during set-up (where Python drops exceptions); after the command's block
#: ended (the logging switched back on); in Python's last teardown of its modules.
_SELF_SIGNAL = """
import gc, logging, os, signal, sys
import dask_dppca.cli.command as cli

when, signum = sys.argv[1], int(sys.argv[2])
if when in ("setup", "gc-callback", "teardown"):
    sys.argv = ["dask-dppca", "--version"]
else:
    sys.argv = ["dask-dppca", "budget", "show", sys.argv[3]]
def kill_self(*args, **kwargs):
    os.kill(os.getpid(), signum)
real = cli.build_parser
if when == "setup":
    cli.build_parser = lambda: (kill_self(), real())[1]
elif when == "gc-callback":
    def callback(phase, info):
        if phase == "start" and not gc.callbacks[-1].__dict__.get("done"):
            callback.done = True
            kill_self()
            sum(range(1000))  # the handler runs here, inside the callback
    def collect_then_build():
        gc.callbacks.append(callback)
        gc.collect()
        return real()
    cli.build_parser = collect_then_build
elif when == "import-error":
    import dask_dppca.cli.budget as budget_command
    def show_interrupted(args):
        try:
            kill_self()
            sum(range(1000))  # the handler raises here
        except KeyboardInterrupt:  # what an extension module's init makes of it
            raise ImportError("initialization failed") from None
    budget_command.run_show = show_interrupted
elif when == "before-budget":
    import dask_dppca.cli.analyze as analyze_command
    def run_stopped(args):
        kill_self()
        sum(range(1000))  # the handler raises here, before the budget is opened
    analyze_command.run = run_stopped
    sys.argv = ["dask-dppca", "analyze", "x.zarr", "--budget", sys.argv[3]]
elif when == "teardown":
    class Late:  # torn down with the modules, after the atexit functions
        def __del__(self, kill=os.kill, pid=os.getpid(), sleep=__import__("time").sleep):
            kill(pid, signum)
            sleep(0.2)
    sys.modules["zz_torn_down_last"] = Late()
else:
    real_disable = logging.disable
    def disable(level):
        real_disable(level)
        if level != logging.ERROR:  # main()'s finally: the command has ended
            kill_self()
    logging.disable = disable
import dask_dppca.cli
dask_dppca.cli.console()
"""


def _console_signalled(when: str, signum: int, *more: str) -> subprocess.CompletedProcess:
    """Run the console that signals itself (:data:`_SELF_SIGNAL`) at ``when``."""
    argv = [sys.executable, "-c", _SELF_SIGNAL, when, str(int(signum)), *more]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_env())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("when", ["setup", "gc-callback"])
def test_a_signal_before_the_command_began_stops_it_in_one_line(signum, when, tmp_path):
    """Handlers are in from the console's first line: a stop during set-up (imports,
    the parser) is one line and 128 + signum, not a traceback or a killed process; one
    raised inside a garbage collector callback, where Python would print it and drop it,
    is raised again after the callback."""
    done = _console_signalled(when, signum)
    assert done.returncode == 128 + signum, (done.returncode, done.stderr)
    assert done.stderr.splitlines() == [
        f"dask-dppca: stopped by {signal.Signals(signum).name}; the command had not begun"
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_command_ended_adds_no_line(signum, tmp_path):
    """A stop after the command's block (its output written) ends the process at once:
    its output whole, no second line, no traceback from the shutdown."""
    ledger = str(tmp_path / "l.ledger")
    PrivacyBudget(5.0, 1e-5, ledger=ledger, create=True)
    done = _console_signalled("ended", signum, ledger)
    assert done.returncode == 128 + signum, (done.returncode, done.stderr)
    assert done.stderr == ""
    assert "epsilon" in done.stdout  # budget show's output, flushed before the exit


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_in_the_interpreter_s_last_teardown_keeps_the_command_s_exit(signum):
    """Python puts the default actions back while it tears its modules down: a stop
    there would kill a command that had finished (exit -signum, no line)."""
    done = _console_signalled("teardown", signum)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("dask-dppca ")  # --version's line


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_that_comes_out_of_an_import_as_another_error_is_a_stop(signum, tmp_path):
    """A stop raised inside a C extension's import leaves it as ``ImportError:
    initialization failed``; the command stopped: one stop line and 128 + signum, not
    "unexpected error" and 1."""
    ledger = str(tmp_path / "l.ledger")
    PrivacyBudget(5.0, 1e-5, ledger=ledger, create=True)
    done = _console_signalled("import-error", signum, ledger)
    assert done.returncode == 128 + signum, (done.returncode, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dask-dppca: stopped by {signal.Signals(signum).name}")


@pytest.mark.timeout(120)
def test_a_stop_before_the_named_budget_is_opened_says_nothing_was_reserved(tmp_path):
    ledger = str(tmp_path / "l.ledger")
    done = _console_signalled("before-budget", signal.SIGTERM, ledger)
    assert done.returncode == 143, done.stderr
    assert done.stderr.splitlines() == [
        f"dask-dppca: stopped by SIGTERM; nothing was reserved in the budget {ledger} "
        "(not yet opened)"
    ]
