"""Measuring what an analysis adds to a fit: the machine model's analysis figures.

``dask-dppca bench --save`` (:func:`~dask_dppca.cli.measure.measure_machine_model`)
measures, beside a fit's rates:

* the scree's cost per record pair and value on one core, by width: its histogram pass
  (the pair quantiles, ``k + 1`` values a pair) and its sums pass (the means, ``3 k + 1``),
  at k = 5 (``analyze``'s default) on a cross pair of 1024-row blocks;
* one noise draw of a quantile scan with the private sampler (a user's release draws
  OS entropy; a seeded test sampler is several times faster and would mislead);
* each built-in stage's fixed cost on warm workers and the analysis's own: a small
  analysis (2000 x 4) with the directions alone and with each stage, less what the plan
  models of it (its passes, its draws): what is left is its releases' round trips and the
  client's post-processing;
* what a fresh process's first analysis adds on the embedded cluster it starts (a
  subprocess: the start, its imports and compiled code).

Benchmark data only (random rows, no seed).  Every release is charged to every budget
in force, benchmark or not: where one is (an active budget, a ledger in the Dask
configuration or its environment variable, a required budget, a ledger configured where
the noise is drawn), the small analyses are not run, the stages' fixed costs are left
unmeasured (a plan then prices each as a fit's) and a warning says why.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
import warnings
from typing import Any

__all__ = [
    "best_seconds",
    "budget_in_force",
    "noise_draw_seconds",
    "scree_value_seconds",
    "stage_fixed_seconds",
    "start_seconds",
]

#: k of the scree's measurement (``analyze``'s default).
SCREE_K = 5
#: Rows of each block of the scree's measured block pair.
SCREE_ROWS = 1024
#: The small analysis's rows, width and total epsilon (large enough that no stage's
#: accuracy check refuses it at this n: it is a benchmark, its releases unused).
SMALL_SHAPE = (2000, 4)
SMALL_EPSILON = 50.0


def scree_value_seconds(
    widths: tuple[int, ...], quick: bool
) -> tuple[dict[int, float], dict[int, float]]:
    """The scree's seconds per pair and value by width: (histograms, sums), best of a
    few in this thread's CPU time.
    """
    measured = {d: _scree_passes(d, 2 if quick else 5) for d in widths}
    return {d: m[0] for d, m in measured.items()}, {d: m[1] for d, m in measured.items()}


def _scree_passes(d: int, repeats: int) -> tuple[float, float]:
    """At width ``d``: (a histogram pass's, a sums pass's) seconds per pair and value."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from ..kernel.scree_stats import block_histograms, block_sums, scree_design

    rng = np.random.default_rng()  # benchmark data (any values, no seed)
    k, rows = SCREE_K, SCREE_ROWS
    pairs = scree_design((rows, rows), ((0, 1),))[0]
    x, y = rng.standard_normal((rows, d)), rng.standard_normal((rows, d))
    v = np.linalg.qr(rng.standard_normal((d, k)))[0].T  # k unit directions
    ones, zeros = np.ones(k), np.zeros(k)

    def histogram_pass() -> Any:
        return block_histograms(x, v, other=y, indices=(0, 1))

    def sums_pass() -> Any:
        return block_sums(x, v, np.ones(k + 1), ones, zeros, ones, other=y, indices=(0, 1))

    histogram_pass(), sums_pass()  # compile, or load from the cache
    with threadpool_limits(1):
        histograms = best_seconds(histogram_pass, repeats, time.thread_time) / (pairs * (k + 1))
        sums = best_seconds(sums_pass, repeats, time.thread_time) / (pairs * (3 * k + 1))
    return histograms, sums


def noise_draw_seconds(quick: bool) -> float:
    """One draw of a quantile scan with the private sampler: a median's scan over counts
    that step at 1 (``PrivateQuantile.planned_draws`` draws), best of a few, wall time.
    """
    import numpy as np

    from ..privacy.mechanisms.contract import make_sampler
    from ..privacy.mechanisms.quantile import PrivateQuantile

    n = 10_000
    scan = PrivateQuantile(n, 0.5, 1.0)
    counts = np.where(scan.candidates >= 1.0, n, 0)  # benchmark counts: every record at 1
    sampler = make_sampler("discrete_laplace", None)  # the private sampler, as a release's
    seconds = best_seconds(lambda: scan.release(counts, sampler), 1 if quick else 3)
    return seconds / scan.planned_draws


def stage_fixed_seconds(client: Any, model: Any, quick: bool) -> dict[str, float]:
    """Each built-in stage's fixed cost by title, and ``"analysis"`` (the analysis's own),
    on ``client``'s warm workers: measured small analyses less ``model``'s plan of them;
    none (and a warning) where a budget is in force (the module docstring).
    """
    charged = budget_in_force()
    if charged is not None:
        warnings.warn(
            f"stage costs not measured: {charged}, and the benchmark's analyses would be "
            "charged to it; a plan prices each stage as a fit's fixed cost",
            stacklevel=2,
        )
        return {}
    import numpy as np
    import zarr

    from ..analysis.options import Compute
    from ..analysis.plan import plan_analysis
    from ..analysis.run import analyze
    from ..analysis.stages.directions import DirectionsStage
    from ..analysis.stages.median import MedianStage
    from ..analysis.stages.scale import ScaleStage
    from ..analysis.stages.score_map import ScoreMapStage
    from ..analysis.stages.scree import ScreeStage

    others = (ScreeStage, ScoreMapStage, MedianStage, ScaleStage)
    # Planned with no stage's fixed cost: the measured rest is the fixed cost.
    zero = {"analysis": 0.0, **{s().title: 0.0 for s in others}}
    bare = dataclasses.replace(model, stage_seconds=zero, start_seconds=0.0)
    compute = Compute(scheduler=client)
    repeats = 1 if quick else 2
    costs: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an untrusted worker's release: timing only
        store = os.path.join(folder, "small.zarr")
        z = zarr.create_array(store, shape=SMALL_SHAPE, chunks=(1000, SMALL_SHAPE[1]), dtype="f8")
        z[:] = np.random.default_rng().standard_normal(SMALL_SHAPE)  # benchmark data, no seed

        def measured(stages: list[Any]) -> tuple[float, Any]:
            def run() -> Any:
                return analyze(store, 2, epsilon=SMALL_EPSILON, stages=stages, compute=compute)

            run()  # the stage's first run on these workers: imports, compiled code
            seconds = best_seconds(run, repeats)
            plan = plan_analysis(
                store, 2, epsilon=SMALL_EPSILON, stages=stages, compute=compute, machine=bare
            )
            return seconds, plan

        alone, plan = measured([DirectionsStage()])
        costs["analysis"] = max(0.0, alone - plan.wall_seconds)
        for stage_class in others:
            stage = stage_class()
            seconds, plan = measured([DirectionsStage(), stage])
            costs[stage.title] = max(0.0, seconds - alone - plan.stage(stage.title).seconds)
    return costs


#: A fresh process's first analysis on the embedded cluster it starts, then the same
#: analysis again: the first's extra is the start (benchmark data, no seed).
_START_SCRIPT = """
import time, warnings
warnings.simplefilter("ignore")
import numpy as np
import dask_dppca as dd
x = np.random.default_rng().standard_normal((2000, 4))
def run():
    started = time.perf_counter()
    dd.analyze(x, 2, epsilon=50.0)
    return time.perf_counter() - started
first = run()
print(first - min(run(), run()))
"""


def start_seconds() -> float | None:
    """What a fresh process's first analysis adds on the embedded cluster it starts (a
    Python subprocess: its start, imports and compiled code, the same small analysis
    again taken off); None, with a warning, where a budget is in force.
    """
    import subprocess
    import sys

    charged = budget_in_force()
    if charged is not None:
        warnings.warn(f"start not measured: {charged}", stacklevel=2)
        return None
    out = subprocess.run(
        [sys.executable, "-c", _START_SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return max(0.0, float(out.stdout.strip().splitlines()[-1]))


def budget_in_force() -> str | None:
    """What a release made here now would be charged to beyond nothing, or None."""
    import dask

    from ..compute.budget_config import budgets_to_charge
    from ..compute.trusted.site_ledger import RELEASE_LEDGER_KEY
    from ..privacy.budget.privacy_budget import LedgerError

    if dask.config.get(RELEASE_LEDGER_KEY, None):
        return f"a release ledger is configured ({RELEASE_LEDGER_KEY})"
    try:
        budgets = budgets_to_charge()
    except LedgerError as error:  # required and none, or a ledger that does not open
        return f"a budget is required or configured ({error})"
    return f"{len(budgets)} budget(s) are in force" if budgets else None


def best_seconds(call: Any, repeats: int, clock: Any = time.perf_counter) -> float:
    """The least ``clock`` time of ``repeats`` calls (wall time; ``time.thread_time``:
    this thread's CPU time, which other load on the machine does not move).
    """
    best = math.inf
    for _ in range(repeats):
        started = clock()
        call()
        best = min(best, clock() - started)
    return best
