"""End-to-end scale benchmark: Zarr -> LocalCluster -> private release.

A script, not a test:

    python benchmarks/bench_scale.py            # full run (n = 10^5 exact, 10^7 regular)
    python benchmarks/bench_scale.py --quick    # small sizes, about a minute

It prints, in one run,

 1. the kernel's single-core rate on this machine (the model's only measured input);
 2. exact (complete design) n x d from a Zarr store on a LocalCluster of single-threaded
    workers: wall time, peak memory per worker, pairs per second, and the cost model's
    prediction of the wall time;
 3. a regular design at large n from a Zarr store with workers' memory_limit 1 GB;
 4. strong scaling: the same job on 2 single-threaded workers against 1;
 5. accuracy at equal privacy: regular design with >= 10x fewer pairs against the
    complete design on t_1 data (median sin theta over repetitions);
 6. the cost model's prediction for a 100-node cluster at n = 10^9.

Cost model (method.md sections 7-8): a design with |P| pairs costs 4 d |P| flops of
pair work plus 6 d^2 per block pair of d x d products; every block is read once
(blocks are shared Dask keys), so bytes read are 8 n d.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import threading
import time

import numpy as np
import psutil
import zarr
from distributed import Client, LocalCluster
from threadpoolctl import threadpool_limits

import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum
from dask_dppca.design import CompleteDesign, auto_design
from dask_dppca.kernel import block_pair_sum


def model(n: int, d: int, design, n_threads: int, pair_rate: float) -> dict:
    """Pairs, flops, bytes and predicted seconds of one fit (pair_rate: pairs/s per core)."""
    plan = design.plan((n,), d) if not isinstance(design, CompleteDesign) else None
    if plan is None:
        n_pairs = n * (n - 1) // 2
        n_block_pairs = 1
    else:
        n_pairs, n_block_pairs = plan.n_pairs, len(plan.block_pairs)
    flops = 4.0 * d * n_pairs + 6.0 * d * d * n_block_pairs
    return {"pairs": n_pairs, "flops": flops, "bytes_read": 8.0 * n * d,
            "seconds": n_pairs / (pair_rate * n_threads)}


def kernel_pair_rate(d: int, rows: int = 4096) -> float:
    """Pairs per second of one core on a within-block sum."""
    x = np.random.default_rng(0).standard_normal((rows, d))  # benchmark data only
    with threadpool_limits(1):
        block_pair_sum(x[:256])
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            block_pair_sum(x)
            best = min(best, time.perf_counter() - start)
    return rows * (rows - 1) / 2 / best


def write_store(path: str, n: int, d: int, chunk_rows: int, seed: int = 0) -> None:
    """Gaussian rows written chunk by chunk (bounded memory)."""
    store = zarr.open_array(path, mode="w", shape=(n, d), chunks=(chunk_rows, d), dtype="f8")
    rng = np.random.default_rng(seed)  # benchmark data only
    step = max(chunk_rows, (64 * 2**20) // (8 * d) // chunk_rows * chunk_rows)
    for start in range(0, n, step):
        stop = min(start + step, n)
        store[start:stop] = rng.standard_normal((stop - start, d)) * np.linspace(3, 1, d)


def timed_fit(path: str, n_workers: int, memory_limit, design) -> dict:
    """Fit on a fresh LocalCluster of single-threaded workers; wall time and peak RSS."""
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, memory_limit=memory_limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("dask_dppca").kernel.block_pair_sum(np.eye(300, 4)))
        peak = {}
        done = threading.Event()

        def watch():
            while not done.wait(0.25):
                for worker, rss in client.run(lambda: psutil.Process().memory_info().rss).items():
                    peak[worker] = max(peak.get(worker, 0), rss)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        start = time.perf_counter()
        est = dd.DPPCA(n_components=2, design=design, scheduler=client).fit(path)
        wall = time.perf_counter() - start
        done.set()
        watcher.join()
    return {"wall": wall, "peak_mib": max(peak.values()) / 2**20, "pairs": est.privacy_["n_pairs"],
            "design": est.privacy_}


def accuracy_at_equal_privacy(n: int, d: int, repeats: int) -> None:
    spectrum = spiked_spectrum(d, n_spikes=2, spike=3.0)
    truth = random_directions(d, seed=1)[:, :2]
    block = 2500
    regular = dd.RegularDesign(k=1, block_size=block, seed=0)
    errors = {"complete": [], "regular": []}
    pairs = {}
    for rep in range(repeats):
        x = make_elliptical(n, spectrum, random_directions(d, seed=1), df=1.0, seed=100 + rep)
        for name, design in (("complete", "complete"), ("regular", regular)):
            est = dd.DPPCA(n_components=2, epsilon=1.0, delta=1e-6, design=design,
                           scheduler="threads").fit(x)
            errors[name].append(dd.sin_theta(est.components_.T, truth))
            pairs[name] = est.privacy_["n_pairs"]
    ratio = np.median(errors["regular"]) / np.median(errors["complete"])
    work = pairs["complete"] / pairs["regular"]
    print(f"  t_1 data n = {n}, d = {d}, epsilon = 1, {repeats} data sets")
    for name in errors:
        print(f"  {name:9s} pairs {pairs[name]:.3g}  median sin theta {np.median(errors[name]):.4f}"
              f"  (quartiles {np.percentile(errors[name], 25):.4f} .. {np.percentile(errors[name], 75):.4f})")
    print(f"  regular / complete error ratio {ratio:.3f} (goal <= 1.10) with {work:.1f}x fewer pairs"
          f" (goal >= 10x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args()
    exact_n, exact_d = (20_000, 64) if args.quick else (100_000, 64)
    big_n, big_d = (200_000, 32) if args.quick else (10_000_000, 32)
    scaling_n = 20_000 if args.quick else 50_000
    acc_n, acc_reps = (10_000, 3) if args.quick else (50_000, 10)

    print("1. kernel single-core rate")
    rates = {d: kernel_pair_rate(d) for d in (exact_d, big_d)}
    for d, rate in rates.items():
        print(f"  d = {d}: {rate / 1e6:.1f} M pairs/s per core ({4 * d * rate / 1e9:.1f} GF/s effective)")

    with tempfile.TemporaryDirectory(prefix="dppca-bench-") as scratch:
        print(f"\n2. exact, n = {exact_n}, d = {exact_d}, Zarr, 2 single-threaded workers")
        path = os.path.join(scratch, "exact.zarr")
        write_store(path, exact_n, exact_d, chunk_rows=8192)
        result = timed_fit(path, 2, "auto", "complete")
        predicted = model(exact_n, exact_d, CompleteDesign(), 2, rates[exact_d])
        print(f"  wall {result['wall']:.1f} s, peak {result['peak_mib']:.0f} MiB per worker, "
              f"{result['pairs'] / result['wall'] / 1e6:.1f} M pairs/s; model predicts "
              f"{predicted['seconds']:.1f} s (ratio measured/model "
              f"{result['wall'] / predicted['seconds']:.2f})")

        print(f"\n3. regular design (auto), n = {big_n}, d = {big_d}, Zarr, 2 workers, memory_limit 1 GB")
        path = os.path.join(scratch, "big.zarr")
        design = auto_design(big_n, big_d, 2)
        start = time.perf_counter()
        write_store(path, big_n, big_d, chunk_rows=design.block_size)
        print(f"  store {big_n * big_d * 8 / 2**30:.2f} GiB written in {time.perf_counter() - start:.0f} s;"
              f" design {design}")
        result = timed_fit(path, 2, "1GB", design)
        predicted = model(big_n, big_d, design, 2, rates[big_d])
        print(f"  wall {result['wall']:.1f} s, peak {result['peak_mib']:.0f} MiB per worker, "
              f"{result['pairs'] / result['wall'] / 1e6:.1f} M pairs/s, {result['pairs']:.3g} pairs; "
              f"model {predicted['seconds']:.1f} s (ratio {result['wall'] / predicted['seconds']:.2f})")

        print(f"\n4. strong scaling, complete design, n = {scaling_n}, d = {exact_d}")
        path = os.path.join(scratch, "scaling.zarr")
        write_store(path, scaling_n, exact_d, chunk_rows=4096)
        one = timed_fit(path, 1, "auto", "complete")["wall"]
        two = timed_fit(path, 2, "auto", "complete")["wall"]
        print(f"  1 worker {one:.1f} s, 2 workers {two:.1f} s: speed-up {one / two:.2f}x (goal >= 1.7x)")

    print("\n5. accuracy at equal privacy: regular vs complete")
    accuracy_at_equal_privacy(acc_n, 20, acc_reps)

    print("\n6. model: 100 nodes x 32 cores, n = 10^9, d = 32, design='auto'")
    design = auto_design(10**9, 32, 3200)
    predicted = model(10**9, 32, design, 3200, rates[32])
    print(f"  design {design}: {predicted['pairs']:.3g} pairs, {predicted['flops']:.3g} flops, "
          f"{predicted['bytes_read'] / 2**40:.2f} TiB read once, about {predicted['seconds'] / 60:.0f} min "
          f"at this machine's per-core rate (network and I/O not modelled)")


if __name__ == "__main__":
    main()
