"""A worker's memory and imports before and after an analysis's first tasks.

Dask pauses a worker at 80 % of its memory limit: a worker whose imports alone sit above
that point (400 MB at ``--memory-limit 500MB``) never runs the analysis's tasks.  This
script starts a real LocalCluster of worker processes with a memory limit (one trusted),
records each worker's RSS and loaded packages, runs a fit (the directions: segment and
release tasks) and then ``dd.analyze`` on a Zarr store, and prints the RSS after each,
the packages their tasks imported, and whether they finished.

    python benchmarks/bench_worker_footprint.py [--memory-limit 500MB] [--n 200000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings

HEAVY = ("dask.array", "scipy", "pandas", "xarray", "pyarrow", "numba", "zarr", "sklearn",
         "matplotlib", "opendp", "dp_accounting", "panel")  # fmt: skip


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
        steps = {}
        for step, run in (
            ("fit", lambda: dd.DPPCA(3, epsilon=3.0, delta=1e-5, scheduler=client).fit(store)),
            (
                "analysis",
                lambda: dd.analyze(
                    store, 3, epsilon=3.0, delta=1e-5, compute=dd.Compute(scheduler=client)
                ),
            ),
        ):
            started = time.monotonic()
            outcome = "finished"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    run()
                except Exception as error:  # what the user would see
                    outcome = f"failed: {type(error).__name__}: {error}"
            steps[step] = (outcome, time.monotonic() - started, client.run(footprint))
    print(f"memory limit {args.memory_limit}, n={args.n}, d={args.d}")
    for address in sorted(before):
        b = before[address]
        print(f"  {address}: at start RSS {b['rss_mib']} MiB, {b['modules']} modules, {b['heavy']}")
        seen = set(b["heavy"])
        for step, (outcome, seconds, after) in steps.items():
            a = after.get(address, {})
            print(f"    after the {step} ({outcome}, {seconds:.1f} s): RSS {a.get('rss_mib')} MiB, "
                  f"{a.get('modules')} modules, its tasks imported "
                  f"{sorted(set(a.get('heavy', [])) - seen)}")  # fmt: skip
            seen |= set(a.get("heavy", []))
    return 0 if all(outcome == "finished" for outcome, _, _ in steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
