"""A worker killed by its memory limit while reading is reported as what it is.

Before, any ``KilledWorker`` read "the trusted worker died while releasing" (workers at
250 MB on a 391 MB store: the read task killed 4 workers).  The error names the task
that died, that its workers exceeded their memory limit, and what to change.
"""

from __future__ import annotations

import dask
import pytest
import zarr
from distributed import Client, LocalCluster

import dask_dppca as dd
from dask_dppca.compute import TRUSTED_RESOURCE, WorkerDiedError

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::dask_dppca.privacy.noise.NonPrivateRandomStateWarning"),
]


def test_a_read_over_the_memory_limit_names_the_read_and_the_limit(tmp_path):
    # 4e6 x 12 float64 in one chunk: 366 MiB read at once, never written (fill values).
    path = str(tmp_path / "big.zarr")
    zarr.open_array(path, mode="w", shape=(4_000_000, 12), chunks=(4_000_000, 12), dtype="f8")
    # One death is enough to tell (Dask would try 4 workers by default).  The stall wait
    # is longer than the default: on a loaded machine the restarted worker stayed in
    # "init" past 30 s, and the stall, not the death, ended the fit.
    config = {"distributed.scheduler.allowed-failures": 0, "dask-dppca.stall-timeout": 150}
    with dask.config.set(config):
        with (
            LocalCluster(
                n_workers=1,
                threads_per_worker=1,
                processes=True,
                memory_limit="200MiB",
                dashboard_address=None,
                resources={TRUSTED_RESOURCE: 1},
            ) as cluster,
            Client(cluster, set_as_default=False) as client,
        ):
            with pytest.raises(WorkerDiedError) as caught:
                dd.DPPCA(1, scheduler=client, random_state=0).fit(path, allow_fill_values=True)
    text = str(caught.value)
    assert "\n" not in text
    assert "exceeding its worker's memory limit" in text, text
    assert "the read of the store" in text or "block-pair task" in text, text
    assert "--memory-limit" in text and "nothing was released" in text
    assert "trusted worker died while releasing" not in text
