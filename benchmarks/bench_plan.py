"""The plan against the fit: predicted wall time and peak worker memory vs measured.

A script, not a test:

    python benchmarks/bench_plan.py            # n = 10^4 ... 10^7, local Zarr and S3
    python benchmarks/bench_plan.py --quick    # n = 10^4 ... 10^6, auto designs
    python benchmarks/bench_plan.py --extra    # the full run's other rows
    python benchmarks/bench_plan.py --smoke    # tiny sizes, seconds (the test suite runs it)
    python benchmarks/bench_plan.py --quick --analysis   # and each size's whole analysis

In one run: the machine model is measured on a LocalCluster of two single-threaded
worker processes (``dask_dppca.cli.measure.measure_machine_model`` with that cluster's
client: the kernel at d, Zarr reads per codec, a no-op task, a small fit's fixed cost, an
idle worker's memory; the S3 read rate and a read's fixed cost from moto's server on
127.0.0.1, ``dask_dppca.cli.measure.measure_reads``); then for each
size a store is written (local, or on the S3 server), ``DPPCA(...).plan(store)`` is taken
on a fresh cluster of the same shape (reading no data) and the fit is timed there, on
warm workers (a small fit first: imports, compilation, S3 sessions; the model's fixed
costs are measured on warm workers too).  Each
row prints the plan's design, blocks and tasks, its predicted wall time and peak worker
memory, the measured ones (wall on the client; peak: each worker's resident memory
sampled every 5 ms inside it during the fit, the largest) and their ratios; and the
workers' CPU seconds against the plan's pair and read work (thread-seconds): on a
machine loaded by others the wall ratio moves with the load, the CPU one much less and their ratios (measured / predicted).

With ``--analysis``, the model also measures what an analysis adds (the scree's pair
costs, a quantile scan's noise draw, each stage's fixed cost:
``dask_dppca.cli.measure_analysis``), and each size also runs ``analyze`` (its defaults,
on the same cluster, its workers warmed by a small analysis first as a fit's are) against
``dd.plan_analysis`` of the same store: the plan's stages (directions, scree, score map),
tasks and wall time against the measured wall, each stage's own wall beside its plan.
The analysis draws its noise with the private sampler (no ``random_state``), as a user's
does: a seeded sampler scans several times faster and would flatter the plan.

Sizes: the complete design ("auto" keeps every pair at these n on 2 threads up to
n = 2.5 x 10^5 at d = 32), the regular design "auto" picks beyond, and regular designs
of one partner and 1024-row blocks up to n = 10^7 (see ``SIZES``).  Stores are written
in the design's blocks where the design is regular (its blocks are then read inside their
tasks), in chunks of 10^4 rows for the complete design (merged into blocks by the design).
Seeds generate benchmark DATA and (``random_state``) NOT private noise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

D = 32
WORKERS, THREADS = 2, 1
MEMORY_LIMIT = "4GiB"
#: ``(n, storage, design)``: None is design="auto" (complete up to n = 2.5 x 10^5 here,
#: then regular); the larger regular fits use one partner and 1024-row blocks, about
#: n x 1024 pairs, so that a run fits in minutes on a shared 2-core machine.
SMALL_REGULAR = (1, 1024)
QUICK = [(1e4, "local", None), (3e4, "local", None), (1e5, "local", None)]
QUICK += [(1e6, "local", None), (1e4, "s3", None)]
EXTRA = [(1e6, "local", SMALL_REGULAR), (1e7, "local", SMALL_REGULAR)]
EXTRA += [(1e5, "s3", None), (1e6, "s3", SMALL_REGULAR)]
SIZES = {
    "full": QUICK + EXTRA,
    "quick": QUICK,
    "extra": EXTRA,
    "smoke": [(2e3, "local", None)],  # no S3 server: the suite runs it
}


def _cluster():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=THREADS,
        memory_limit=MEMORY_LIMIT,
        dashboard_address="127.0.0.1:0",
    )
    return cluster, Client(cluster)


def _warm(client, warm_store: str) -> None:
    """A fresh worker's one-time costs (imports, compilation), paid before a timed fit."""
    import dask_dppca as dd

    dd.DPPCA(n_components=2, scheduler=client, random_state=0).fit(warm_store)


def _best_fit(client, store: str, options: dict | None, repeats: int = 3) -> float:
    import dask_dppca as dd

    est = dd.DPPCA(n_components=2, scheduler=client, random_state=0)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        est.fit(store, storage_options=options)
        best = min(best, time.perf_counter() - start)
    return best


def _analysis_row(client, location, options, given, design, model, warm_store) -> tuple:
    """The plan of ``analyze`` (its defaults) and the analysis timed on warm workers (a
    small analysis first), private noise; each stage's wall from the run's progress hook.
    """
    import dask_dppca as dd

    stages = [dd.DirectionsStage(design=design), dd.ScreeStage(), dd.ScoreMapStage()]
    chosen = {} if given is None else {"stages": stages}
    compute = dd.Compute(scheduler=client, storage_options=options)
    dd.analyze(warm_store, 2, compute=dd.Compute(scheduler=client))  # the stages' first run
    plan = dd.plan_analysis(location, compute=compute, machine=model, **chosen)
    marks: list[tuple[str, float]] = []
    start = time.perf_counter()
    with _stage_marks(marks):
        dd.analyze(location, compute=compute, **chosen)
    wall = time.perf_counter() - start
    ends = [t for _, t in marks[1:]] + [start + wall]
    stage_walls = {title: end - begun for (title, begun), end in zip(marks, ends)}
    n = plan.directions.input["shape"][0]
    return n, plan, wall, stage_walls


@contextlib.contextmanager
def _stage_marks(marks: list):
    """Record (title, time) as each stage of an analysis begins (the run's progress hook,
    ``run_progress``'s ``begin``, wrapped for this benchmark only).
    """
    from dask_dppca.analysis import run

    original = run._run_each

    def marked(chosen, context, reserved, released, keep, unchanged, begin=None):
        def mark(title):
            marks.append((title, time.perf_counter()))
            if begin is not None:
                begin(title)

        return original(chosen, context, reserved, released, keep, unchanged, mark)

    run._run_each = marked
    try:
        yield
    finally:
        run._run_each = original


def _print_analyses(analyses: list[tuple]) -> None:
    titles = ("directions", "scree", "score map")
    print(
        "\nanalyze (its defaults, private noise, warm workers) against plan_analysis, same "
        f"cluster; each stage planned / measured\n{'n':>9} "
        + " ".join(f"{t:>15}" for t in titles)
        + f" {'tasks':>6} {'wall pred':>9} {'wall meas':>9} {'ratio':>6}"
    )
    ratios = []
    for n, plan, wall, stage_walls in analyses:
        cells = [
            f"{plan.stage(t).seconds:>6.2f}/{stage_walls.get(t, float('nan')):<6.2f}s"
            for t in titles
        ]
        ratios.append(wall / plan.wall_seconds)
        print(
            f"{n:>9} {' '.join(f'{c:>15}' for c in cells)} {plan.n_tasks:>6} "
            f"{plan.wall_seconds:>8.2f}s {wall:>8.2f}s {ratios[-1]:>6.2f}",
            flush=True,
        )
    print(
        f"analysis measured / predicted: {min(ratios):.2f}-{max(ratios):.2f} (target within "
        f"1.3x: {sum(1 / 1.3 <= r <= 1.3 for r in ratios)}/{len(ratios)})"
    )


def _cpu_seconds() -> float:
    """In a worker: its process's CPU seconds so far (user and system)."""
    import psutil

    times = psutil.Process().cpu_times()
    return times.user + times.system


def _start_sampler(dask_worker) -> None:
    """In a worker: sample its resident memory every 5 ms until :func:`_stop_sampler`.

    (``getrusage``'s high-water mark is no good here: a spawned worker starts with its
    parent's resident size as its mark.)
    """
    import threading

    import psutil

    process, stop = psutil.Process(), threading.Event()
    state = {"peak": process.memory_info().rss, "stop": stop}

    def sample():
        while not stop.wait(0.005):
            state["peak"] = max(state["peak"], process.memory_info().rss)

    state["thread"] = threading.Thread(target=sample, daemon=True)
    state["thread"].start()
    dask_worker.plan_memory_sampler = state  # the worker outlives this call's globals


def _stop_sampler(dask_worker) -> int:
    """In a worker: stop sampling; the largest resident memory seen, in bytes."""
    import psutil

    state = dask_worker.plan_memory_sampler
    state["stop"].set()
    state["thread"].join(timeout=5)
    return int(max(state["peak"], psutil.Process().memory_info().rss))


def write_store(location: str, n: int, chunk: int, options: dict | None) -> None:
    """Gaussian benchmark rows written chunk by chunk (bounded memory)."""
    import zarr

    store = location
    if options is not None:
        import s3fs

        store = zarr.storage.FsspecStore(
            s3fs.S3FileSystem(**options, asynchronous=True), path=location.split("://", 1)[1]
        )
    z = zarr.create_array(store, shape=(n, D), chunks=(chunk, D), dtype="f8", overwrite=True)
    rng = np.random.default_rng(n)  # benchmark data only
    step = max(chunk, (64 * 2**20) // (8 * D) // chunk * chunk)
    for start in range(0, n, step):
        stop = min(start + step, n)
        z[start:stop] = rng.standard_normal((stop - start, D)) * np.linspace(3, 1, D)
    if options is None:
        os.sync()


def _s3(folder: Path):
    """moto's server on 127.0.0.1 and a bucket: (server process, storage options)."""
    import boto3
    from bench_storage import _start_moto

    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    server, url = _start_moto(folder)
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
    ).create_bucket(Bucket="plan")
    return server, options


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="n up to 10^6")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    mode.add_argument("--extra", action="store_true", help="the full run's rows beyond --quick")
    parser.add_argument(
        "--analysis", action="store_true", help="each size's whole analysis too (plan_analysis)"
    )
    args = parser.parse_args(argv)
    sizes = SIZES[
        "smoke" if args.smoke else "quick" if args.quick else "extra" if args.extra else "full"
    ]

    import dask_dppca as dd
    from dask_dppca.cli.measure import measure_machine_model, measure_reads
    from dask_dppca.design import auto_design

    warnings.simplefilter("ignore")  # seeded (non-private) noise, untrusted release: timing only
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        server, options = _s3(folder) if any(s == "s3" for _, s, _ in sizes) else (None, None)
        try:
            warm_store = str(folder / "warm.zarr")
            write_store(warm_store, 2000, 1000, None)
            cluster, client = _cluster()
            try:
                _warm(client, warm_store)
                # The smoke run skips the analysis figures (tests/estimator/
                # test_analysis_costs.py measures them): its analysis is planned with none.
                model = measure_machine_model(
                    (D,), quick=args.smoke, client=client, analysis=args.analysis and not args.smoke
                )
                if options is not None:
                    # A fit's extra fixed cost on S3 (the workers' sessions, first requests):
                    # a small fit there against the same fit on the local disk.
                    small = "s3://plan/small.zarr"
                    write_store(small, 2000, 1000, options)
                    local = _best_fit(client, warm_store, None)
                    remote = _best_fit(client, small, options)
                    # The read rate and a request's fixed cost on the S3 server, as
                    # `dask-dppca bench --save --reads-at s3://...` measures them.
                    rate, call = measure_reads("s3://plan/scratch", storage_options=options)
                    model = dataclasses.replace(
                        model,
                        read_bytes_per_second={**model.read_bytes_per_second, "s3/zstd": rate},
                        read_call_seconds={**model.read_call_seconds, "s3/zstd": call},
                        storage_seconds={"s3": max(0.0, remote - local)},
                    )
            finally:
                if not args.smoke:  # the smoke run times its one fit on this cluster
                    client.close()
                    cluster.close()
            print(
                f"machine model ({model.source}): kernel {model.pair_rate(D) / 1e6:.1f} M pairs/s "
                f"a core at d = {D}, {model.row_cost(D) * 1e9:.0f} ns a block row, "
                f"{model.kernel_call_seconds * 1e3:.3f} ms a block pair; reads "
                + ", ".join(
                    f"{k} {v / 2**20:.0f} MiB/s" for k, v in model.read_bytes_per_second.items()
                )
                + " (a read's fixed cost: "
                + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in model.read_call_seconds.items())
                + f"); a task {model.task_seconds * 1e3:.2f} ms; fixed {model.fixed_seconds:.2f} s "
                f"(S3: + {model.storage_seconds.get('s3', 0.0):.2f} s); "
                f"idle worker {model.worker_baseline_bytes / 2**20:.0f} MiB; load average {load:.1f}"
                + (
                    f"; scree {model.scree_value_seconds('histograms', D) * 1e9:.1f} / "
                    f"{model.scree_value_seconds('sums', D) * 1e9:.1f} ns a pair and value "
                    f"(histograms / sums); a scan's noise draw "
                    f"{model.noise_draw_seconds * 1e9:.0f} ns; stages' fixed costs "
                    + ", ".join(f"{t} {s:.3f} s" for t, s in model.stage_seconds.items())
                    if args.analysis
                    else ""
                )
            )
            print(
                f"\n{WORKERS} workers x {THREADS} thread, memory limit {MEMORY_LIMIT}, d = {D}\n"
                f"{'n':>9} {'storage':7} {'design':22} {'blocks':>6} {'tasks':>6} "
                f"{'wall pred':>9} {'wall meas':>9} {'ratio':>6} "
                f"{'peak pred':>9} {'peak meas':>9} {'ratio':>6} "
                f"{'work pred':>9} {'cpu meas':>9} {'ratio':>6}"
            )
            rows = []
            analyses = []
            for size, storage, given in sizes:
                n = int(size)
                design = (
                    auto_design(n, D, WORKERS * THREADS)
                    if given is None
                    else dd.RegularDesign(k=given[0], block_size=given[1])
                )
                chunk = getattr(design, "block_size", 10_000)
                if storage == "s3":
                    location, store_options = f"s3://plan/x{n}.zarr", options
                else:
                    location, store_options = str(folder / f"x{n}.zarr"), None
                write_store(location, n, chunk, store_options)
                if not args.smoke:
                    cluster, client = _cluster()
                try:
                    _warm(client, warm_store)
                    if storage == "s3":  # the workers' S3 sessions too (warm workers)
                        _best_fit(client, "s3://plan/small.zarr", options, repeats=1)
                    client.run(_start_sampler)
                    est = dd.DPPCA(
                        n_components=2,
                        design="auto" if given is None else design,
                        scheduler=client,
                        random_state=0,
                    )
                    plan = est.plan(location, storage_options=store_options, machine=model)
                    cpu = sum(client.run(_cpu_seconds).values())
                    start = time.perf_counter()
                    est.fit(location, storage_options=store_options)
                    wall = time.perf_counter() - start
                    cpu = sum(client.run(_cpu_seconds).values()) - cpu
                    peak = max(client.run(_stop_sampler).values())
                    if args.analysis:
                        analyses.append(
                            _analysis_row(
                                client, location, store_options, given, design, model, warm_store
                            )
                        )
                finally:
                    client.close()
                    cluster.close()
                assert est.privacy_["n_blocks"] == plan.design["n_blocks"]
                name = plan.design["design"]
                if name == "regular":
                    name += f" k={plan.design['partners_k']} b={plan.design['block_size']}"
                row = (
                    n,
                    storage,
                    name,
                    plan.design["n_blocks"],
                    plan.n_tasks,
                    plan.wall_seconds,
                    wall,
                    plan.peak_worker_bytes / 2**20,
                    peak / 2**20,
                    (plan.time["pair_seconds"] + plan.time["read_seconds"]) * WORKERS * THREADS,
                    cpu,
                )
                rows.append(row)
                print(
                    f"{n:>9} {storage:7} {name:22} {row[3]:>6} {row[4]:>6} "
                    f"{row[5]:>8.2f}s {row[6]:>8.2f}s {row[6] / row[5]:>6.2f} "
                    f"{row[7]:>6.0f}MiB {row[8]:>6.0f}MiB {row[8] / row[7]:>6.2f} "
                    f"{row[9]:>8.2f}s {row[10]:>8.2f}s {row[10] / row[9]:>6.2f}",
                    flush=True,
                )
        finally:
            if server is not None:
                server.kill()
                server.wait(timeout=30)
    if analyses:
        _print_analyses(analyses)
    walls = [r[6] / r[5] for r in rows]
    peaks = [r[8] / r[7] for r in rows]
    cpus = [r[10] / r[9] for r in rows]
    print(
        f"\nmeasured / predicted: wall {min(walls):.2f}-{max(walls):.2f}, peak memory "
        f"{min(peaks):.2f}-{max(peaks):.2f}, workers' CPU / predicted work "
        f"{min(cpus):.2f}-{max(cpus):.2f} (target within 1.3x: "
        f"{sum(1 / 1.3 <= w <= 1.3 for w in walls)}/{len(walls)} walls, "
        f"{sum(1 / 1.3 <= p <= 1.3 for p in peaks)}/{len(peaks)} peaks); load average "
        f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    main()
