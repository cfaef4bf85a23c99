"""SIGTERM and SIGHUP at random moments of ``dask-dppca fit --budget``: what the ledger keeps.

Runs ``--trials`` fits (default 50), each stopped by SIGTERM or SIGHUP (alternately) at a
moment drawn uniformly from one fit's measured duration (half of them from its part
after the reservation), plus a few aimed right after the reservation and during the draw (the kinds of tests/cli/stop_trials.py, which
this script shares with tests/cli/test_stop_signals.py).  Each trial is checked against
the rule: the reservation is left spent only when the draw began (an oracle outside
the code under test says so), a drawn release stays spent exactly once, the exit code
is 128 + the signal number with one line on stderr.  It prints the counts of each
outcome, the number of violations, and the time per trial; exit status 1 if any trial
broke the rule.

    python benchmarks/bench_signals.py                   # 50 trials, local threads
    python benchmarks/bench_signals.py --embedded        # on the embedded LocalCluster
    python benchmarks/bench_signals.py --trials 2        # the smallest run

The data are test data (fixed seed); the moments come from ``--seed``.
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cli import write_store  # noqa: E402  (the repository's test helpers)
from tests.cli.stop_trials import Zygote, measure, run_trial  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="seed of the moments (not data)")
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="fit on the default embedded LocalCluster (default: --scheduler threads)",
    )
    args = parser.parse_args()
    scheduler = None if args.embedded else "threads"
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    violations = []
    with tempfile.TemporaryDirectory() as folder, Zygote() as zygote:
        base = Path(folder)
        store = write_store(base / "x.zarr")
        duration = measure(zygote, base / "measure", store, scheduler)
        # One in ten trials aimed (right after the reservation, during the draw); the
        # rest random, half of them in the part of the fit after its reservation.
        aimed = ("reserved", "drawn")
        kinds = [
            aimed[(i // 10) % 2] if i % 10 == 9 else ("random", "after")[(i // 2) % 2]
            for i in range(args.trials)
        ]
        started = time.monotonic()
        for i, kind in enumerate(kinds):
            signum = (signal.SIGTERM, signal.SIGHUP)[i % 2]
            outcome = run_trial(
                zygote, base / f"t{i}", store, kind, signum, duration, scheduler, rng
            )
            counts[f"{signal.Signals(signum).name:7s} {kind:8s} -> {outcome.label()}"] += 1
            violations += [(i, problem) for problem in outcome.violations()]
        elapsed = time.monotonic() - started
    where = "embedded LocalCluster" if args.embedded else "--scheduler threads"
    print(
        f"{args.trials} trials on {where}; one unsignalled fit {duration[0]:.2f} s, "
        f"{duration[1]:.2f} s of it after the reservation"
    )
    for label, count in sorted(counts.items()):
        print(f"  {count:3d}  {label}")
    print(f"violations: {len(violations)}")
    for i, problem in violations:
        print(f"  trial {i}: {problem}")
    print(f"{elapsed / max(1, args.trials):.2f} s per trial ({elapsed:.0f} s in all)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
