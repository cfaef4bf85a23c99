"""A paused worker (over its memory pause threshold) never leaves a stage waiting forever:
every wait of every stage ends in the stall timeout's one clear error.

A real LocalCluster of worker processes; a worker is paused as Dask pauses it (its
status set on the worker, which tells the scheduler).  Seeds make TEST DATA only.
"""

from __future__ import annotations

import time
import warnings

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_dppca as dd
from dask_dppca.compute import ClusterStalledError

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


def _pause(dask_worker) -> None:
    from distributed.core import Status

    dask_worker.status = Status.paused


@pytest.fixture
def cluster():
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            memory_limit=0,  # no memory monitor: a paused worker stays paused
        ) as plain,
        Client(plain) as client,
    ):
        plain.scale(2)
        client.wait_for_workers(2, timeout=60)
        trusted = sorted(client.scheduler_info()["workers"])[0]
        yield client, trusted


def _data() -> np.ndarray:
    rng = np.random.default_rng(6)  # test data only
    return rng.standard_normal((600, 4)) * np.array([3.0, 2.0, 1.0, 0.5])


@pytest.mark.parametrize("who", ["trusted", "every"])
def test_a_paused_worker_ends_the_analysis_with_the_stall_error(cluster, who):
    client, trusted = cluster
    workers = [trusted] if who == "trusted" else None
    client.run(_pause, workers=workers)
    started = time.monotonic()
    with (
        dask.config.set({"dask-dppca.stall-timeout": "3s"}),
        warnings.catch_warnings(),
        pytest.raises(ClusterStalledError) as stalled,
    ):
        warnings.simplefilter("ignore")
        dd.analyze(_data(), 2, epsilon=2.0, scheduler=client, trusted_worker=trusted)
    assert time.monotonic() - started < 60
    assert "paused" in str(stalled.value) and "\n" not in str(stalled.value)
