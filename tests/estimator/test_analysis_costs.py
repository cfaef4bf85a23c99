"""What an analysis adds to a fit, in its plan: each stage's fixed cost, the scree's own
pair costs, the quantile scans' noise draws (the machine model's analysis figures), and
the measurements that fill them in (``dask_dppca.cli.measure_analysis``)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.planning.machine import DEFAULT_MODEL, MachineModel, load_machine_model
from dask_dppca.privacy.mechanisms.laplace import IntegerNoise, SeededDiscreteLaplace
from dask_dppca.privacy.mechanisms.quantile import (
    _FIRST_BATCH,
    _MAX_BATCH,
    PrivateQuantile,
    batched_draws,
)
from dask_dppca.privacy.mechanisms.scale import RobustScale

pytestmark = pytest.mark.timeout(120)


class CountingNoise(IntegerNoise):
    """Counts the draws of a seeded test sampler (seed for tests only: NOT private)."""

    is_private = False

    def __init__(self) -> None:
        self.inner, self.draws = SeededDiscreteLaplace(0), 0

    def _draw(self, scale: int, size: int) -> np.ndarray:
        self.draws += size
        return self.inner.draw(scale, size)


@pytest.mark.parametrize("from_top", [False, True])
@pytest.mark.parametrize(
    "stop",
    [0, _FIRST_BATCH - 1, _FIRST_BATCH, 3 * _FIRST_BATCH, 64_511, 64_512, 98_000, 130_047],
)
def test_a_scan_draws_what_batched_draws_counts(stop, from_top):
    """Counts that step from 0 to n at one candidate: at a large epsilon the scan stops
    there, and its draws are the threshold's and ``batched_draws``' (whole batches, the
    last cut at the grid's end), across the batch boundaries."""
    n = 1000
    scan = PrivateQuantile(n, 0.5, 1e4, from_top=from_top)
    grid = scan.candidates
    at = grid.size - stop if from_top else stop  # every record at candidate ``at``
    counts = np.where(np.arange(grid.size) >= at, n, 0)
    noise = CountingNoise()
    released = scan.release(counts, noise)
    assert released == (grid[at] if at < grid.size else np.inf)  # it stopped there
    assert noise.draws == 1 + batched_draws(stop, grid.size)
    assert batched_draws(stop, grid.size) > stop  # the stop's own draw is in


def test_the_planned_draws_are_a_scan_stopping_at_one():
    """``planned_draws``: a scan over data at 1 (up, and down from the top), counted."""
    n = 1000
    for from_top in (False, True):
        scan = PrivateQuantile(n, 0.5, 1e4, from_top=from_top)
        counts = np.where(scan.candidates >= 1.0, n, 0)
        noise = CountingNoise()
        scan.release(counts, noise)
        assert noise.draws == scan.planned_draws
    # A column of the scale's seven quantiles, times d.
    scale = RobustScale(n, 3, 1.0)
    assert scale.planned_draws == 3 * sum(q.planned_draws for q in scale.quantile_releases)
    assert batched_draws(10**9, 5000) == 5000  # never past the grid
    assert _MAX_BATCH > _FIRST_BATCH


def _planned(model, stages, d=4, n=4000):
    X = np.zeros((n, d))
    compute = dd.Compute(scheduler="synchronous")
    return dd.plan_analysis(X, 2, stages=stages, compute=compute, machine=model)


def test_each_stage_pays_its_own_fixed_cost_and_the_analysis_its_own():
    """``stage_seconds`` by title: a stage's plan moves by exactly its change, the
    analysis's own is added once to the wall; a title not measured pays a fit's."""
    stages = [dd.DirectionsStage(), dd.ScreeStage(), dd.ScoreMapStage(), dd.MedianStage()]
    base = dataclasses.replace(DEFAULT_MODEL, stage_seconds={"analysis": 0.0})
    plan = _planned(base, stages)
    costly = {"analysis": 7.0, "scree": 3.0, "score map": 5.0, "median": 11.0}
    more = _planned(dataclasses.replace(base, stage_seconds=costly), stages)
    for title, added in costly.items():
        if title != "analysis":
            assert more.stage(title).seconds - plan.stage(title).seconds == pytest.approx(
                added - base.fixed_seconds
            )
    assert more.own_seconds == 7.0 and plan.own_seconds == 0.0
    assert more.wall_seconds == pytest.approx(sum(s.seconds for s in more.stages) + 7.0)
    assert "set-up" in str(more) and "set-up" not in str(plan)


def test_the_quantile_scans_noise_draws_are_planned_per_column():
    """The scale's and the median's plans pay their scans' draws at the model's rate: d
    times a column's, so a wide table's scale is planned as what it costs."""
    slow = dataclasses.replace(DEFAULT_MODEL, noise_draw_seconds=1e-6)
    free = dataclasses.replace(DEFAULT_MODEL, noise_draw_seconds=0.0)
    for stage, title in ((dd.ScaleStage(), "scale"), (dd.MedianStage(), "median")):
        stages = [dd.DirectionsStage(), stage]
        for d in (4, 8):
            paid = _planned(slow, stages, d=d).stage(title)
            unpaid = _planned(free, stages, d=d).stage(title)
            draws = round((paid.seconds - unpaid.seconds) / 1e-6)
            column = 7 if title == "scale" else 1  # quantiles per column
            per_scan = PrivateQuantile(4000, 0.5, 1.0).planned_draws
            assert d * per_scan <= draws <= d * column * per_scan
            assert f"{draws:.3g} noise draws" in paid.detail
    # The map's frame: four scans, whatever d.
    map_paid = _planned(slow, None).stage("score map").seconds
    map_unpaid = _planned(free, None).stage("score map").seconds
    assert 2 * PrivateQuantile(4000, 0.5, 1.0).planned_draws * 1e-6 < map_paid - map_unpaid


def test_the_scree_is_planned_at_its_own_pair_costs():
    """The scree's passes at ``scree_*_seconds`` a pair and value: doubling them doubles
    the scree's pass work and touches no other stage."""
    model = dataclasses.replace(
        DEFAULT_MODEL,
        scree_histogram_seconds={4: 1e-6},
        scree_sum_seconds={4: 1e-6},
        stage_seconds={"scree": 0.0},
        task_seconds=0.0,
    )
    double = dataclasses.replace(
        model, scree_histogram_seconds={4: 2e-6}, scree_sum_seconds={4: 2e-6}
    )
    stages = [dd.DirectionsStage(), dd.ScreeStage()]
    one, two = _planned(model, stages, n=20_000), _planned(double, stages, n=20_000)
    pairs = one.scree_design["n_pairs"]
    k = 2
    values = (k + 1) + (3 * k + 1)  # histograms, then the means' sums
    assert two.stage("scree").seconds - one.stage("scree").seconds == pytest.approx(
        pairs * values * 1e-6,
        rel=0.25,  # the segments' makespan on the planned threads
    )
    assert two.stage("directions").seconds == one.stage("directions").seconds


def test_the_analysis_figures_are_saved_read_and_checked(tmp_path):
    path = tmp_path / "machine.json"
    model = dataclasses.replace(
        DEFAULT_MODEL, source="test", stage_seconds={"scree": 0.2, "analysis": 0.01}
    )
    path.write_text(json.dumps(model.describe()))
    assert load_machine_model(path) == model
    # A model saved before these figures reads with none (a fit's fixed cost per stage).
    old = model.describe()
    for name in ("stage_seconds", "noise_draw_seconds", "scree_histogram_seconds"):
        old.pop(name)
    old.pop("scree_sum_seconds")
    path.write_text(json.dumps(old))
    bare = load_machine_model(path)
    assert bare.stage_fixed("scree") == bare.fixed_seconds and bare.noise_draw_seconds == 0.0
    assert bare.scree_value_seconds("sums", 32) == 1.0 / bare.pair_rate(32)
    for name, bad in (("noise_draw_seconds", -1.0), ("stage_seconds", {"scree": float("nan")})):
        path.write_text(json.dumps({**model.describe(), name: bad}))
        with pytest.raises(ValueError, match="stage and noise costs"):
            load_machine_model(path)
    path.write_text(json.dumps({**model.describe(), "scree_sum_seconds": {"8": 0.0}}))
    with pytest.raises(ValueError, match="scree pair costs"):
        load_machine_model(path)
    assert isinstance(MachineModel.from_dict(model.describe()), MachineModel)


def test_the_analysis_figures_are_measured():
    """The measurements themselves (quick): the scree's and the draws' are positive and
    of a plausible size, each stage's fixed cost is measured on a real analysis."""
    from dask_dppca.cli.measure_analysis import (
        noise_draw_seconds,
        scree_value_seconds,
        stage_fixed_seconds,
        start_seconds,
    )

    histograms, sums = scree_value_seconds((8,), quick=True)
    assert 1e-11 < histograms[8] < 1e-6 and 1e-11 < sums[8] < 1e-6
    assert 1e-9 < noise_draw_seconds(quick=True) < 1e-4
    costs = stage_fixed_seconds("synchronous", DEFAULT_MODEL, quick=True)
    assert set(costs) == {"analysis", "scree", "score map", "median", "scale"}
    assert all(0.0 <= c < 30.0 for c in costs.values())
    assert 0.0 < start_seconds() < 120.0  # a fresh process's first analysis, measured


def test_the_embedded_cluster_start_is_planned_only_where_it_would_start(monkeypatch):
    """``start_seconds``: on the embedded cluster a plan of no client would start (the
    command line's every run: a fresh process, no client running in it; this test
    process may hold an earlier test's), not on a local scheduler."""
    from dask_dppca.compute import shape

    model = dataclasses.replace(DEFAULT_MODEL, start_seconds=5.0)
    X = np.zeros((3000, 4))
    monkeypatch.setattr(shape, "active_client", lambda: None)  # as in a fresh process
    fresh = dd.plan_analysis(X, 2, machine=model)
    local = dd.plan_analysis(X, 2, compute=dd.Compute(scheduler="threads"), machine=model)
    assert fresh.start_seconds == 5.0 and local.start_seconds == 0.0
    assert fresh.wall_seconds == pytest.approx(
        sum(s.seconds for s in fresh.stages) + fresh.own_seconds + 5.0
    )

    def start_row(plan):
        return [line for line in str(plan).splitlines() if line.startswith("start ")]

    assert len(start_row(fresh)) == 1 and start_row(local) == []
    assert fresh.describe()["start_seconds"] == 5.0


def test_no_stage_is_measured_where_a_budget_would_be_charged(tmp_path, monkeypatch):
    """The small analyses spend nothing of a real budget: with a ledger configured (the
    environment variable), a budget required, or one active, none runs (nor the start's
    subprocess) and a warning says why; a plan then prices each stage as a fit's fixed
    cost."""
    from dask_dppca.cli.measure_analysis import (
        budget_in_force,
        stage_fixed_seconds,
        start_seconds,
    )

    assert budget_in_force() is None
    ran = []
    monkeypatch.setattr("dask_dppca.analysis.run.analyze", lambda *a, **k: ran.append(a))
    monkeypatch.setenv("DASK_DASK_DPPCA__LEDGER", str(tmp_path / "study.ledger"))
    with pytest.warns(UserWarning, match="stage costs not measured"):
        assert stage_fixed_seconds("synchronous", DEFAULT_MODEL, quick=True) == {}
    with pytest.warns(UserWarning, match="start not measured"):
        assert start_seconds() is None
    monkeypatch.delenv("DASK_DASK_DPPCA__LEDGER")
    monkeypatch.setenv("DASK_DASK_DPPCA__BUDGET_REQUIRED", "1")
    assert "required" in budget_in_force()
    monkeypatch.delenv("DASK_DASK_DPPCA__BUDGET_REQUIRED")
    with dd.PrivacyBudget(epsilon=5.0, delta=1e-5):
        assert "in force" in budget_in_force()
    assert ran == [] and budget_in_force() is None


def test_a_stage_over_the_memory_limit_makes_the_analysis_not_fit(tmp_path, capsys):
    """A wide table's scale holds its dense counts (a count per column and candidate) in
    its release task: on 1 GiB workers at d = 150 its peak is over the usable memory
    while the directions' fit fits; the plan says so, names the stage, and ``plan
    --analysis`` exits 2 (without the scale: fits)."""
    import dask.array as da

    X = da.zeros((100_000, 150), chunks=(10_000, 150))
    cluster = dict(workers=4, threads=4, memory_limit="1GiB")
    scaled = dd.plan_analysis(X, 3, scale="robust", machine=DEFAULT_MODEL, **cluster)
    plain = dd.plan_analysis(X, 3, machine=DEFAULT_MODEL, **cluster)
    assert scaled.directions.fits and plain.fits
    assert not scaled.fits and len(scaled.problems) == 1
    assert "the scale stage needs a peak of" in scaled.problems[0]
    assert "fits: NO (the scale stage" in str(scaled) and "fits: yes" in str(plain)
    assert scaled.describe()["problems"] == scaled.problems

    import zarr

    from dask_dppca.cli import main

    store = str(tmp_path / "wide.zarr")
    zarr.create_array(store, shape=(100_000, 150), chunks=(10_000, 150), dtype="f8")
    argv = ["plan", store, "--analysis", "-k", "3", "--workers", "4", "--threads", "4"]
    argv += ["--memory-limit", "1GiB", "--machine"]
    saved = tmp_path / "machine.json"
    saved.write_text(json.dumps(DEFAULT_MODEL.describe()))
    assert main([*argv, str(saved), "--scale", "robust"]) == 2
    assert "the scale stage needs a peak of" in capsys.readouterr().err
    assert main([*argv, str(saved)]) == 0
