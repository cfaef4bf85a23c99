"""No hang: a fit on a cluster that cannot make progress fails after the configured wait.

Reproduces the 23-minute hang of the larger-than-memory test: a worker whose baseline
(unmanaged) memory sits above Dask's pause threshold pauses for good; spilling frees
nothing.  Nothing may be released and no budget charged.
"""

from __future__ import annotations

import threading
import time

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.core import Status

import dask_dppca as dd
from dask_dppca.compute import STALL_TIMEOUT_KEY
from dask_dppca.compute import waits as dppca_cluster
from dask_dppca.compute.failures import MEMORY_EVENT
from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY
from tests.live import one_trusted_worker

pytestmark = pytest.mark.cluster
STALL_SECONDS = 3.0
X = np.random.default_rng(2).standard_t(1, size=(3000, 5))  # test data only


def _fit_fails_clearly(client: Client) -> None:
    budget = dd.PrivacyBudget(epsilon=5.0, delta=1e-5)
    started = time.monotonic()
    with dask.config.set({STALL_TIMEOUT_KEY: STALL_SECONDS}), budget:
        with pytest.raises(dd.ClusterStalledError, match="nothing was released") as stalled:
            dd.DPPCA(2, scheduler=client).fit(X)
    elapsed = time.monotonic() - started
    assert "paused" in str(stalled.value) and STALL_TIMEOUT_KEY in str(stalled.value)
    assert STALL_SECONDS <= elapsed < STALL_SECONDS + 20
    assert budget.releases == 0
    assert not client.get_metadata(list(RELEASE_METADATA_KEY), default={})


def test_fit_on_a_cluster_whose_only_worker_is_paused_fails_within_the_wait():
    # The memory monitor would resume a worker paused by hand: switch pausing off there.
    with (
        dask.config.set({"distributed.worker.memory.pause": False}),
        one_trusted_worker() as client,
    ):
        client.run(lambda dask_worker: setattr(dask_worker, "status", Status.paused))
        _fit_fails_clearly(client)
        # Unpaused, the same cluster fits: the error was the pause, not the set-up.
        client.run(lambda dask_worker: setattr(dask_worker, "status", Status.running))
        est = dd.DPPCA(2, scheduler=client).fit(X)
        assert est.components_.shape == (2, 5)


def test_a_dataframe_whose_rows_cannot_be_counted_fails_within_the_wait():
    """n of a dask DataFrame is counted on the cluster before anything is planned: on a
    stalled cluster that count fails within the stall timeout too (it once waited without
    a bound), before any budget is charged."""
    import dask.dataframe as ddf
    import pandas as pd

    frame = ddf.from_pandas(pd.DataFrame(X, columns=list("abcde")), npartitions=4)
    with (
        dask.config.set({"distributed.worker.memory.pause": False}),
        one_trusted_worker() as client,
    ):
        client.run(lambda dask_worker: setattr(dask_worker, "status", Status.paused))
        budget = dd.PrivacyBudget(epsilon=5.0, delta=1e-5)
        started = time.monotonic()
        with dask.config.set({STALL_TIMEOUT_KEY: STALL_SECONDS}), budget:
            with pytest.raises(dd.ClusterStalledError, match="counting the DataFrame's rows"):
                dd.DPPCA(2, scheduler=client).fit(frame)
        assert STALL_SECONDS <= time.monotonic() - started < STALL_SECONDS + 20
        assert budget.releases == 0
        client.run(lambda dask_worker: setattr(dask_worker, "status", Status.running))
        assert dd.DPPCA(2, scheduler=client).fit(frame).n_samples_ == len(X)


def test_worker_whose_baseline_memory_is_over_the_pause_threshold_fails_the_fit():
    """The real cause: memory limit below the worker process's own footprint."""
    never_kill = {
        "distributed.worker.memory.terminate": False,
        "distributed.worker.memory.monitor-interval": "50ms",
    }
    with (
        dask.config.set(never_kill),
        one_trusted_worker(memory_limit="64MiB") as client,
    ):
        deadline = time.monotonic() + 30
        while not _statuses(client) == {"paused"}:
            assert time.monotonic() < deadline, f"the worker never paused: {_statuses(client)}"
            time.sleep(0.2)
        _fit_fails_clearly(client)


def _statuses(client: Client) -> set[str]:
    return {w["status"] for w in client.scheduler_info(n_workers=-1)["workers"].values()}


def _finishes_soon(i: int) -> int:
    time.sleep(0.002 * (i % 7))
    return i


def test_results_arriving_as_a_poll_ends_are_returned(monkeypatch):
    """The bounded wait never loses a result to its own polling.

    A result arriving just as ``future.result(timeout=...)`` expires left distributed's
    ``sync`` with UnboundLocalError on Python 3.11 (seen once in CI, in the notebook).
    Polling every 0.5 ms makes that moment common: the old wait failed 139 of 400.
    """
    monkeypatch.setattr(dppca_cluster, "_POLL", 0.0005)
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        for i in range(200):
            future = client.submit(_finishes_soon, i, pure=False)
            assert dppca_cluster.await_result(client, future, f"task {i}") == i


def test_a_stall_names_the_memory_restarts_during_its_wait():
    """Workers restarted in a loop over their memory limit leave the cluster without a
    worker: the stall names the restarts, those recorded during its own wait only (CI
    saw "the cluster has no workers" with no word of memory)."""
    restart = {"action": "worker-restart-memory", "worker": "tcp://10.0.0.9:1", "pid": 7}
    with (
        dask.config.set({STALL_TIMEOUT_KEY: 1.0}),
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.log_event(MEMORY_EVENT, {**restart, "rss": 900 * 2**20})  # before the wait
        time.sleep(0.05)
        with pytest.raises(dd.ClusterStalledError) as before:
            dppca_cluster.await_result(client, client.submit(abs, -1), "first wait")
        assert "the cluster has no workers" in str(before.value)
        assert "memory" not in str(before.value)

        during = threading.Timer(0.3, client.log_event, (MEMORY_EVENT, {**restart, "rss": 2**28}))
        during.start()
        with pytest.raises(dd.ClusterStalledError) as stalled:
            dppca_cluster.await_result(client, client.submit(abs, -2), "second wait")
        during.join()
    text = str(stalled.value)
    assert "restarted workers 1 time(s) for exceeding their memory limit" in text, text
    assert "(up to 256 MiB)" in text and "--memory-limit" in text, text
