"""A Zarr store several times larger than the workers' total memory_limit completes,
each block is read once, and worker memory stays bounded."""

from __future__ import annotations

import collections
import threading

import numpy as np
import psutil
import pytest
import zarr
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

import dask_dppca as dd
from dask_dppca.io import as_dask_array

MEMORY_LIMIT = 350 * 2**20        # per worker; a bare worker process already uses ~210 MiB
ROWS, FEATURES, BLOCK = 360_448, 512, 1024   # 1.41 GiB of float64: 4x the memory limit


class _CountBlockReads(WorkerPlugin):
    """Counts, on the worker, how often each input block is produced."""

    def __init__(self, prefix):
        self.prefix = prefix

    def setup(self, worker):
        self.worker = worker
        worker.dppca_block_reads = collections.Counter()

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory" and start == "executing" and isinstance(key, tuple) \
                and str(key[0]).startswith(self.prefix):
            self.worker.dppca_block_reads[key[1]] += 1


def _write_store(path):
    store = zarr.open_array(path, mode="w", shape=(ROWS, FEATURES), chunks=(BLOCK, FEATURES),
                            dtype="f8")
    base = np.random.default_rng(0).standard_normal((BLOCK, FEATURES))  # test data only
    for k, start in enumerate(range(0, ROWS, BLOCK)):
        store[start:start + BLOCK] = base + 0.01 * k   # distinct rows, cheap to write
    return store


@pytest.mark.cluster
def test_store_four_times_larger_than_memory_completes(tmp_path):
    path = str(tmp_path / "big.zarr")
    _write_store(path)
    assert ROWS * FEATURES * 8 >= 4 * MEMORY_LIMIT
    design = dd.RegularDesign(k=1, block_size=BLOCK, seed=0)
    with LocalCluster(n_workers=1, threads_per_worker=2, memory_limit=MEMORY_LIMIT,
                      dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as client:
        prefix = as_dask_array(path).name
        client.register_plugin(_CountBlockReads(prefix), name="count-block-reads")
        peak = [0.0]
        done = threading.Event()

        def watch():
            while not done.wait(0.2):
                rss = client.run(lambda: psutil.Process().memory_info().rss)
                peak[0] = max(peak[0], *rss.values())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            est = dd.DPPCA(n_components=2, design=design, scheduler=client).fit(path)
        finally:
            done.set()
            watcher.join()
        reads = client.run(lambda dask_worker: dict(dask_worker.dppca_block_reads))
    counts = collections.Counter()
    for per_worker in reads.values():
        counts.update(per_worker)
    n_blocks = ROWS // BLOCK
    assert len(counts) == n_blocks
    assert max(counts.values()) == 1          # every block read exactly once
    assert peak[0] < MEMORY_LIMIT              # never near the limit, nothing killed
    assert est.privacy_["n_pairs"] == n_blocks * (BLOCK * (BLOCK - 1) // 2) + n_blocks * BLOCK**2 // 2
