"""The plan: a fit's design, blocks, tasks, memory and time from metadata alone.

* It reads no chunk (reads counted at the Zarr reader; a store whose chunk files are
  deleted plans the same) and never touches a privacy budget or ledger.
* Plan and fit agree on the design, the blocks and the task count (the fit's graph is
  captured as the estimator builds it and its tasks counted after Dask's optimisation).
* A plan that cannot fit a worker's memory is refused with the number it needs, and that
  number suffices.
* The machine model is saved, loaded and defaulted.

Seeds generate TEST data and (``random_state``) NOT private noise.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca import graph as graphs
from dask_dppca.decomposition import estimator
from dask_dppca.design import RegularDesign, plan_blocks
from dask_dppca.io import open_records, zarr_blocks
from dask_dppca.planning.fit_plan import PlanDoesNotFitError
from dask_dppca.planning.machine import (
    DEFAULT_MODEL,
    MODEL_PATH_KEY,
    MachineModel,
    load_machine_model,
    save_machine_model,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning",
    "ignore::dask_dppca.privacy.mechanisms.advice.PrivacyWarning",
)


def _store(folder: Path, n: int, d: int, chunk: int, name: str = "x.zarr") -> str:
    path = folder / name
    z = zarr.create_array(str(path), shape=(n, d), chunks=(chunk, d), dtype="f8")
    z[:] = np.random.default_rng(n + d).standard_t(2, size=(n, d))  # TEST data
    return str(path)


@pytest.fixture
def reads(monkeypatch):
    """Every read at the Zarr reader, counted (the fit's reads all go through it)."""
    count = {"reads": 0}
    original = zarr_blocks.ZarrBlocks.__getitem__

    def counted(self, selection):
        count["reads"] += 1
        return original(self, selection)

    monkeypatch.setattr(zarr_blocks.ZarrBlocks, "__getitem__", counted)
    return count


def test_the_plan_reads_no_chunk_and_plans_a_store_without_chunks(tmp_path, reads):
    path = _store(tmp_path, 6000, 5, 1000)
    est = dd.DPPCA(n_components=2, scheduler="synchronous", random_state=0)
    plan = est.plan(path)
    assert reads["reads"] == 0
    # The counter does count: a fit reads every block.
    est.fit(path)
    assert reads["reads"] >= plan.design["n_blocks"]
    # Every chunk file gone, only the metadata left: the same plan.
    chunks = Path(path) / "c"
    assert chunks.is_dir()
    shutil.rmtree(chunks)
    reads["reads"] = 0
    again = est.plan(path)
    assert reads["reads"] == 0
    assert again.describe() == plan.describe()
    with pytest.raises(zarr_blocks.MissingChunkError):
        est.fit(path)


def test_the_plan_never_touches_a_ledger(tmp_path, monkeypatch):
    from dask_dppca.privacy.budget import charging

    def no_reservation(*args, **kwargs):
        raise AssertionError("the plan reserved a release")

    monkeypatch.setattr(charging, "reserve_release", no_reservation)
    monkeypatch.setattr(estimator, "reserve_release", no_reservation)
    ledger = tmp_path / "study.ledger"
    budget = dd.PrivacyBudget(epsilon=2, delta=1e-5, ledger=ledger, create=True)
    before = ledger.read_bytes()
    remaining = budget.remaining()
    with budget:
        dd.DPPCA(n_components=2, scheduler="synchronous").plan(np.zeros((500, 4)))
    assert ledger.read_bytes() == before
    assert budget.remaining() == remaining
    assert budget.spent == [] and budget.releases == 0


def _fit_graph_tasks(monkeypatch, est, X) -> int:
    """Tasks of the graph the fit builds (after Dask's optimisation), plus the release."""
    built = []
    original = graphs.kernel_sum_graph  # fit imports it from the package when it runs

    def capture(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(graphs, "kernel_sum_graph", capture)
    est.fit(X)
    (lane_sums,) = built
    graph = dask.base.collections_to_expr(lane_sums, optimize_graph=True).__dask_graph__()
    return len(graph) + 1


@pytest.mark.parametrize(
    ("n", "d", "chunk", "design"),
    [
        (3000, 4, 500, "auto"),  # chunks merged into blocks, read in their tasks
        (9000, 3, 3000, "auto"),  # chunks kept as blocks
        (4000, 5, None, "auto"),  # numpy: blocks by the block rule
        (20000, 4, 1000, RegularDesign(k=1, block_size=1000)),  # each block one task's
        (20000, 4, 1000, RegularDesign(k=3, block_size=600)),  # chunks rechunked
        (12000, 3, 1000, RegularDesign(k=2, block_size=2000, seed=5)),
    ],
)
def test_plan_and_fit_agree_on_design_blocks_and_tasks(tmp_path, monkeypatch, n, d, chunk, design):
    X = (
        np.random.default_rng(n).standard_normal((n, d))  # TEST data
        if chunk is None
        else _store(tmp_path, n, d, chunk)
    )
    est = dd.DPPCA(n_components=2, design=design, scheduler="threads", random_state=0)
    plan = est.plan(X)
    tasks = _fit_graph_tasks(monkeypatch, est, X)
    report = est.privacy_
    assert plan.design["design"] == report["design"]
    for key in ("n_blocks", "n_block_pairs", "n_pairs", "max_degree", "tile_rows"):
        assert plan.design[key] == report[key], key
    assert plan.n_tasks == tasks
    assert plan.privacy["sigma"] == report["sigma"]


def test_a_plan_over_the_memory_limit_is_refused_with_the_number_it_needs(tmp_path):
    path = _store(tmp_path, 8000, 6, 1000)
    est = dd.DPPCA(n_components=2)
    with pytest.raises(PlanDoesNotFitError, match="memory limit of at least") as refused:
        est.plan(path, workers=2, threads=2, memory_limit="64MiB")
    plan = refused.value.plan
    assert not plan.fits
    peak, pause = plan.peak_worker_bytes, plan.memory["pause_fraction"]
    needed = math.ceil(peak / pause)
    shown = str(refused.value).split("a memory limit of at least ")[1].split(" MiB")[0]
    assert needed / 2**20 <= float(shown) < needed / 2**20 * 1.01  # rounded up, 3 digits
    assert est.plan(path, workers=2, threads=2, memory_limit=needed).fits
    assert not est.plan(path, workers=2, threads=2, memory_limit=needed - 64, check=False).fits
    # The memory counts what docs/operations.md says a worker holds.
    assert plan.memory["parts"]["baseline"] == DEFAULT_MODEL.worker_baseline_bytes
    assert plan.memory["per_task_bytes"] >= 2 * 8 * plan.design["block_rows"] * 6


def test_a_plan_over_the_scheduler_s_task_limit_says_which_blocks_fit(tmp_path, monkeypatch):
    from dask_dppca.planning import fit_plan

    monkeypatch.setattr(fit_plan, "SCHEDULER_TASK_LIMIT", 20)
    est = dd.DPPCA(design=RegularDesign(k=1, block_size=500))
    plan = est.plan(np.zeros((20000, 3)), workers=1, threads=2, check=False)
    assert plan.n_tasks > 20
    (problem,) = plan.problems
    assert f"the graph has {plan.n_tasks} tasks, above the 20" in problem
    rows = int(problem.split("blocks of at least ")[1].split(" rows")[0])
    assert rows >= 500 * plan.n_tasks / 20


def test_the_plan_predicts_accuracy_for_a_spectrum_or_a_public_pilot():
    spectrum = [8.0, 4.0, 1.0, 1.0, 1.0, 1.0]
    est = dd.DPPCA(n_components=2, scheduler="synchronous")
    X = np.zeros((20000, 6))
    stated = est.plan(X, spectrum=spectrum).accuracy
    assert 0 < stated["sin_theta_p50"] <= stated["sin_theta_p90"] < 1
    more = est.plan(np.zeros((80000, 6)), spectrum=spectrum).accuracy
    assert more["sin_theta_p50"] < stated["sin_theta_p50"]  # more records, less error
    pilot = np.random.default_rng(0).standard_normal((4000, 6)) * np.sqrt(spectrum)  # public
    from_pilot = est.plan(X, pilot=pilot).accuracy
    assert from_pilot["sin_theta_p50"] == pytest.approx(stated["sin_theta_p50"], rel=0.3)


def test_the_plan_s_text_and_json_say_the_same(tmp_path):
    plan = dd.DPPCA().plan(np.zeros((3000, 4)), workers=3, threads=4, memory_limit="2GiB")
    text = str(plan)
    data = json.loads(plan.to_json())
    assert data["graph"]["n_tasks"] == plan.n_tasks
    assert f"= {plan.n_tasks} tasks" in text
    assert "cluster: 3 worker(s) x 4 thread(s), memory limit 2 GiB" in text
    assert data["cluster"]["n_threads"] == 12 and data["fits"] is True


def test_bad_plan_parameters_name_the_parameter():
    est = dd.DPPCA()
    with pytest.raises(ValueError, match="^memory_limit:"):
        est.plan(np.zeros((100, 3)), workers=1, threads=1, memory_limit="lots")
    with pytest.raises(ValueError, match="^workers:"):
        est.plan(np.zeros((100, 3)), workers=2)
    with pytest.raises(ValueError, match="^threads_per_worker:"):
        est.plan(np.zeros((100, 3)), workers=2, threads=0)
    with pytest.raises(ValueError, match="^pilot:"):
        est.plan(np.zeros((100, 3)), pilot=np.zeros((10, 4)))


# -- the machine model ----------------------------------------------------------------


def test_the_machine_model_is_saved_loaded_and_defaulted(tmp_path):
    path = tmp_path / "sub" / "machine.json"
    with dask.config.set({MODEL_PATH_KEY: str(path)}):
        assert load_machine_model() is DEFAULT_MODEL  # none saved
        model = MachineModel({8: 5e8, 64: 1e8}, {"local/zstd": 4e8}, 1e-3, 0.2, 2**28, "test")
        assert save_machine_model(model) == path
        loaded = load_machine_model()
    assert loaded == model and loaded.path == str(path)
    # Between widths: log-log; the work per pair grows with d, so the rate falls.
    assert model.pair_rate(8) == 5e8 and model.pair_rate(64) == 1e8
    assert 1e8 < model.pair_rate(20) < 5e8
    assert model.pair_rate(128) == pytest.approx(5e7)
    assert model.read_rate("s3", "zstd") == (4e8, "local/zstd")
    path.write_text('{"kernel_pairs_per_second": {"8": -1}}')
    with pytest.raises(ValueError, match="machine model: .*bench --save"):
        load_machine_model(path)


def test_the_row_cost_is_saved_interpolated_and_checked(tmp_path):
    path = tmp_path / "machine.json"
    model = MachineModel(
        {8: 5e8},
        {"memory": 1e10},
        1e-3,
        0.2,
        2**28,
        "test",
        kernel_row_seconds={8: 1e-7, 128: 1e-6},
    )
    save_machine_model(model, path)
    assert load_machine_model(path) == model
    assert model.row_cost(4) == 1e-7 and model.row_cost(128) == 1e-6
    assert 1e-7 < model.row_cost(32) < 1e-6
    assert model.row_cost(256) == pytest.approx(2e-6)  # scaled by d beyond the widest
    assert MachineModel({8: 5e8}, {"memory": 1e10}, 1e-3, 0.2, 2**28).row_cost(32) == 0.0
    saved = model.describe()
    saved["kernel_row_seconds"] = {"8": 0.0}
    path.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="row costs"):
        load_machine_model(path)


def test_a_plan_charges_each_pair_of_blocks_its_rows():
    """Rows of every block pair of every task, times the row cost, on top of the pairs: a
    within-block pair has its block's rows, a cross-block pair both blocks'."""
    bare = MachineModel({4: 1e9}, {"memory": 1e10}, 1e-4, 0.1, 2**27, "bare")
    costly = dataclasses.replace(bare, kernel_row_seconds={4: 1e-5})
    design = dd.RegularDesign(k=2, block_size=1000)
    est = dd.DPPCA(scheduler="synchronous", design=design)
    X = np.zeros((20000, 4))
    with_rows, without = est.plan(X, machine=costly), est.plan(X, machine=bare)
    threads = with_rows.cluster.n_threads
    records = open_records(X)
    _, plan = plan_blocks(*records.shape, records.row_chunks, design, threads)
    sizes = plan.block_sizes
    rows = sum(
        sizes[i] if i == j else sizes[i] + sizes[j] for task in plan.tasks() for i, j in task
    )
    assert rows > 20000  # cross-block pairs count both blocks
    extra = (with_rows.time["pair_seconds"] - without.time["pair_seconds"]) * threads
    assert extra == pytest.approx(rows * 1e-5, rel=1e-9)


def test_a_plan_uses_the_saved_machine_model(tmp_path):
    fast = MachineModel({4: 1e9}, {"memory": 1e10}, 1e-4, 0.1, 2**27, "fast")
    slow = MachineModel({4: 1e7}, {"memory": 1e10}, 1e-4, 0.1, 2**27, "slow")
    save_machine_model(slow, tmp_path / "slow.json")
    est = dd.DPPCA(scheduler="synchronous")
    X = np.zeros((20000, 4))
    quick = est.plan(X, machine=fast)
    late = est.plan(X, machine=str(tmp_path / "slow.json"))
    assert late.time["machine_model"] == "slow"
    pair_work = quick.design["n_pairs"] / 1e7 - quick.design["n_pairs"] / 1e9
    assert late.wall_seconds - quick.wall_seconds == pytest.approx(pair_work, rel=0.05)


def test_a_cluster_shape_reads_a_running_cluster():
    from distributed import Client, LocalCluster

    from dask_dppca.compute.shape import cluster_shape

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            protocol="tcp://",
            memory_limit="1GiB",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        shape = cluster_shape(client)
        by_address = cluster_shape(cluster.scheduler_address)  # as --scheduler ADDRESS
    assert (shape.workers, shape.threads_per_worker, shape.memory_limit) == (2, 1, 2**30)
    assert shape.n_threads == 2
    assert (by_address.workers, by_address.threads_per_worker) == (2, 1)
    assert by_address.memory_limit == 2**30 and cluster.scheduler_address in by_address.source


def test_the_plan_names_why_its_reads_exceed_the_store(tmp_path):
    """Chunks larger than the blocks, or blocks read by several tasks (a worker task a
    worker, each reading the blocks its segments use): each note names its own cause (a
    store in the blocks' chunks is never told to rechunk)."""
    x = np.random.default_rng(3).standard_normal((4000, 4))  # test data only
    big = str(tmp_path / "big.zarr")
    zarr.open_array(big, mode="w", shape=x.shape, chunks=(2000, 4), dtype="f8")[:] = x
    plan = dd.DPPCA(2, design=dd.RegularDesign(k=1, block_size=500)).plan(big, workers=1, threads=2)
    assert any("chunks are larger than the design's blocks" in n for n in plan.notes)
    blocks = str(tmp_path / "blocks.zarr")
    y = np.random.default_rng(4).standard_normal((20000, 4))  # test data only
    zarr.open_array(blocks, mode="w", shape=y.shape, chunks=(5000, 4), dtype="f8")[:] = y
    plan = dd.DPPCA(2, design="complete").plan(blocks, workers=1, threads=2)
    assert plan.design["n_blocks"] == 4, plan.design
    assert plan.graph["worker_tasks"] == 1 and plan.graph["block_reads"] == 4  # once each
    assert not plan.notes
    plan = dd.DPPCA(2, design="complete").plan(blocks, workers=2, threads=2)
    assert not any("chunks are larger" in n for n in plan.notes)
    assert any("each task reads the blocks it uses" in n for n in plan.notes), plan.notes
