"""Fits on object storage against the same fit on a local store, in one run.

Starts moto's S3 server on 127.0.0.1 (a Python server: the ratio is an upper bound on
what the remote path costs, not a measurement of S3), writes the same records to S3 and
to a local Zarr store in the same chunks, and times warm fits on a LocalCluster of two
worker processes: local, S3, and S3 through ``simplecache::`` (first and second fit).
Prints each time, its ratio to the local fit, and the chunk GET requests the server saw
per fit (each chunk once; none for a cached repeat).

    python benchmarks/bench_storage.py            # n = 200000, d = 32
    python benchmarks/bench_storage.py --quick    # n = 40000
    python benchmarks/bench_storage.py --smoke    # n = 6000, one repeat (the test suite runs it)

Seeds generate the synthetic DATA and, via random_state, the NOT private noise: the
script compares times, not releases.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_moto(folder: Path) -> tuple[subprocess.Popen, str]:
    import requests

    port = _free_port()
    log = open(folder / "moto.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            requests.get(f"{url}/moto-api/", timeout=2)
            return server, url
        except requests.ConnectionError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto did not start")


def _gets_since(log: Path, start: int, prefix: str) -> int:
    with open(log, "rb") as stream:
        stream.seek(start)
        return len(re.findall(rf'"GET /{re.escape(prefix)}/c/', stream.read().decode()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="n = 40000")
    mode.add_argument("--smoke", action="store_true", help="n = 6000 in 3 chunks, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, d, chunk = (40_000 if args.quick else 200_000), 32, 10_000
    if args.smoke:
        n, chunk, args.repeats = 6000, 2000, 1

    import boto3
    import zarr
    from distributed import Client, LocalCluster

    import dask_dppca as dd

    warnings.simplefilter("ignore")  # the seeded-noise and untrusted-release warnings
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    folder = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    server, url = _start_moto(folder)
    try:
        options = {
            "key": "bench",
            "secret": "bench",
            "client_kwargs": {"endpoint_url": url, "region_name": "us-east-1"},
        }
        boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        ).create_bucket(Bucket="bench")
        x = np.random.default_rng(0).standard_normal((n, d))  # synthetic data
        for where, opts in ((str(folder / "x.zarr"), None), ("s3://bench/x.zarr", options)):
            zarr.open_array(
                where, mode="w", shape=x.shape, chunks=(chunk, d), dtype="f8", storage_options=opts
            )[:] = x
        cached = {"s3": options, "simplecache": {"cache_storage": str(folder / "cache")}}
        design = dd.RegularDesign(k=2, block_size=chunk, seed=0)
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster, set_as_default=False) as client,
        ):

            def fit(source, opts):
                start = time.perf_counter()
                dd.DPPCA(n_components=2, random_state=0, design=design, scheduler=client).fit(
                    source, storage_options=opts
                )
                return time.perf_counter() - start

            fit(str(folder / "x.zarr"), None)  # warm-up: numba, imports on the workers
            fit("s3://bench/x.zarr", options)
            local = min(fit(str(folder / "x.zarr"), None) for _ in range(args.repeats))
            rows = [("local store", local, "-")]
            start = (folder / "moto.log").stat().st_size
            remote = min(fit("s3://bench/x.zarr", options) for _ in range(args.repeats))
            gets = _gets_since(folder / "moto.log", start, "bench/x.zarr") / args.repeats
            rows.append(("s3:// (moto)", remote, f"{gets:g}"))
            start = (folder / "moto.log").stat().st_size
            first = fit("simplecache::s3://bench/x.zarr", cached)
            rows.append(
                (
                    "simplecache::s3://, first fit",
                    first,
                    str(_gets_since(folder / "moto.log", start, "bench/x.zarr")),
                )
            )
            start = (folder / "moto.log").stat().st_size
            again = min(fit("simplecache::s3://bench/x.zarr", cached) for _ in range(args.repeats))
            rows.append(
                (
                    "simplecache::s3://, repeated",
                    again,
                    f"{_gets_since(folder / 'moto.log', start, 'bench/x.zarr') / args.repeats:g}",
                )
            )
        print(
            f"n = {n}, d = {d}, {n // chunk} chunks of {chunk} rows "
            f"({x.nbytes / 2**20:.0f} MiB), 2 worker processes, best of {args.repeats}"
        )
        print(f"{'input':32s} {'seconds':>8s} {'x local':>8s} {'chunk GETs per fit':>19s}")
        for name, seconds, gets in rows:
            print(f"{name:32s} {seconds:8.2f} {seconds / local:8.2f} {gets:>19s}")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
