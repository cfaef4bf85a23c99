"""A long-lived cluster stays flat: RSS, release tickets and wall time over many fits.

Real ``dask scheduler`` / ``dask worker`` processes on 127.0.0.1 (two workers of one
thread, one of them ``dppca-trusted``) and one client that fits the same Zarr store
again and again, as a service would.  Every ``--every`` fits it records the scheduler's
and the workers' resident memory, the release tickets in the scheduler's metadata and
the median wall time of the fits since the last record.  Prints the table and the last
record against the first (ratios; the tickets as counts).

    python benchmarks/bench_soak.py                 # 200 fits, n = 4000, d = 8
    python benchmarks/bench_soak.py --quick         # 20 fits, n = 1000, d = 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start(folder: Path) -> tuple[list[subprocess.Popen], str]:
    """A scheduler and two workers (one trusted), plain tcp on loopback."""
    dask = [sys.executable, "-m", "dask"]
    scheduler_file = folder / "scheduler.json"
    processes = [
        subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(scheduler_file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
    ]  # fmt: skip
    deadline = time.monotonic() + 120
    while not scheduler_file.exists() or not scheduler_file.read_text().strip():
        if time.monotonic() > deadline:
            raise RuntimeError("the scheduler did not start")
        time.sleep(0.2)
    time.sleep(0.5)
    address = json.loads(scheduler_file.read_text())["address"]
    for name, extra in (("worker", []), ("trusted", ["--resources", "dppca-trusted=1"])):
        processes.append(
            subprocess.Popen(
                [*dask, "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                 "--no-dashboard", "--name", name, "--local-directory", str(folder / name),
                 *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
        )  # fmt: skip
    return processes, address


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def rss_mib(pid: int) -> float:
    import psutil

    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=200)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.fits, args.every, args.n, args.d = 20, 5, 1000, 4
    warnings.simplefilter("ignore")
    import distributed
    import psutil

    import dask_dppca as dd
    from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY
    from dask_dppca.datasets import random_directions, spiked_spectrum, write_elliptical_zarr

    folder = Path(tempfile.mkdtemp(prefix="dppca-soak-"))
    store = str(folder / "x.zarr")
    write_elliptical_zarr(  # benchmark data
        store, args.n, spiked_spectrum(args.d, 2, 8.0), random_directions(args.d, seed=1),
        df=1.0, chunk_rows=args.n // 4, seed=2,
    )  # fmt: skip
    processes, address = start(folder)
    rows = []
    try:
        with distributed.Client(address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
            dd.DPPCA(2, scheduler=client).fit(store)  # warm-up: imports, compilation
            times: list[float] = []
            for fit in range(1, args.fits + 1):
                started = time.perf_counter()
                dd.DPPCA(2, scheduler=client).fit(store)
                times.append(time.perf_counter() - started)
                if fit % args.every:
                    continue
                tickets = client.get_metadata(list(RELEASE_METADATA_KEY), default={})
                rows.append(
                    {
                        "fits": fit,
                        "scheduler_mib": rss_mib(processes[0].pid),
                        "workers_mib": sum(rss_mib(p.pid) for p in processes[1:]),
                        "client_mib": psutil.Process().memory_info().rss / 2**20,
                        "tickets": len(tickets),
                        "median_s": statistics.median(times),
                    }
                )
                times = []
                print(
                    "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in rows[-1].items()),
                    flush=True,
                )  # fmt: skip
    finally:
        stop(processes)
    first, last = rows[0], rows[-1]
    print(
        f"after {first['fits']} and {last['fits']} fits (n = {args.n}, d = {args.d}): "
        f"scheduler RSS {last['scheduler_mib'] / first['scheduler_mib']:.3f}x "
        f"({last['scheduler_mib'] - first['scheduler_mib']:+.1f} MiB), workers "
        f"{last['workers_mib'] / first['workers_mib']:.3f}x "
        f"({last['workers_mib'] - first['workers_mib']:+.1f} MiB), client "
        f"{last['client_mib'] / first['client_mib']:.3f}x, tickets {first['tickets']} -> "
        f"{last['tickets']}, median fit {last['median_s'] / first['median_s']:.3f}x"
    )


if __name__ == "__main__":
    main()
