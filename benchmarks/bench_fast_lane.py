"""The fast lane's wall time: what a contributor runs before each commit.

A script, not a timed test (a test's time depends on the machine and its load):

    python benchmarks/bench_fast_lane.py              # the lane on 2 workers, as CONTRIBUTING says
    python benchmarks/bench_fast_lane.py --workers 4
    python benchmarks/bench_fast_lane.py --slowest 20 # and where the time goes
    python benchmarks/bench_fast_lane.py tests/io     # the lane's tests of some paths only

It runs ``python -m pytest -m FAST_LANE -n WORKERS`` in a subprocess from the repository
root and prints the tests selected, the outcome, the wall time against the 3-minute aim,
the machine's load average before and after (the time moves with other work on the
machine: report the load with the figure) and, with ``--slowest``, pytest's slowest
durations.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The fast lane's marker expression (CONTRIBUTING.md, "Tests").
FAST_LANE = "not cluster and not statistical and not slow"
#: What the lane should take on 2 cores, in seconds.
AIM_SECONDS = 180.0


def main(argv: list[str] | None = None) -> int:
    """Time the fast lane once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (2)")
    parser.add_argument("--slowest", type=int, default=0, help="also print the N slowest")
    parser.add_argument("paths", nargs="*", help="test paths (default: the whole suite)")
    args = parser.parse_args(argv)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        FAST_LANE,
        "-n",
        str(args.workers),
        f"--durations={args.slowest}",
        *args.paths,
    ]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    load_after = os.getloadavg()[0]
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else done.stderr.strip()[-300:]
    print(f"fast lane: pytest -m {FAST_LANE!r} -n {args.workers} {' '.join(args.paths)}")
    print(f"outcome:   {summary}")
    for line in lines:
        if line.startswith(("FAILED", "ERROR")):
            print(f"           {line}")
    print(
        f"wall:      {seconds:.1f} s ({seconds / 60:.2f} min; aim {AIM_SECONDS / 60:.0f} min: "
        f"{'within' if seconds <= AIM_SECONDS else 'OVER'})"
    )
    print(f"load:      {load_before:.1f} before, {load_after:.1f} after ({os.cpu_count()} cores)")
    if args.slowest:
        block = re.split(r"=+ slowest \d+ durations =+", done.stdout)
        if len(block) > 1:
            print("\n".join(block[1].strip().splitlines()[: args.slowest]))
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
