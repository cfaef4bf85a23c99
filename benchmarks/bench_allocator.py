"""Nanny workers and glibc's mmap threshold: the same fit with it raised, frozen, in-process.

Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_``, which fixes glibc's mmap
threshold at 128 KiB; a fit raises it in every worker process it sets up
(``dask_dppca.compute.allocator``).  This times one regular-design fit of a Zarr store
on one worker of two threads: as shipped (raised), with the threshold kept at 128 KiB
(``MALLOC_MMAP_THRESHOLD_=131072`` in the nanny's environment, which the fit respects:
the behaviour before), and on in-process workers (no nanny, glibc's dynamic threshold),
each as a multiple of in-process, in one run.

    python benchmarks/bench_allocator.py            # 2.2 GiB store: d = 256, blocks of 256
    python benchmarks/bench_allocator.py --smoke    # 40 MiB (the test suite runs it)

The seed makes the synthetic DATA; ``random_state`` the NOT private noise (times only).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

FEATURES, BLOCK = 256, 256


def _write_store(path: str, n_rows: int) -> None:
    import zarr

    store = zarr.create_array(
        path,
        shape=(n_rows, FEATURES),
        chunks=(BLOCK, FEATURES),
        dtype="f8",
        compressors=None,
    )
    rng = np.random.default_rng(0)  # synthetic data
    for start in range(0, n_rows, BLOCK):
        store[start : start + BLOCK] = rng.random((BLOCK, FEATURES))


def _fit_seconds(path: str, processes: bool, environ: dict) -> float:
    import dask
    from distributed import Client, LocalCluster

    import dask_dppca as dd
    from dask_dppca.compute import TRUSTED_RESOURCE

    nanny = {**dask.config.get("distributed.nanny.pre-spawn-environ"), **environ}
    design = dd.RegularDesign(k=1, block_size=BLOCK, seed=0)
    with (
        dask.config.set({"distributed.nanny.pre-spawn-environ": nanny}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=processes,
            dashboard_address=None,
            resources={TRUSTED_RESOURCE: 1},
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        start = time.perf_counter()
        dd.DPPCA(2, design=design, random_state=0, scheduler=client).fit(path)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a 40 MiB store")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # seeded noise, delta against 1/n
    blocks = 160 if args.smoke else 4408
    path = str(Path(tempfile.mkdtemp(prefix="bench-allocator-")) / "x.zarr")
    _write_store(path, blocks * BLOCK)
    size = blocks * BLOCK * FEATURES * 8 / 2**30
    print(f"regular design (k = 1), {blocks} blocks of {BLOCK} x {FEATURES}: {size:.2f} GiB")
    print("one worker of 2 threads; seconds for one fit (numba's cache warm from a first fit)")
    _fit_seconds(path, processes=False, environ={})  # compiles or loads the kernels
    cases = [
        ("in-process workers (dynamic threshold)", False, {}),
        ("nanny worker, threshold raised (as shipped)", True, {}),
        ("nanny worker, threshold kept at 128 KiB", True, {"MALLOC_MMAP_THRESHOLD_": 131072}),
    ]
    times = {name: _fit_seconds(path, processes, env) for name, processes, env in cases}
    reference = times[cases[0][0]]
    for name, seconds in times.items():
        print(f"  {name:<46} {seconds:7.2f} s  {seconds / reference:5.2f}x")
    frozen, raised = times[cases[2][0]], times[cases[1][0]]
    print(f"raised threshold: {frozen / raised:.2f}x faster than at 128 KiB")


if __name__ == "__main__":
    main()
