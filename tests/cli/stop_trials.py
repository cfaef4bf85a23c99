"""SIGTERM / SIGHUP at chosen moments of ``dask-dppca fit --budget``: what the ledger keeps.

A trial runs the command line's ``main(["fit", STORE, "--budget", LEDGER, ...])`` in a
fresh process, sends it a signal at a moment chosen by the trial's *kind*, and reads
back: the exit status, stderr, the ledger rows of that process, and whether the noise
was drawn.  The last comes from an oracle outside the code under test: the process's
noise function (``privacy.mechanisms.mechanism.add_symmetric_noise``) appends its process id to a
file before it draws (so "drawn" here means "the draw began"; the ledger may keep a
release spent that was about to draw, never give back one that began).

Kinds: ``random`` (a uniform moment of the fit's measured duration), ``after`` (a
uniform moment of what the measured fit took after its reservation), ``reserved`` (as
soon as the ledger holds the fit's reservation: before the draw, usually), ``drawn``
(as soon as the draw began; the noise function then pauses 2 s so that the signal
lands between the draw and the commit).

The processes are forked from a *zygote* that imported the library once (it runs no
thread, so forking is safe): a trial costs the fit, not 4 s of imports.  Each forked
process runs ``main`` exactly as the console script does (its signal handlers,
exit code and one-line stderr) and leaves with ``os._exit(rc)``.

Used by tests/cli/test_stop_signals.py (a few trials) and benchmarks/bench_signals.py
(50, with counts).
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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Environment variables the zygote's children read (the oracle's file, the pause).
DRAWN_ENV, PAUSE_ENV = "DPPCA_TEST_DRAWN_FILE", "DPPCA_TEST_PAUSE_AFTER_DRAW"
#: Seconds any one wait of a trial may take.
TRIAL_TIMEOUT = 120.0


@dataclass
class Outcome:
    """What one trial left behind."""

    kind: str
    signum: int
    rc: int
    stderr: str
    drawn: bool
    rows: list[dict] = field(default_factory=list)

    @property
    def counted(self) -> list[dict]:
        return [row for row in self.rows if row["state"] in ("reserved", "committed")]

    def violations(self) -> list[str]:
        """Every way the trial broke the rules (empty when it kept them)."""
        problems = []
        if self.drawn and len(self.counted) != 1:
            problems.append("noise was drawn but the release is not exactly once spent")
        if not self.drawn and self.counted:
            problems.append("no noise was drawn but the reservation stays spent")
        signalled = 128 + self.signum
        finished = self.rc == 0 and [r["state"] for r in self.rows] == ["committed"]
        # -signum: the signal came before main() installed its handlers (nothing
        # reserved yet) or after it returned (everything settled).
        default_action = self.rc == -self.signum and (
            not self.rows or [r["state"] for r in self.rows] == ["committed"]
        )
        if not (finished or default_action or self.rc == signalled):
            problems.append(f"exit status {self.rc}")
        if self.rc == signalled:
            lines = self.stderr.strip().splitlines()
            name = signal.Signals(self.signum).name
            if len(lines) != 1 or not lines[0].startswith(f"dask-dppca: stopped by {name}"):
                problems.append(f"stderr is not one 'stopped by {name}' line: {self.stderr!r}")
            states = {r["state"] for r in self.rows}
            if "cancelled" in states and "was cancelled" not in self.stderr:
                problems.append("the line does not say the reservation was cancelled")
        return problems

    def label(self) -> str:
        """``cancelled (no draw)``, ``spent (drawn)``, ``finished``..., for the counts."""
        if not self.rows:
            return "stopped before reserving"
        states = "+".join(r["state"] for r in self.rows)
        return f"{states} ({'drawn' if self.drawn else 'no draw'})"


class Zygote:
    """A process that imported the library and forks one fit per request."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli.stop_trials"],
            cwd=ROOT,
            env={**os.environ, **(env or {}), "PYTHONPATH": _pythonpath()},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._read() == {"ready": True}

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited ({self.process.wait(TRIAL_TIMEOUT)})")
        return json.loads(line)

    def start(self, argv: list[str], env: dict[str, str], folder: Path) -> int:
        """Fork a process running ``main(argv)``; its pid."""
        request = {"argv": argv, "env": env, "folder": str(folder)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return int(self._read()["pid"])

    def wait(self) -> int:
        """The exit status of the last process started (like ``Popen.returncode``)."""
        return int(self._read()["rc"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(TRIAL_TIMEOUT)

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _pythonpath() -> str:
    return os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


def fit_argv(store: str, ledger: str, output: str, scheduler: str | None) -> list[str]:
    """The ``dask-dppca fit`` arguments of a trial (``scheduler`` None: the embedded cluster)."""
    argv = ["fit", store, "--budget", ledger, "--output", output, "--force", "--no-progress"]
    return argv + ([] if scheduler is None else ["--scheduler", scheduler])


def ledger_rows(ledger: str) -> list[dict]:
    """Every release row, read with plain sqlite3 (not the code under test)."""
    with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=60) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute("SELECT * FROM releases ORDER BY id")]


def run_trial(
    zygote: Zygote,
    folder: Path,
    store: str,
    kind: str,
    signum: int,
    duration: tuple[float, float],
    scheduler: str | None,
    rng: random.Random,
) -> Outcome:
    """One fit, one signal at the moment ``kind`` says, and what it left.

    ``duration``: what :func:`measure` returned (the whole fit, its part after the
    reservation).
    """
    from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget

    folder.mkdir(parents=True)
    ledger, drawn = str(folder / "l.ledger"), folder / "drawn"
    PrivacyBudget(50.0, 1e-5, ledger=ledger, create=True)
    env = {DRAWN_ENV: str(drawn), PAUSE_ENV: "2" if kind == "drawn" else "0"}
    argv = fit_argv(store, ledger, str(folder / "r.json"), scheduler)
    pid = zygote.start(argv, env, folder)
    started = time.monotonic()
    deadline = started + TRIAL_TIMEOUT
    at = started + rng.uniform(0.0, duration[0])
    after = rng.uniform(0.0, duration[1])
    while time.monotonic() < deadline:
        if kind == "random" and time.monotonic() >= at:
            break
        if kind == "reserved" and ledger_rows(ledger):
            break
        if kind == "after" and ledger_rows(ledger):
            time.sleep(after)
            break
        if kind == "drawn" and drawn.exists():
            break
        if not _running(pid):
            break
        time.sleep(0.005)
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it finished first
    rc = zygote.wait()
    return Outcome(
        kind=kind,
        signum=signum,
        rc=rc,
        # A signal right after the fork may end the process before it opened its files.
        stderr=_text(folder / "stderr"),
        drawn=drawn.exists(),
        rows=ledger_rows(ledger),
    )


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"  # not a zombie yet
    except OSError:
        return False


def measure(zygote: Zygote, folder: Path, store: str, scheduler: str | None) -> tuple[float, float]:
    """Seconds one unsignalled fit takes, and its part after the reservation (the
    windows random moments are drawn from)."""
    from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget

    folder.mkdir(parents=True)
    ledger = str(folder / "l.ledger")
    PrivacyBudget(50.0, 1e-5, ledger=ledger, create=True)
    started = time.monotonic()
    pid = zygote.start(fit_argv(store, ledger, str(folder / "r.json"), scheduler), {}, folder)
    reserved = None
    while _running(pid):
        if reserved is None and ledger_rows(ledger):
            reserved = time.monotonic()
        time.sleep(0.005)
    rc = zygote.wait()
    ended = time.monotonic()
    assert rc == 0, (folder / "stderr").read_text()
    return ended - started, ended - (reserved or started)


# -- the zygote's side ----------------------------------------------------------------------


def _install_oracle() -> None:
    """Make the noise function report (and optionally pause) around each draw."""
    from dask_dppca.privacy.mechanisms import mechanism

    original = mechanism.add_symmetric_noise

    def reporting(*args, **kwargs):
        path = os.environ.get(DRAWN_ENV)
        if path:
            with open(path, "a") as out:
                out.write(f"{os.getpid()}\n")
                out.flush()
                os.fsync(out.fileno())
        noisy = original(*args, **kwargs)
        time.sleep(float(os.environ.get(PAUSE_ENV) or 0))
        return noisy

    mechanism.add_symmetric_noise = reporting


def _serve() -> None:
    import threading

    # What the command imports when it runs, imported once here.
    import dask_dppca.cli
    import dask_dppca.cli.fit
    import dask_dppca.compute
    import dask_dppca.decomposition.results
    import dask_dppca.io

    _install_oracle()
    assert threading.active_count() == 1, "the zygote must run no thread before forking"
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the fit's process
            rc = 1
            try:
                folder = Path(request["folder"])
                for number, name in ((1, "stdout"), (2, "stderr")):
                    handle = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    os.dup2(handle, number)
                    os.close(handle)
                sys.stdin.close()
                os.environ.update(request["env"])
                os.chdir(folder)
                rc = dask_dppca.cli.main(request["argv"])
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(rc)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    _serve()
