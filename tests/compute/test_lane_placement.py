"""Lanes spread over the workers: each lane's tasks follow a reader key of its own.

A Zarr input's blocks are read inside the lane tasks through a reader that is a Dask key.
With one reader key for every lane the scheduler put every lane task where that key was
(2 workers: all 52 lane tasks of 300 blocks on one of them; here all 34 of this fit's);
a reader per lane is a root of its own, and the roots are spread.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import zarr
from distributed import get_task_stream

import dask_dppca as dd

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.filterwarnings(
        "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
    ),
]


def test_a_zarr_fit_runs_its_lanes_on_both_workers(cluster_client, tmp_path):
    path = str(tmp_path / "x.zarr")
    x = np.random.default_rng(8).standard_normal((102_400, 32))  # test data (seeds: tests only)
    zarr.open_array(path, mode="w", shape=x.shape, chunks=(512, 32), dtype="f8")[:] = x
    cluster_client.wait_for_workers(2, timeout=60)
    workers = set(cluster_client.scheduler_info()["workers"])
    assert len(workers) == 2
    with get_task_stream(cluster_client) as stream:
        design = dd.RegularDesign(k=1, block_size=512)  # the chunks are the blocks
        dd.DPPCA(2, design=design, scheduler=cluster_client, random_state=0).fit(path)
    lane_tasks = collections.Counter(
        record["worker"] for record in stream.data if str(record["key"]).startswith("dppca-pairs-")
    )
    total = sum(lane_tasks.values())
    assert total >= 2  # a worker task a worker (each running its segments on its threads)
    assert set(lane_tasks) == workers, lane_tasks
    assert min(lane_tasks.values()) >= 0.25 * total, lane_tasks
