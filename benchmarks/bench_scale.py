"""End-to-end scale benchmark: Zarr -> LocalCluster -> private release.

A script, not a test:

    python benchmarks/bench_scale.py              # full run (n = 10^5 exact, 10^7 regular)
    python benchmarks/bench_scale.py --quick      # small sizes, a minute or two
    python benchmarks/bench_scale.py --smoke      # tiny sizes, seconds (the test suite runs it)
    python benchmarks/bench_scale.py --sections 3,7   # only some sections

It prints, in one run,

 1. the kernel's single-core rate on this machine (the model's only measured input);
 2. exact (complete design) n x d from a Zarr store on a LocalCluster of single-threaded
    workers: wall time, peak memory per worker, pairs per second, and the cost model's
    prediction of the wall time;
 3. the design ``"auto"`` picks at large n (a regular design) from a Zarr store written
    in its blocks, workers' memory_limit 1 GB: wall time against the model;
 4. strong scaling: the same job on 2 single-threaded workers against 1;
 5. accuracy at equal privacy: regular design with >= 10x fewer pairs against the
    complete design on t_1 data (median sin theta over repetitions);
 6. the cost model's prediction for a 100-node cluster at n = 10^9;
 7. the working set: on one worker (two threads), the most input blocks (read tasks'
    and those carried in lane states) and the most partial sums (lane states, lane sums)
    held at once in the worker's memory, for growing n (a regular design with blocks of
    1024 rows, k = 1 and k = 3): it should not grow with n.

Cost model (docs/method.md, sections 7-8): a design with |P| pairs costs its pairs at the
kernel's single-core rate, spread over the threads; every block is read once (blocks
are shared Dask keys), so bytes read are 8 n d.
"""

from __future__ import annotations

import argparse
import collections
import logging
import math
import os
import resource
import sys
import tempfile
import time
import warnings

import numpy as np
import psutil
import zarr
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin
from threadpoolctl import threadpool_limits

import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum
from dask_dppca.design import CompleteDesign, RegularDesign, auto_design
from dask_dppca.io import open_records
from dask_dppca.kernel import block_pair_sum

#: The clusters' own log level: a worker's heartbeat that races the cluster's close logs
#: a traceback at ERROR on a busy machine; a fit's errors raise in this process anyway.
QUIET = logging.CRITICAL


def model(n: int, d: int, design, n_threads: int, pair_rate: float) -> dict:
    """Pairs, flops, bytes and predicted seconds of one fit (pair_rate: pairs/s per core)."""
    if isinstance(design, CompleteDesign):
        n_pairs = n * (n - 1) // 2
    else:
        n_pairs = design.plan((n,), d).n_pairs
    return {
        "pairs": n_pairs,
        "flops": 4.0 * d * n_pairs,
        "bytes_read": 8.0 * n * d,
        "seconds": n_pairs / (pair_rate * n_threads),
    }


def kernel_pair_rate(d: int, rows: int = 4096) -> float:
    """Pairs per second of one core on a within-block sum (timed in thread CPU time, so
    that other load on the machine does not slow the model down)."""
    x = np.random.default_rng(0).standard_normal((rows, d))  # benchmark data only
    with threadpool_limits(1):
        block_pair_sum(x[:256])
        best = math.inf
        for _ in range(3):
            start = time.thread_time()
            block_pair_sum(x)
            best = min(best, time.thread_time() - start)
    return rows * (rows - 1) / 2 / best


def write_store(path: str, n: int, d: int, chunk_rows: int, seed: int = 0) -> None:
    """Gaussian rows written chunk by chunk (bounded memory)."""
    store = zarr.open_array(path, mode="w", shape=(n, d), chunks=(chunk_rows, d), dtype="f8")
    rng = np.random.default_rng(seed)  # benchmark data only
    step = max(chunk_rows, (64 * 2**20) // (8 * d) // chunk_rows * chunk_rows)
    for start in range(0, n, step):
        stop = min(start + step, n)
        store[start:stop] = rng.standard_normal((stop - start, d)) * np.linspace(3, 1, d)
    os.sync()  # the system writes the store back now, not during the fit timed next


def timed_fit(path: str, n_workers: int, memory_limit, design) -> dict:
    """Fit on a fresh LocalCluster of single-threaded workers; wall time and peak RSS.

    The peak is each worker's own high-water mark (``getrusage``), read once after the
    fit: exact, and no polling competes with the fit for the cores.
    """
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            memory_limit=memory_limit,
            dashboard_address=None,
            silence_logs=QUIET,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(_warm_worker)
        cpu_before = sum(client.run(_cpu_seconds).values())
        start = time.perf_counter()
        est = dd.DPPCA(n_components=2, design=design, scheduler=client).fit(path)
        wall = time.perf_counter() - start
        cpu = sum(client.run(_cpu_seconds).values()) - cpu_before
        peak = max(client.run(_peak_rss_bytes).values())
    return {"wall": wall, "cpu": cpu, "peak_mib": peak / 2**20, "pairs": est.privacy_["n_pairs"]}


def _warm_worker() -> None:
    """What every fit on a fresh worker pays once, paid before the timed fit: the kernel's
    compilation and the imports behind a lane task (graph, Zarr input, release)."""
    import dask_dppca.compute.trusted.release
    import dask_dppca.graph  # noqa: F401
    from dask_dppca.kernel import block_pair_sum

    block_pair_sum(np.eye(300, 4))


def _peak_rss_bytes() -> int:
    """The largest resident set this (worker) process has had (ru_maxrss: KiB, bytes on macOS)."""
    unit = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit


def _cpu_seconds() -> float:
    """User and system CPU seconds of this (worker) process so far."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def report(result, predicted, n_threads) -> str:
    """Wall time and the workers' CPU time, each against the model (CPU: the model's pair
    work on one core; this ratio holds on a machine busy with other work too)."""
    return (
        f"wall {result['wall']:.1f} s, model {predicted['seconds']:.1f} s (measured/model "
        f"{result['wall'] / predicted['seconds']:.2f}); workers' CPU {result['cpu']:.1f} s, model "
        f"{predicted['seconds'] * n_threads:.1f} s (measured/model "
        f"{result['cpu'] / (predicted['seconds'] * n_threads):.2f})"
    )


def section_exact(scratch, n, d, rates):
    print(f"\n2. exact, n = {n}, d = {d}, Zarr, 2 single-threaded workers")
    path = os.path.join(scratch, "exact.zarr")
    write_store(path, n, d, chunk_rows=8192)
    result = timed_fit(path, 2, "auto", "complete")
    predicted = model(n, d, CompleteDesign(), 2, rates[d])
    print(
        f"  peak {result['peak_mib']:.0f} MiB per worker, {result['pairs'] / result['wall'] / 1e6:.1f}"
        f" M pairs/s; {report(result, predicted, 2)}"
    )


def section_regular(scratch, n, d, rates):
    design = auto_design(n, d, 2)
    print(f"\n3. design 'auto' at n = {n}, d = {d}: {design}; Zarr, 2 workers, memory_limit 1 GB")
    path = os.path.join(scratch, "big.zarr")
    start = time.perf_counter()
    chunk_rows = design.block_size if isinstance(design, RegularDesign) else 8192
    write_store(path, n, d, chunk_rows=chunk_rows)
    print(
        f"  store {n * d * 8 / 2**30:.2f} GiB written in {time.perf_counter() - start:.0f} s"
        f" (chunks of {chunk_rows} rows)"
    )
    result = timed_fit(path, 2, "1GB", design)
    predicted = model(n, d, design, 2, rates[d])
    print(
        f"  peak {result['peak_mib']:.0f} MiB per worker, {result['pairs'] / result['wall'] / 1e6:.1f}"
        f" M pairs/s, {result['pairs']:.3g} pairs; {report(result, predicted, 2)}"
    )


def section_scaling(scratch, n, d):
    print(f"\n4. strong scaling, complete design, n = {n}, d = {d}")
    path = os.path.join(scratch, "scaling.zarr")
    write_store(path, n, d, chunk_rows=4096)
    one = timed_fit(path, 1, "auto", "complete")["wall"]
    two = timed_fit(path, 2, "auto", "complete")["wall"]
    print(
        f"  1 worker {one:.1f} s, 2 workers {two:.1f} s: speed-up {one / two:.2f}x (goal >= 1.7x)"
    )


def section_accuracy(n: int, d: int, repeats: int) -> None:
    print("\n5. accuracy at equal privacy: regular vs complete")
    spectrum = spiked_spectrum(d, n_spikes=2, spike=3.0)
    truth = random_directions(d, seed=1)[:, :2]
    regular = dd.RegularDesign(k=1, block_size=min(2500, max(2, n // 4)), seed=0)
    errors = {"complete": [], "regular": []}
    pairs = {}
    for rep in range(repeats):
        x = make_elliptical(n, spectrum, random_directions(d, seed=1), df=1.0, seed=100 + rep)
        for name, design in (("complete", "complete"), ("regular", regular)):
            est = dd.DPPCA(
                n_components=2, epsilon=1.0, delta=1e-6, design=design, scheduler="threads"
            ).fit(x)
            errors[name].append(dd.sin_theta(est.components_.T, truth))
            pairs[name] = est.privacy_["n_pairs"]
    ratio = np.median(errors["regular"]) / np.median(errors["complete"])
    work = pairs["complete"] / pairs["regular"]
    print(f"  t_1 data n = {n}, d = {d}, epsilon = 1, {repeats} data sets")
    for name in errors:
        print(
            f"  {name:9s} pairs {pairs[name]:.3g}  median sin theta {np.median(errors[name]):.4f}"
            f"  (quartiles {np.percentile(errors[name], 25):.4f} .. {np.percentile(errors[name], 75):.4f})"
        )
    print(
        f"  regular / complete error ratio {ratio:.3f} (goal <= 1.10) with {work:.1f}x fewer pairs"
        f" (goal >= 10x)"
    )


def section_model(rates):
    print("\n6. model: 100 nodes x 32 cores, n = 10^9, d = 32, design='auto'")
    design = auto_design(10**9, 32, 3200)
    predicted = model(10**9, 32, design, 3200, rates[32])
    print(
        f"  design {design}: {predicted['pairs']:.3g} pairs, {predicted['flops']:.3g} flops, "
        f"{predicted['bytes_read'] / 2**40:.2f} TiB read once, about {predicted['seconds'] / 60:.0f} min "
        f"at this machine's per-core rate (network and I/O not modelled)"
    )


class HeldKeys(WorkerPlugin):
    """The most input blocks and partial sums in a worker's memory at once: read tasks'
    blocks, blocks carried inside lane states, lane states and lane-sum results."""

    def __init__(self, block_prefix):
        self.block_prefix = block_prefix

    def setup(self, worker):
        self.worker = worker
        self.counted = {}  # key in memory -> (blocks, partial sums)
        self.held = collections.Counter()
        worker.dppca_peak_held = self.peak = collections.Counter()

    def _weight(self, key):
        name = str(key[0] if isinstance(key, tuple) else key)
        if name.startswith(self.block_prefix):
            return 1, 0
        if name.startswith(("dppca-pairs-", "dppca-sum-")):
            value = self.worker.data.get(key) if key in self.worker.data else None
            return len(getattr(value, "blocks", {})), 1
        return None

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory" and key not in self.counted:
            weight = self._weight(key)
            if weight is None:
                return
            self.counted[key] = weight
            self.held["blocks"] += weight[0]
            self.held["partials"] += weight[1]
            for kind in ("blocks", "partials"):
                self.peak[kind] = max(self.peak[kind], self.held[kind])
        elif start == "memory" and key in self.counted:
            blocks, partials = self.counted.pop(key)
            self.held["blocks"] -= blocks
            self.held["partials"] -= partials


def held_on_one_worker(path, design) -> dict:
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            memory_limit="2GB",
            dashboard_address=None,
            silence_logs=QUIET,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(HeldKeys(open_records(path).array.name), name="held-keys")
        dd.DPPCA(n_components=2, design=design, scheduler=client).fit(path)
        (peak,) = client.run(lambda dask_worker: dict(dask_worker.dppca_peak_held)).values()
    return peak


def section_working_set(scratch, ladder, d, block, partners):
    print(
        f"\n7. working set on one worker (2 threads): most keys held at once, blocks of {block} rows"
    )
    print(f"{'k':>3} {'n':>9} {'blocks':>7} {'held blocks':>12} {'held partial sums':>18}")
    for k in partners:
        for n in ladder:
            path = os.path.join(scratch, f"held-{n}.zarr")
            if not os.path.exists(path):
                write_store(path, n, d, chunk_rows=block)
            peak = held_on_one_worker(path, RegularDesign(k=k, block_size=block, seed=0))
            print(
                f"{k:>3} {n:>9} {-(-n // block):>7} {peak.get('blocks', 0):>12} {peak.get('partials', 0):>18}"
            )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--sections", default="1,2,3,4,5,6,7", help="comma list of sections to run")
    args = parser.parse_args(argv)
    warnings.simplefilter(
        "ignore", UserWarning
    )  # e.g. "no dppca-trusted worker": a benchmark cluster
    sections = {int(s) for s in args.sections.split(",") if s}
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    exact_n, exact_d = {"smoke": (1500, 16), "quick": (20_000, 64), "full": (100_000, 64)}[size]
    big_n, big_d = {"smoke": (12_000, 32), "quick": (500_000, 32), "full": (10_000_000, 32)}[size]
    scaling_n = {"smoke": 1500, "quick": 20_000, "full": 50_000}[size]
    acc_n, acc_reps = {"smoke": (400, 1), "quick": (10_000, 3), "full": (50_000, 10)}[size]
    ladder, held_d, held_block = {
        "smoke": ((2048,), 8, 512),
        "quick": ((16384, 65536), 16, 1024),
        "full": ((16384, 65536, 262144), 16, 1024),
    }[size]

    rates = {}
    if sections & {1, 2, 3, 6}:
        print("1. kernel single-core rate")
        rates = {d: kernel_pair_rate(d) for d in sorted({exact_d, big_d, 32})}
        for d, rate in rates.items():
            print(
                f"  d = {d}: {rate / 1e6:.1f} M pairs/s per core ({4 * d * rate / 1e9:.1f} GF/s effective)"
            )
    with tempfile.TemporaryDirectory(prefix="dppca-bench-") as scratch:
        if 2 in sections:
            section_exact(scratch, exact_n, exact_d, rates)
        if 3 in sections:
            section_regular(scratch, big_n, big_d, rates)
        if 4 in sections:
            section_scaling(scratch, scaling_n, exact_d)
        if 5 in sections:
            section_accuracy(acc_n, 20, acc_reps)
        if 6 in sections:
            section_model(rates)
        if 7 in sections:
            section_working_set(scratch, ladder, held_d, held_block, (1,) if args.smoke else (1, 3))


if __name__ == "__main__":
    main()
