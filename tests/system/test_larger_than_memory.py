"""A Zarr store several times larger than the worker's memory_limit completes, each block
is read once, and the worker's memory stays bounded.

The limit is sized from the worker's own baseline, measured first (a worker that has
imported numba, BLAS and the library holds 250-300 MiB before any data, and more on
some machines): with a fixed limit below ``baseline / 0.8`` the worker sat above Dask's
pause threshold before the fit began and paused forever.  Here the pause threshold lies
``BLOCK_BUDGET`` above the measured baseline, the store is ``STORE_OVER_LIMIT`` times the
limit, and the test asserts that the fit never needed more than ``BLOCK_BUDGET`` above
the baseline (so the worker never paused).
"""

from __future__ import annotations

import collections
import math
import threading

import dask
import numpy as np
import psutil
import pytest
import zarr
from distributed import Client, LocalCluster

import dask_dppca as dd
from dask_dppca.compute import TRUSTED_RESOURCE

# A block is 512 KiB of float64: the pair work per byte grows with BLOCK and the d x d
# work per row with FEATURES, so small ones read the store at the least compute.
FEATURES, BLOCK = 256, 256
# Two threads' block pairs, their scratch, 4 lanes' exact sums: ~90 MiB with 4 MiB
# blocks at d = 512, well under it here.
BLOCK_BUDGET = 128 * 2**20
STORE_OVER_LIMIT = 4  # the store is at least 4x the worker's memory_limit
WORKER = dict(
    n_workers=1,
    threads_per_worker=2,
    dashboard_address=":0",  # any free port
    resources={TRUSTED_RESOURCE: 1},
)  # the release runs on it, without a warning


def _count_block_reads(dask_worker):
    """On a worker: count the rows each Zarr read starts at (read tasks and the reads a
    block-pair task makes itself both go through ZarrBlocks)."""
    from dask_dppca.io.zarr_blocks import ZarrBlocks

    counts = collections.Counter()
    read = ZarrBlocks.__getitem__

    def counted(self, selection):
        counts[selection[0].start] += 1
        return read(self, selection)

    ZarrBlocks.__getitem__ = counted
    dask_worker.dppca_block_reads = counts


def _warm_baseline_rss(path):
    """RSS of a worker that has imported what a fit's tasks use and read one block."""

    def warm():
        import dask_dppca.compute.trusted.release
        import dask_dppca.graph  # noqa: F401  (the block-pair tasks)
        from dask_dppca.kernel import block_pair_sum

        block = zarr.open_array(path, mode="r")[:BLOCK]
        block_pair_sum(block[:64])
        return psutil.Process().memory_info().rss

    with LocalCluster(**WORKER) as cluster, Client(cluster, set_as_default=False) as client:
        return client.submit(warm, pure=False).result()


def _write_store(path, n_rows):
    store = zarr.create_array(
        path,
        overwrite=True,
        shape=(n_rows, FEATURES),
        chunks=(BLOCK, FEATURES),
        dtype="f8",
        compressors=None,  # random doubles do not compress: the read is the bytes
    )
    rng = np.random.default_rng(0)  # test data only
    for start in range(0, n_rows, BLOCK):
        # Independent rows: shifted copies of one block would be near duplicates across
        # blocks, pairs the kernel sends to its slower exact path.
        store[start : start + BLOCK] = rng.random((BLOCK, FEATURES))
    return store


@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_store_four_times_larger_than_memory_completes(tmp_path):
    path = str(tmp_path / "big.zarr")
    _write_store(path, BLOCK)
    baseline = _warm_baseline_rss(path)
    pause_fraction = dask.config.get("distributed.worker.memory.pause")
    memory_limit = int((baseline + BLOCK_BUDGET) / pause_fraction)
    n_blocks = math.ceil(STORE_OVER_LIMIT * memory_limit / (8 * FEATURES * BLOCK))
    n_blocks += n_blocks % 2  # a 1-regular block graph (k = 1) needs an even count
    rows = n_blocks * BLOCK
    _write_store(path, rows)
    assert rows * FEATURES * 8 >= STORE_OVER_LIMIT * memory_limit
    design = dd.RegularDesign(k=1, block_size=BLOCK, seed=0)
    with (
        LocalCluster(**WORKER, memory_limit=memory_limit) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.run(_count_block_reads)
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
    assert len(counts) == n_blocks
    assert max(counts.values()) == 1  # every block read exactly once
    # Bounded: the fit held at most BLOCK_BUDGET above the worker's own baseline, below
    # the pause threshold, whatever the store's size.
    assert peak[0] - baseline < BLOCK_BUDGET, (peak[0] / 2**20, baseline / 2**20)
    assert (
        est.privacy_["n_pairs"] == n_blocks * (BLOCK * (BLOCK - 1) // 2) + n_blocks * BLOCK**2 // 2
    )
