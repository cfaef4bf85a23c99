"""SIGINT, SIGTERM and SIGHUP at random moments of ``dask-dppca analyze --budget``.

Runs ``--trials`` analyses (default 50), each stopped by SIGINT, SIGTERM or SIGHUP in
turn at a moment drawn uniformly from one analysis's measured duration, and checks what
the ledger and the terminal say against the rule: no row is left ``reserved`` without
the stop line naming it (its id, with what to do), the exit code is 128 + the signal
number (or 0 when the analysis finished first; a process killed by the signal's
default action counts only in the interpreter's own start-up, with no row and no
output), stderr is one line and never a traceback.  It prints the counts of each outcome and the violations; exit status 1 if
any trial broke the rule.

    python benchmarks/bench_signals_analysis.py                  # on the embedded cluster
    python benchmarks/bench_signals_analysis.py --threads --trials 10

The data are test data (fixed seed); the moments come from ``--seed``.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


#: A line of the analysis's progress display without a terminal ("analysis:  67% ...").
PROGRESS_LINE = re.compile(r"^analysis: +\d+% ")


def _argv(store: str, ledger: str, output: str, threads: bool) -> list[str]:
    argv = [sys.executable, "-m", "dask_dppca", "analyze", store, "-k", "2",
            "--budget", ledger, "--output", output]  # fmt: skip
    return argv + (["--scheduler", "threads"] if threads else [])


def _rows(ledger: str) -> list[tuple[int, str]]:
    with sqlite3.connect(ledger) as db:
        return [(int(i), str(s)) for i, s in db.execute("SELECT id, state FROM releases")]


def _ledger(folder: Path) -> str:
    path = str(folder / "study.ledger")
    subprocess.run([sys.executable, "-m", "dask_dppca", "budget", "create", path,
                    "--epsilon", "1000", "--delta", "1e-4"], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    return path


def trial(folder: Path, store: str, threads: bool, signum: int, delay: float) -> dict:
    """One analysis stopped by ``signum`` after ``delay`` seconds; what it left."""
    folder.mkdir()
    ledger = _ledger(folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(_argv(store, ledger, str(folder / "a.json"), threads),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)  # fmt: skip
    try:
        process.wait(timeout=delay)  # finished before its moment: no signal
    except subprocess.TimeoutExpired:
        process.send_signal(signum)
    _, stderr = process.communicate(timeout=300)
    rows = _rows(ledger)
    problems = []
    # The run's progress lines (stderr without a terminal) are not its stop's line.
    lines = [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]
    if "Traceback" in stderr or len(lines) > 1:
        problems.append(f"stderr has {len(lines)} lines: {stderr[-400:]!r}")
    # Killed by the signal's default action, which a shell reports as 128 + signum too:
    # only in the interpreter's own start-up, before the command's first line put in its
    # handlers (its ~50 ms of imports are handled), so with no row and no output.
    killed_at_start = process.returncode == -signum and not rows and not stderr
    if process.returncode not in (0, 128 + signum) and not killed_at_start:
        problems.append(f"exit code {process.returncode} (rows {rows}, stderr {stderr[-200:]!r})")
    for row_id, state in rows:
        if state == "reserved" and f"release {row_id} in" not in stderr:
            problems.append(f"row {row_id} left reserved without being named")
    states = collections.Counter(state for _, state in rows)
    label = "finished" if process.returncode == 0 else "stopped"
    if killed_at_start:
        label = "killed in the interpreter's start-up (no row)"
    outcome = f"{label}: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return {"outcome": outcome or label, "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="seed of the moments (not data)")
    parser.add_argument("--threads", action="store_true", help="--scheduler threads")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.cli import write_store

    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    violations = []
    with tempfile.TemporaryDirectory() as name:
        base = Path(name)
        store = write_store(base / "x.zarr", n=3000, d=6)
        started = time.monotonic()
        measured = trial(base / "measure", store, args.threads, signal.SIGTERM, 1e9)
        duration = time.monotonic() - started
        assert measured["outcome"].startswith("finished"), measured
        for i in range(args.trials):
            signum = SIGNALS[i % 3]
            done = trial(base / f"t{i}", store, args.threads, signum, rng.uniform(0, duration))
            counts[f"{signal.Signals(signum).name:7s} -> {done['outcome']}"] += 1
            violations += [(i, p) for p in done["problems"]]
    where = "--scheduler threads" if args.threads else "the embedded LocalCluster"
    print(f"{args.trials} trials on {where}; one analysis {duration:.1f} s")
    for label, count in sorted(counts.items()):
        print(f"  {count:3d}  {label}")
    print(f"violations: {len(violations)}")
    for i, problem in violations:
        print(f"  trial {i}: {problem}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
