"""A worker's memory and imports before and after an analysis's first tasks.

Dask pauses a worker at 80 % of its memory limit: a worker whose imports alone sit above
that point (400 MB at ``--memory-limit 500MB``) never runs the analysis's tasks.  This
script starts a real LocalCluster of worker processes with a memory limit (one trusted),
records each worker's RSS and loaded packages, runs ``dd.analyze`` on a Zarr store, and
prints the RSS after it, the packages the tasks imported, and whether it finished.

    python benchmarks/bench_worker_footprint.py [--memory-limit 500MB] [--n 200000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings

HEAVY = ("scipy", "pandas", "xarray", "pyarrow", "numba", "zarr", "sklearn", "matplotlib",
         "opendp", "dp_accounting", "panel")  # fmt: skip


def footprint() -> dict:
    """Run on a worker: its RSS (MiB), module count and heavy packages loaded."""
    import os
    import sys

    pages = int(open(f"/proc/{os.getpid()}/statm").read().split()[1])
    return {
        "rss_mib": round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1),
        "modules": len(sys.modules),
        "heavy": sorted(m for m in HEAVY if m in sys.modules),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-limit", default="500MB")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--d", type=int, default=16)
    args = parser.parse_args()

    import numpy as np
    import zarr
    from distributed import Client, LocalCluster

    import dask_dppca as dd

    folder = tempfile.mkdtemp(prefix="footprint-")
    store = f"{folder}/x.zarr"
    rng = np.random.default_rng(0)  # benchmark data only
    z = zarr.open_array(store, mode="w", shape=(args.n, args.d), chunks=(20_000, args.d))
    z[:] = rng.standard_t(3, size=(args.n, args.d))
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit=args.memory_limit,
            processes=True,
            dashboard_address=None,
            resources={"dppca-trusted": 1},
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        before = client.run(footprint)
        started = time.monotonic()
        outcome = "finished"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                dd.analyze(store, 3, epsilon=3.0, delta=1e-5, scheduler=client)
            except Exception as error:  # what the user would see
                outcome = f"failed: {type(error).__name__}: {error}"
        seconds = time.monotonic() - started
        after = client.run(footprint)
    print(f"memory limit {args.memory_limit}, n={args.n}, d={args.d}: analysis {outcome} "
          f"in {seconds:.1f} s")  # fmt: skip
    for address in sorted(before):
        b, a = before[address], after.get(address, {})
        print(f"  {address}: RSS {b['rss_mib']} -> {a.get('rss_mib')} MiB, modules "
              f"{b['modules']} -> {a.get('modules')}, imported by the tasks: "
              f"{sorted(set(a.get('heavy', [])) - set(b['heavy']))}")  # fmt: skip
    return 0 if outcome == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
