"""A study ledger's cost: one reservation against ledgers of 10, 50 and 200 analyses.

A script, not a test:

    python benchmarks/bench_ledger_scale.py              # ledgers of 10, 50, 200 analyses
    python benchmarks/bench_ledger_scale.py --sizes 10 50

Each analysis is the parts ``dd.analyze`` plans at k = 5 (directions; scree quantiles and
three means; the score map's frame quantiles, additive and sparse histograms), split by
``split_budget`` at a random total epsilon in [0.3, 3] and delta 1e-8, so every analysis
brings its own epsilons (about three distinct discrete ones: the composition is on the
pessimistic lattice past ``MAX_OUTCOMES``).  One in-memory budget (1000, 1e-5) takes them
all; for each size the script times one more reservation (an analysis at epsilon 1: its
check against every row, then its record), ``remaining()`` (a bisection over the same
check) and a refused reservation (its message computes what is left), and prints the
lattice's slack (the most it adds to the epsilon) and the spent epsilon.  The seed draws
the benchmark's totals, not noise.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from dask_dppca.analysis.stages import default_shares
from dask_dppca.analysis.stages.scree import scree_parts as _scree_plan
from dask_dppca.privacy import BudgetExceededError, PrivacyBudget
from dask_dppca.privacy.budget.privacy_budget import PartsCharge
from dask_dppca.privacy.mechanisms.accounting import PlannedPart, compose, split_budget
from dask_dppca.privacy.mechanisms.calibration import gaussian_dp_mu
from dask_dppca.privacy.mechanisms.parts import GaussianPart

#: The analysis's default shares of its three stages (the stage registry's).
SHARES = default_shares(("directions", "scree", "score_map"))

T = TypeVar("T")


def analysis_parts(epsilon: float, delta: float = 1e-8) -> PartsCharge:
    """The parts of one analysis at this total (k = 5, every scree method, a score map)."""
    planned = [
        PlannedPart("directions", "directions", "gaussian"),
        *_scree_plan(5, ("clipped", "winsorized", "huber")),
        PlannedPart("score_map", "frame quantiles", "pure", count=4, weight=0.25),
        PlannedPart("score_map", "additive histogram", "gaussian", weight=1.5),
        PlannedPart("score_map", "sparse histogram", "approx", weight=1.5, delta_share=0.1),
    ]
    return PartsCharge(split_budget(epsilon, delta, planned, SHARES).all_parts)


def timed(func: Callable[[], T]) -> tuple[float, T]:
    """Seconds ``func`` took, and its result."""
    start = time.perf_counter()
    out = func()
    return time.perf_counter() - start, out


def main() -> None:
    """Print one row per ledger size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 200])
    args = parser.parse_args()
    rng = np.random.default_rng(37)
    totals = rng.uniform(0.3, 3.0, max(args.sizes))
    charges = [analysis_parts(float(eps)) for eps in totals]
    extra = analysis_parts(1.0)
    print(
        f"{'analyses':>8} {'reserve s':>10} {'remaining s':>12} {'refusal s':>10} "
        f"{'slack':>8} {'spent eps':>10} {'left eps':>9}"
    )
    for size in sorted(args.sizes):
        budget = PrivacyBudget(1000.0, 1e-5)
        for charge in charges[:size]:
            budget.reserve(charge)
        check, _ = timed(lambda: budget.reserve(extra))
        rows = [p for r in budget.spent for p in r.parts]
        slack = compose(rows).slack
        took_left, left = timed(budget.remaining)
        big = PartsCharge((GaussianPart(gaussian_dp_mu(1.01 * float(left), 1e-5)),))

        def refused() -> None:
            try:
                budget.check(big)
            except BudgetExceededError:
                return
            raise AssertionError("expected a refusal")

        took_refusal, _ = timed(refused)
        print(
            f"{size:>8} {check:>10.3f} {took_left:>12.3f} {took_refusal:>10.3f} "
            f"{slack:>8.3g} {budget.spent_epsilon:>10.4g} {left:>9.4g}"
        )


if __name__ == "__main__":
    main()
