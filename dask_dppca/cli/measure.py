"""Measuring the machine model (``dask-dppca bench --save``, benchmarks/bench_plan.py).

Measuring fits a small :class:`~dask_dppca.decomposition.estimator.DPPCA` (a fit's
fixed cost), so it lives on the bench side, above the estimator: the model itself
(:mod:`dask_dppca.planning.machine`) and the plans that read it import nothing of the
estimator.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..planning.machine import MachineModel, kernel_rate
from .measure_analysis import (
    best_seconds,
    noise_draw_seconds,
    scree_value_seconds,
    stage_fixed_seconds,
    start_seconds,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["measure_machine_model", "measure_reads"]


# -- measuring -------------------------------------------------------------------------


def measure_machine_model(
    widths: tuple[int, ...] = (8, 32, 128, 512),
    *,
    quick: bool = False,
    client: Any = None,
    analysis: bool = True,
) -> MachineModel:
    """Measure this machine's model (seconds; ``quick``: smaller loops).

    The kernel on one thread (a within-block sum, best of a few, in the thread's CPU
    time: the machine's rate, not its load at the moment) and its cost per call, Zarr
    reads of one thread from a local store per codec (none, zstd) and their cost per
    read (on one of ``client``'s workers when given), a no-op task's cost on a cluster
    (``client``'s, else a fresh in-process LocalCluster like the embedded one), a small
    fit's fixed cost there, and an idle worker's memory after that fit; with ``analysis``
    what an analysis adds (:mod:`~dask_dppca.cli.measure_analysis`: the scree's pair
    costs, a quantile scan's noise draw, each stage's fixed cost on that cluster).  Seeds
    generate benchmark data only.
    """
    if client is None:
        figures = _core_figures(widths, quick, analysis)
    else:
        first = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
        figures = client.run(_core_figures, widths, quick, analysis, workers=[first])[first]
    source = (
        f"measured on {platform.node() or 'this machine'} ({os.cpu_count()} CPUs) at "
        f"{datetime.now(UTC).isoformat(timespec='seconds')}"
    )
    with _measuring_client(client) as measuring:
        task, fixed, baseline = _cluster_costs(measuring, quick)
        model = MachineModel(
            task_seconds=task,
            fixed_seconds=fixed,
            worker_baseline_bytes=baseline,
            source=source,
            **figures,
        )
        if analysis:
            model = replace(model, stage_seconds=stage_fixed_seconds(measuring, model, quick))
    if analysis and client is None:  # the embedded cluster's start (no client: bench --save)
        model = replace(model, start_seconds=start_seconds() or 0.0)
    return model


def _kernel_row_seconds(d: int, quick: bool) -> float:
    """The kernel's cost per block row: a block of ``b`` fresh rows against one row, for
    two sizes ``b`` (the slope; the pairs are ``b``, negligible), median of several, in
    CPU time.  Fresh blocks each call, as in a fit (each block is read anew).
    """
    import numpy as np
    from threadpoolctl import threadpool_limits

    from ..kernel import block_pair_sum

    small, large, count = 128, (1024 if quick else 4096), (8 if quick else 20)
    rng = np.random.default_rng()  # benchmark data (any values, no seed)
    blocks = [rng.standard_normal((large, d)) for _ in range(count)]
    one = rng.standard_normal((1, d))
    block_pair_sum(blocks[0][:64])  # compile, or load from the cache

    def median_seconds(rows: int) -> float:
        times = []
        for block in blocks:
            started = time.thread_time()
            block_pair_sum(block[:rows], one)
            times.append(time.thread_time() - started)
        return float(np.median(times))

    with threadpool_limits(1):
        slope = (median_seconds(large) - median_seconds(small)) / (large - small)
    return max(slope, 1e-9)


def _kernel_call_seconds(d: int, rate: float, row_seconds: float) -> float:
    """The kernel's cost per call beyond its pairs and rows: two 128-row blocks, best of
    20, in CPU time.
    """
    import numpy as np

    from ..kernel import block_pair_sum

    x = np.random.default_rng().standard_normal((256, d))  # benchmark data (any values, no seed)
    best = math.inf
    for _ in range(20):
        started = time.thread_time()
        block_pair_sum(x[:128], x[128:])
        best = min(best, time.thread_time() - started)
    return max(0.0, best - 128 * 128 / rate - 256 * row_seconds)


def _read_rates(quick: bool) -> tuple[dict[str, float], dict[str, float]]:
    """One thread's read rates and fixed costs per read: memory, and a local disk per codec."""
    import tempfile

    import numpy as np

    rows, d = (20_000 if quick else 80_000), 32
    x = np.random.default_rng().standard_normal((rows // 2, d))  # benchmark data, no seed
    rates = {"memory": x.nbytes / best_seconds(lambda: np.array(x, copy=True), 3)}
    calls: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for codec in ("none", "zstd"):
            key = f"local/{codec}"
            rates[key], calls[key] = measure_reads(
                os.path.join(folder, codec), codec=codec, quick=quick
            )
    return rates, calls


def measure_reads(
    location: str,
    *,
    storage_options: dict[str, Any] | None = None,
    codec: str = "zstd",
    quick: bool = False,
) -> tuple[float, float]:
    """One thread's Zarr read rate at ``location`` and the fixed cost of one read.

    Writes two small stores of random benchmark rows under ``location`` (a local folder
    or an fsspec URL the caller may write, e.g. ``s3://bucket/scratch``; the same
    ``storage_options`` as a fit), times their reads through the fit's own chunk
    reader, and removes them.  The rate comes from chunks of ``rows / 4`` rows, every
    chunk read, best of several (a read of a few milliseconds varied 3x from run to run
    as two reads, best of 3); the fixed cost of a read from 40 chunks of 64 rows, less
    their bytes at that rate (on an object store: a request's round trip, which blocks
    of a few hundred KiB pay once each).  No user data is read.

    Parameters
    ----------
    location : str
        Where the benchmark stores go, under ``dask-dppca-read-rate.zarr`` and
        ``dask-dppca-read-call.zarr``.
    storage_options : dict, optional
        fsspec options for a URL.
    codec : {"zstd", "none"}, default "zstd"
        The stores' compressor.
    quick : bool, default False
        20 000 rows instead of 80 000, fewer repeats.

    Returns
    -------
    (float, float)
        Decoded bytes per second, and seconds per read beyond its bytes.
    """
    import numpy as np

    if codec not in ("zstd", "none"):
        raise ValueError(f"codec: must be 'zstd' or 'none', got {codec!r}")
    rows, d = (20_000 if quick else 80_000), 32
    x = np.random.default_rng().standard_normal((rows, d))  # benchmark data (any values, no seed)
    base = location.rstrip("/")
    rate_store, call_store = (f"{base}/dask-dppca-read-{name}.zarr" for name in ("rate", "call"))
    try:
        big = _benchmark_reader(rate_store, x, rows // 4, codec, storage_options)
        seconds = best_seconds(
            lambda: [big[k : k + rows // 4, :] for k in range(0, rows, rows // 4)],
            3 if quick else 9,
        )
        rate = x.nbytes / seconds
        small = _benchmark_reader(call_store, x[:2560], 64, codec, storage_options)
        each = best_seconds(lambda: [small[k : k + 64, :] for k in range(0, 2560, 64)], 3) / 40
    finally:
        _remove_stores((rate_store, call_store), storage_options)
    return rate, max(0.0, each - 64 * d * 8 / rate)


def _benchmark_reader(
    store: str,
    rows: NDArray[np.float64],
    chunk: int,
    codec: str,
    storage_options: dict[str, Any] | None,
) -> Any:
    """Write ``rows`` to a new Zarr array at ``store`` in chunks of ``chunk`` rows
    (``codec``: "zstd" or "none"), and return the fit's own chunk reader of it.
    """
    import zarr
    from zarr.codecs import ZstdCodec

    from ..io import open_records
    from ..io.zarr_input import chunk_reader

    z = zarr.create_array(
        store,
        shape=rows.shape,
        chunks=(chunk, rows.shape[1]),
        dtype="f8",
        compressors=[ZstdCodec()] if codec == "zstd" else None,
        overwrite=True,
        storage_options=storage_options,
    )
    z[:] = rows
    blocks = chunk_reader(open_records(store, storage_options=storage_options).array)
    assert blocks is not None  # a Zarr store's own reads
    return blocks


def _remove_stores(stores: tuple[str, ...], storage_options: dict[str, Any] | None) -> None:
    """Remove the benchmark stores that exist (local folders or fsspec URLs)."""
    from ..io.storage import filesystem

    for store in stores:
        fs, path = filesystem(store, storage_options)
        if fs.exists(path):
            fs.rm(path, recursive=True)


def _core_figures(widths: tuple[int, ...], quick: bool, analysis: bool) -> dict[str, Any]:
    """The model's figures of one core, as :class:`MachineModel` keywords, where it runs (a
    worker's process, when measured through a client: a worker's allocator and threads):
    the kernel's rates, call and row costs, the reads' rates and call costs, and with
    ``analysis`` the scree's pair costs and a scan's noise draw.
    """
    rows = {d: _kernel_row_seconds(d, quick) for d in widths}
    kernel = {d: kernel_rate(d, 1024 if quick else 2048, rows[d]) for d in widths}
    call = _kernel_call_seconds(widths[0], kernel[widths[0]], rows[widths[0]])
    reads, read_calls = _read_rates(quick)
    figures: dict[str, Any] = {
        "kernel_pairs_per_second": kernel,
        "read_bytes_per_second": reads,
        "kernel_call_seconds": call,
        "read_call_seconds": read_calls,
        "kernel_row_seconds": rows,
    }
    if analysis:
        histograms, sums = scree_value_seconds(widths, quick)
        figures.update(
            scree_histogram_seconds=histograms,
            scree_sum_seconds=sums,
            noise_draw_seconds=noise_draw_seconds(quick),
        )
    return figures


@contextmanager
def _measuring_client(client: Any) -> Iterator[Any]:
    """``client``, else one of a fresh in-process LocalCluster like the embedded one."""
    if client is not None:
        yield client
        return
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=os.cpu_count() or 1,
            processes=False,
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as own,
    ):
        yield own


def _cluster_costs(client: Any, quick: bool) -> tuple[float, float, int]:
    """(seconds per no-op task, a fit's fixed seconds, an idle worker's bytes) on ``client``."""
    import tempfile
    import warnings

    import dask
    import numpy as np
    import zarr

    from ..decomposition.estimator import DPPCA

    count = 200 if quick else 2000

    def no_op_graph():
        return [dask.delayed(_no_op, pure=False)(k) for k in range(count)]

    dask.compute(*no_op_graph(), scheduler=client)  # warm
    per_task = best_seconds(lambda: dask.compute(*no_op_graph(), scheduler=client), 2) / count

    est = DPPCA(n_components=1, scheduler=client, random_state=0)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded (non-private) noise: timing only
        store = os.path.join(folder, "small.zarr")
        z = zarr.create_array(store, shape=(1000, 4), chunks=(500, 4), dtype="f8")
        z[:] = np.random.default_rng().standard_normal(
            (1000, 4)
        )  # benchmark data (any values, no seed)
        est.fit(store)
        fixed = best_seconds(lambda: est.fit(store), 2)
    baseline = max(int(v) for v in client.run(_rss).values())
    return per_task, fixed, baseline


def _no_op(k: int) -> int:
    return k


def _rss() -> int:
    """The resident memory of the process it runs in, now, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)
