"""No fit is answered from another's keys: every key of a fit is unique to that fit.

The read keys were ``tokenize(label, shape, dtype, chunk_shape, allow_fill_values)`` and
the lanes' keys followed from them: nothing depended on the store's contents.  A store
rewritten with the same shape, while a cluster still held keys of its earlier reads (a
persisted ``transform``, another client's fit), was refitted from those stale blocks.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import distributed
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.compute.cluster import embedded_client
from dask_dppca.io import open_records
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

pytestmark = pytest.mark.cluster

SEED = 4  # TEST-ONLY fixed noise, so that two processes' fits can be compared


def _write(path, seed):
    x = np.random.default_rng(seed).standard_t(3, size=(3000, 4))  # test data
    zarr.open_array(path, mode="w", shape=x.shape, chunks=(500, 4), dtype="f8")[:] = x


def _fit(store):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(2, random_state=SEED).fit(store)


def test_a_store_rewritten_in_place_refits_like_a_fresh_process(tmp_path):
    store = str(tmp_path / "x.zarr")
    _write(store, seed=1)
    client = embedded_client()  # the default fit's cluster
    first = _fit(store)
    # The store's reads held on the cluster, as a fit still running holds the blocks its
    # lanes share (or a user's persisted read of the store).
    held = client.persist(open_records(store).array)
    distributed.wait(held, timeout=60)
    _write(store, seed=2)  # the same shape and chunks, new contents
    refit = _fit(store)
    fresh = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            "import sys, dask_dppca as dd; "
            f"e = dd.DPPCA(2, random_state={SEED}).fit(sys.argv[1]); "
            "print(' '.join(float(v).hex() for v in e.components_.ravel()))",
            store,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    want = np.array([float.fromhex(v) for v in fresh.stdout.split()]).reshape(2, 4)
    assert np.array_equal(refit.components_, want)
    assert not np.array_equal(refit.components_, first.components_)
    del held


class _Keys(distributed.diagnostics.plugin.SchedulerPlugin):
    """Every key the scheduler is asked to compute or finds in memory for a new graph."""

    def __init__(self) -> None:
        self.keys: set = set()

    def update_graph(self, scheduler, *, keys, **kwargs) -> None:
        self.keys |= set(keys)

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish in ("waiting", "processing", "memory") and start != "processing":
            self.keys.add(key)  # computed for this graph, or answered from memory


def test_two_fits_of_one_store_share_no_key(tmp_path):
    store = str(tmp_path / "x.zarr")
    _write(store, seed=3)
    scheduler = embedded_client().cluster.scheduler
    seen = []
    for _ in range(2):
        plugin = _Keys()
        scheduler.add_plugin(plugin, name="dppca-test-keys")
        try:
            _fit(store)
        finally:
            scheduler.remove_plugin(name="dppca-test-keys")
        seen.append(plugin.keys)
    assert seen[0] and seen[1]
    assert seen[0] & seen[1] == set()
