"""The scheduler killed mid-fit: one line, and the release charged if and only if it drew.

Real ``dask scheduler`` / ``dask worker`` processes (tests/live.py).  Before, the fit
raised a raw ``FutureCancelledError`` (a BaseException: the CLI printed 33 lines of
traceback under "unexpected error").  Now a :class:`SchedulerLostError` says that the
scheduler went away and what was released: nothing while the lanes were computing (the
release is submitted only after them, so no noise can have been drawn: the budget's
reservation is given back), a release that may have drawn once it was submitted (the
reservation stays spent).  A test-only :class:`~tests.system.test_drawn_once.CountingSampler`
tells whether the noise was drawn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import distributed
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.compute import SchedulerLostError
from dask_dppca.compute.trusted.tickets import abandon_release, mark_release_dispatched
from dask_dppca.decomposition import estimator
from dask_dppca.privacy import PrivacyBudget
from tests.live import PlainCluster
from tests.system.test_drawn_once import CountingSampler, noise_calls

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the workers unpickle the test sampler
    with PlainCluster(tmp_path, env=env) as plain:
        plain.add_worker("worker-a")
        plain.add_worker("trusted", "--resources", "dppca-trusted=1")
        yield plain


def _store(folder: Path, n: int) -> str:
    x = np.random.default_rng(8).standard_t(3, size=(n, 8))  # test data
    path = str(folder / "x.zarr")
    zarr.open_array(path, mode="w", shape=x.shape, chunks=(4000, 8), dtype="f8")[:] = x
    return path


@pytest.fixture
def store(tmp_path):
    """Lanes that compute for a few seconds on two 1-thread workers."""
    return _store(tmp_path, 16_000)


def _kill_scheduler(cluster: PlainCluster) -> None:
    os.killpg(cluster.processes[0].pid, signal.SIGKILL)
    cluster.processes[0].wait(timeout=30)


def _when(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the fit never got there"
        time.sleep(0.05)


def _fit_in_thread(address, store, budget):
    outcome = {}

    def run():
        try:
            # The client's reconnection attempts (10 s by default) cut short.
            with dask.config.set({"distributed.comm.timeouts.connect": "3s"}), budget:
                dd.DPPCA(2, scheduler=address, design="complete").fit(store)
            outcome["result"] = "released"
        except BaseException as error:  # what the user sees, whatever it is
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _one_line(error: BaseException) -> str:
    assert isinstance(error, SchedulerLostError), repr(error)
    text = str(error)
    assert "\n" not in text and "went away" in text
    return text


def test_the_scheduler_lost_while_the_lanes_compute_releases_nothing_and_charges_nothing(
    cluster, store, tmp_path, monkeypatch
):
    sampler = CountingSampler()
    monkeypatch.setattr(estimator, "_noise_sampler", lambda n_features, random_state: sampler)
    budget = PrivacyBudget(10.0, 1e-5, ledger=tmp_path / "ledger.sqlite", create=True)
    with distributed.Client(cluster.address, set_as_default=False) as watcher:
        thread, outcome = _fit_in_thread(cluster.address, store, budget)
        _when(lambda: any(watcher.processing().values()))  # block-pair tasks running
        assert not noise_calls(watcher, sampler)
    _kill_scheduler(cluster)
    thread.join(timeout=120)
    assert not thread.is_alive()
    text = _one_line(outcome["error"])
    assert "nothing was released and no noise was drawn" in text
    assert PrivacyBudget.open(tmp_path / "ledger.sqlite").releases == 0  # given back


def test_the_scheduler_lost_after_the_draw_keeps_the_release_charged(
    cluster, tmp_path, monkeypatch
):
    store = _store(tmp_path, 2000)  # quickly at the draw
    sampler = CountingSampler(pause=5.0)  # the release holds on after its draw
    monkeypatch.setattr(estimator, "_noise_sampler", lambda n_features, random_state: sampler)
    budget = PrivacyBudget(10.0, 1e-5, ledger=tmp_path / "ledger.sqlite", create=True)
    with distributed.Client(cluster.address, set_as_default=False) as watcher:
        thread, outcome = _fit_in_thread(cluster.address, store, budget)
        _when(lambda: len(noise_calls(watcher, sampler)) >= 2)  # drawn (both halves)
    _kill_scheduler(cluster)
    thread.join(timeout=120)
    assert not thread.is_alive()
    text = _one_line(outcome["error"])
    assert "may have drawn its noise, so it stays charged" in text
    assert PrivacyBudget.open(tmp_path / "ledger.sqlite").releases == 1  # spent


def test_the_cli_says_it_in_one_line(cluster, store, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    subprocess.run(
        [sys.executable, "-m", "dask_dppca.cli", "budget", "create", str(ledger), "--epsilon",
         "10", "--delta", "1e-5"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    with distributed.Client(cluster.address, set_as_default=False) as watcher:
        fit = subprocess.Popen(  # the client's reconnection attempts cut short
            [sys.executable, "-m", "dask_dppca.cli", "fit", store, "--scheduler",
             cluster.address, "--design", "complete", "--budget", str(ledger), "--output",
             str(tmp_path / "result.json")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"},
        )  # fmt: skip
        _when(lambda: any(watcher.processing().values()))
    _kill_scheduler(cluster)
    _, stderr = fit.communicate(timeout=120)
    lines = stderr.strip().splitlines()
    assert fit.returncode == 3 and len(lines) == 1, stderr
    assert lines[0].startswith("dask-dppca: error: SchedulerLostError: release ")
    assert "went away" in lines[0] and "nothing was released" in lines[0]
    assert PrivacyBudget.open(ledger).releases == 0


def test_a_restarted_scheduler_proves_nothing_about_a_submitted_release(cluster_client):
    """The tickets lived in the old scheduler's memory: after a restart the new one has
    none, which must not read as "never drew" (then a drawn release was cancelled)."""
    client = cluster_client
    mark_release_dispatched("fit-a", scheduler_id="a scheduler that went away")
    assert abandon_release("fit-a", client) is False
    mark_release_dispatched("fit-b", scheduler_id=client.scheduler_info()["id"])
    assert abandon_release("fit-b", client) is True  # the same scheduler: provable


@pytest.mark.parametrize("after", ["directions", "scree"])
def test_the_scheduler_lost_between_the_stages_of_an_analysis(
    cluster, tmp_path, monkeypatch, after
):
    """Killed after the directions' (or the scree's) release: one SchedulerLostError naming
    what was released, the released stages kept with it, the rest given back."""
    from dask_dppca.analysis.stages.score_map import PrivateScoreMapStage
    from dask_dppca.analysis.stages.scree import ScreeStage

    store = _store(tmp_path, 2000)
    ledger = tmp_path / "ledger.sqlite"
    PrivacyBudget(10.0, 1e-5, ledger=ledger, create=True)
    stage = ScreeStage if after == "directions" else PrivateScoreMapStage
    real_run = stage.run

    def run_after_a_kill(self, context):
        _kill_scheduler(cluster)
        return real_run(self, context)

    monkeypatch.setattr(stage, "run", run_after_a_kill)
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "3s"}),
        PrivacyBudget.open(ledger),
        pytest.raises(BaseException) as lost,
    ):
        dd.analyze(store, 2, epsilon=2.0, scheduler=cluster.address)
    error = lost.value
    text = _one_line(error)
    released = ["directions"] if after == "directions" else ["directions", "scree"]
    assert error.partial_analysis.meta["released_stages"] == released
    assert f"the analysis released {', '.join(released)}" in error.__notes__[0]
    states = {
        row.fit_id.rsplit(".", 1)[1]: row.state for row in PrivacyBudget.open(ledger)._ledger.rows()
    }
    assert [s for s, state in states.items() if state == "committed"] == released, (states, text)
    assert all(state == "cancelled" for s, state in states.items() if s not in released)
