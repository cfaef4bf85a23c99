"""A worker killed by its memory limit while reading is reported as what it is.

Before, any ``KilledWorker`` read "the trusted worker died while releasing" (workers at
250 MB on a 391 MB store: the read task killed 4 workers).  The error names the task
that died, that its workers exceeded their memory limit, and what to change.
"""

from __future__ import annotations

import dask
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.compute import ClusterStalledError, WorkerDiedError
from tests.live import one_trusted_worker

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings(
        "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
    ),
]


def test_a_read_over_the_memory_limit_names_the_read_and_the_limit(tmp_path):
    # 8e6 x 12 float64 in one chunk: 732 MiB decoded by every read of a block in it
    # (written: a missing chunk read as fill values allocates only the block).  The
    # limit sits well above a worker's own footprint (about 130 MiB once numba and the
    # kernel are imported, more with the read's buffers): under that the worker is killed
    # at rest, while the fit sets it up, and the read never runs.
    path = str(tmp_path / "big.zarr")
    zarr.open_array(path, mode="w", shape=(8_000_000, 12), chunks=(8_000_000, 12), dtype="f8")[
        :
    ] = 1.0
    # One death is enough to tell (Dask would try 4 workers by default).  The stall wait
    # is longer than the default: on a loaded machine the restarted worker stayed in
    # "init" past 30 s, and the stall, not the death, ended the fit.
    config = {"distributed.scheduler.allowed-failures": 0, "dask-dppca.stall-timeout": 150}
    with dask.config.set(config):
        with one_trusted_worker(memory_limit="450MiB") as client:
            with pytest.raises(WorkerDiedError) as caught:
                dd.DPPCA(1, scheduler=client, random_state=0).fit(path)
    text = str(caught.value)
    assert "\n" not in text
    assert "exceeding its worker's memory limit" in text, text
    assert "the read of the store" in text or "block-pair task" in text, text
    assert "--memory-limit" in text and "nothing was released" in text
    assert "trusted worker died while releasing" not in text


def test_workers_killed_at_rest_end_the_fit_in_a_clear_error(tmp_path):
    # Under a worker's own footprint the nanny kills it as soon as the fit imports the
    # kernel there: 62 MiB at rest, about 127 MiB with the kernel (numba), over the 95 MiB
    # at which the nanny ends a worker of 100 MiB.  Which clear error ends the fit
    # depends on timing: the setup's broadcast fails at every try (the workers died
    # setting up), the first task is killed on every try (it imports the kernel), or a
    # try lands between deaths and the stall ends the fit, with no worker at all or one
    # still in "init" (all seen); either way the memory is named.  Never a closed comm.
    path = str(tmp_path / "small.zarr")
    zarr.open_array(path, mode="w", shape=(1000, 4), chunks=(1000, 4), dtype="f8")
    with dask.config.set({"dask-dppca.stall-timeout": 10}):
        with one_trusted_worker(memory_limit="100MiB") as client:
            with pytest.raises((WorkerDiedError, ClusterStalledError)) as caught:
                dd.DPPCA(1, scheduler=client, random_state=0).fit(path)
    text = str(caught.value)
    assert "\n" not in text
    if caught.type is WorkerDiedError:
        # killed setting up, or (the setup imports little now) unpickling the first task
        assert "--memory-limit" in text, text
        assert (
            "before any of its tasks ran" in text and "nothing was read or released" in text
        ) or (
            "for exceeding its worker's memory limit" in text
            and "nothing was released and no noise was drawn" in text
        ), text
    else:
        assert "for exceeding their memory limit" in text and "--memory-limit" in text, text
        assert "nothing was released and no noise was drawn" in text, text
