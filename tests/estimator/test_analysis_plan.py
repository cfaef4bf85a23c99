"""The plan of a whole analysis (``dd.plan_analysis``, ``dask-dppca plan --analysis``).

Oracles: a real small analysis on the synchronous scheduler (its design, the segments
its graphs are built from, counted by spying on ``plan_segments``, and the split table it
shows), ``analyze``'s own signature for the defaults, and a counting stand-in for the
calibration's timer.  The data are TEST data (a fixed seed); ``random_state`` makes the
analysis's noise reproducible (not private: tests only).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.analysis.plan import analyze_defaults, plan_analysis, scree_passes
from dask_dppca.analysis.run import analyze
from dask_dppca.graph import lanes, scree
from dask_dppca.planning import machine
from dask_dppca.privacy.mechanisms.parts import part_to_dict

N, D = 3000, 6


def write_store(folder: Path) -> str:
    x = np.random.default_rng(7).standard_t(3, size=(N, D))  # TEST data
    store = str(folder / "data.zarr")
    z = zarr.create_array(store, shape=x.shape, chunks=(500, D), dtype="f8")
    z[:] = x
    return store


@pytest.fixture
def model_folder(tmp_path):
    """The machine model and its calibrations in a folder of this test's own."""
    with dask.config.set({machine.MODEL_PATH_KEY: str(tmp_path / "config" / "machine.json")}):
        yield tmp_path / "config"


@pytest.fixture
def counted_calibration(monkeypatch):
    """The calibration's kernel run replaced by a counted stand-in rate."""
    calls = []

    def rate() -> float:
        calls.append(1)
        return 1.3e8

    monkeypatch.setattr(machine, "_calibration_rate", rate)
    return calls


@pytest.mark.parametrize(
    "design",
    [None, dd.RegularDesign(k=4, block_size=250)],
    ids=["analyze-default", "regular-12-blocks"],
)
def test_the_plan_of_an_analysis_agrees_with_the_analysis(
    tmp_path, model_folder, counted_calibration, monkeypatch, design
):
    """With analyze's defaults (a complete design on one block here) and with a regular
    design of 12 blocks (several segments a pass: their count depends on the threads).
    """
    store = write_store(tmp_path)
    plan = plan_analysis(store, scheduler="synchronous", design=design)
    assert plan.fits and counted_calibration == [1]
    fit_segments: list[int] = []
    scree_segments: list[int] = []
    for module, seen in ((lanes, fit_segments), (scree, scree_segments)):
        original = module.plan_segments

        def spy(*args, _original=original, _seen=seen, **kwargs):
            segments = _original(*args, **kwargs)
            _seen.append(len(segments))
            return segments

        monkeypatch.setattr(module, "plan_segments", spy)
    designs = []
    planned_release = dd.DPPCA.planned_release

    def spy_release(self, *args, **kwargs):
        chosen = planned_release(self, *args, **kwargs)
        designs.append(chosen[1])
        return chosen

    monkeypatch.setattr(dd.DPPCA, "planned_release", spy_release)
    shown: list[str] = []
    result = analyze(
        store,
        scheduler="synchronous",
        random_state=0,
        show_split=shown.append,
        **({} if design is None else {"design": design}),
    )

    # The defaults are analyze's: read from its signature, the same run.
    defaults = analyze_defaults()
    assert (
        plan.parameters["n_components"] == defaults["n_components"] == result.meta["n_components"]
    )
    assert (plan.parameters["epsilon"], plan.parameters["delta"]) == (
        result.meta["epsilon"],
        result.meta["delta"],
    )
    assert plan.parameters["score_map"] and result.score_map is not None
    # The design: the directions' blocks and block pairs, the scree's sub-design.
    used = designs[0]  # the analysis's, and its fit's again
    assert {(p.block_sizes, p.block_pairs) for p in designs} == {
        (used.block_sizes, used.block_pairs)
    }
    design = plan.directions.design
    assert design["n_blocks"] == len(used.block_sizes)
    assert design["n_block_pairs"] == len(used.block_pairs)
    assert (design["n_pairs"], design["max_degree"]) == (used.n_pairs, used.max_degree)
    # The directions' share: the same noise as released.
    directions = result.privacy[0]
    assert directions["stage"] == "directions"
    assert plan.directions.privacy["sigma"] == pytest.approx(directions["noise"], rel=1e-12)
    assert plan.scree_design == result.scree["design"]
    # The tasks: the segments the fit's and each scree pass's graphs were built from.
    assert fit_segments == [plan.stage("directions").segment_tasks]
    assert len(scree_segments) == plan.stage("scree").passes == scree_passes(result.meta["methods"])
    assert set(scree_segments) == {plan.stage("scree").segment_tasks}
    # The split: the same table, part for part.
    assert shown == [plan.split_text]
    assert [part_to_dict(p) for p in plan.split.all_parts] == result.meta["parts"]
    assert plan.wall_seconds == pytest.approx(
        sum(s.seconds for s in plan.stages) + plan.own_seconds
    )
    assert [s.stage for s in plan.stages] == ["directions", "scree", "score map"]


def test_the_calibration_is_measured_once_kept_and_a_saved_model_wins(
    model_folder, counted_calibration
):
    first = machine.planning_model()
    assert first.source.startswith("calibrated now: ")
    assert first.pair_rate(machine.CALIBRATION_WIDTH) == pytest.approx(1.3e8)
    kept = json.loads((model_folder / "calibration.json").read_text())
    assert len(kept) == 1
    second = machine.planning_model()
    assert counted_calibration == [1]  # kept: not measured again
    assert second.source.startswith("calibrated on ")
    assert second.kernel_pairs_per_second == first.kernel_pairs_per_second
    assert second.kernel_row_seconds == first.kernel_row_seconds
    # A damaged file is measured again, not trusted.
    (model_folder / "calibration.json").write_text("{not json")
    assert machine.planning_model().source.startswith("calibrated now: ")
    assert counted_calibration == [1, 1]
    # A model saved by bench --save is used as saved.
    saved = machine.MachineModel({8: 2e8}, {"local/zstd": 3e8}, 2e-3, 0.5, 2**28, "stand-in")
    machine.save_machine_model(saved)
    used = machine.planning_model()
    assert used.source == "saved by bench --save (stand-in)"
    assert used.kernel_pairs_per_second == saved.kernel_pairs_per_second
    assert counted_calibration == [1, 1]


def test_plan_of_an_analysis_takes_its_parameters_and_refuses_bad_ones(
    tmp_path, model_folder, counted_calibration
):
    store = write_store(tmp_path)
    plan = plan_analysis(
        store, 3, epsilon=1.0, methods=("clipped",), score_map=False, workers=1, threads=2
    )
    assert [s.stage for s in plan.stages] == ["directions", "scree"]
    assert plan.stage("scree").passes == 2  # the quantiles, the clipped means
    assert plan.parameters["n_components"] == 3
    assert "score_map" not in {p.stage for p in plan.split.planned}
    with pytest.raises(ValueError, match="n_components"):
        plan_analysis(store, 0)
    with pytest.raises(ValueError, match="methods"):
        plan_analysis(store, methods=("mean",))


@pytest.mark.slow
def test_plan_analysis_runs_as_a_user_types_it(tmp_path):
    store = write_store(tmp_path)
    env = {**os.environ, "DASK_DASK_DPPCA__MACHINE_MODEL": str(tmp_path / "cfg" / "m.json")}

    def plan_line() -> str:
        done = subprocess.run(
            ["dask-dppca", "plan", "data.zarr", "--analysis"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return done.stdout

    out = plan_line()
    # The split table analyze would show, printed whole (it does not depend on the machine).
    assert dd.plan_analysis(store, machine=machine.DEFAULT_MODEL).split_text in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    assert lines[header].split()[:3] == ["stage", "passes", "tasks"]
    assert [line.split()[0] for line in lines[header + 1 : header + 4]] == [
        "directions",
        "scree",
        "score",
    ]
    assert f"k={analyze_defaults()['n_components']}," in lines[0]
    (source,) = [line for line in lines if line.startswith("machine model: ")]
    assert source.startswith("machine model: calibrated now: ")
    again = [line for line in plan_line().splitlines() if line.startswith("machine model: ")]
    assert again[0].startswith("machine model: calibrated on ")  # kept, reused


def test_a_plain_plan_keeps_a_fit_s_defaults_and_refuses_the_analysis_flags(
    tmp_path, model_folder, counted_calibration, capsys
):
    from dask_dppca.cli import main
    from dask_dppca.cli.plan import FIT_DEFAULTS

    store = write_store(tmp_path)
    assert main(["plan", store, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["privacy"]["epsilon"] == FIT_DEFAULTS["epsilon"]
    assert planned["privacy"]["delta"] == FIT_DEFAULTS["delta"]
    assert planned["time"]["machine_model"].startswith("calibrated now: ")
    assert main(["plan", store, "--methods", "clipped"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "go with --analysis" in line
    assert main(["plan", store, "--analysis", "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["parameters"]["epsilon"] == analyze_defaults()["epsilon"]
    assert described["machine_model"].startswith("calibrated on ")
    assert counted_calibration == [1]
