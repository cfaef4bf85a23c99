"""``dask-dppca bench``: a quick check of this machine (figures, not pass/fail).

Prints two comparisons, each measured in the same run so that the ratio means something
on a busy machine too:

1. the kernel against GEMM: a within-block sum of n rows (n^2 / 2 pairs, about 4 d flops
   each, so 2 n^2 d flops, docs/method.md, section 7) against the numpy product of the same
   shape, (n x d) @ (d x n), also 2 n^2 d flops, both on one thread;
2. an end-to-end fit of an in-memory array on the default path (the active client or
   the embedded cluster; the first fit starts it) against ``scheduler="threads"``.

benchmarks/bench_kernel.py and benchmarks/bench_scale.py measure the same things in depth.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from dataclasses import replace

from .inputs import storage_options


def add_parser(commands) -> None:
    """Register ``bench`` on the ``dask-dppca`` sub-command parser."""
    bench = commands.add_parser(
        "bench",
        help="measure the kernel against GEMM and a small fit on this machine (seconds)",
        description=(
            "Measures, on this machine, the kernel's rate against a single-threaded numpy "
            "GEMM of the same shape, and the time of a small fit on the default path (the "
            "embedded cluster, or the active client) against scheduler='threads'. Prints "
            "figures; nothing passes or fails."
        ),
    )
    bench.add_argument(
        "--block-rows", type=int, default=2048, help="rows of the kernel's block (default 2048)"
    )
    bench.add_argument(
        "--n-samples", type=int, default=20_000, help="records of the fitted data (default 20000)"
    )
    bench.add_argument(
        "--n-features",
        type=int,
        default=30,
        help="features, for the kernel and the fit (default 30)",
    )
    bench.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed repeats of the kernel and GEMM; the best is shown (default 3)",
    )
    bench.add_argument(
        "--save",
        nargs="?",
        const="",
        metavar="FILE",
        help="measure this machine's model (kernel rate per d, read rate per codec, the "
        "cost of a task, an idle worker's memory) and save it for 'dask-dppca plan': in "
        "FILE, or by default in the user's configuration folder "
        "(~/.config/dask-dppca/machine.json on Linux; Dask configuration key "
        "dask-dppca.machine-model)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="with --save: smaller loops (a less precise model, in a few seconds)",
    )
    bench.add_argument(
        "--reads-at",
        action="append",
        default=[],
        metavar="LOCATION",
        help="with --save: also measure reads where fits will read from, e.g. "
        "s3://bucket/scratch (a folder or URL you may write: two small stores of random "
        "rows are written there, read and removed); repeatable, one per storage",
    )
    bench.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option for --reads-at URLs, as for 'dask-dppca fit'",
    )
    bench.add_argument(
        "--storage-options-json", metavar="FILE", help="JSON object of fsspec options"
    )
    bench.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the kernel-versus-GEMM and default-versus-threads figures."""
    import numba
    import numpy as np

    from ..version import installed_version

    if min(args.block_rows, args.n_samples, args.n_features) < 2 or args.repeats < 1:
        raise ValueError("--block-rows, --n-samples and --n-features must be >= 2, --repeats >= 1")
    print(
        f"dask-dppca {installed_version()} on {platform.node() or 'this machine'}: "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}, "
        f"numba {numba.__version__}"
    )
    if args.reads_at and args.save is None:
        raise ValueError("--reads-at: measures reads for the saved model; add --save")
    if args.save is not None:
        options = storage_options(args.storage_options_json, args.storage_option)
        return _save_model(args.save or None, args.quick, args.reads_at, options or None)
    _kernel_against_gemm(args.block_rows, args.n_features, args.repeats)
    _default_path_against_threads(args.n_samples, args.n_features)
    return 0


def _save_model(path: str | None, quick: bool, reads_at: list[str], options: dict | None) -> int:
    """Measure the machine model (and reads at ``reads_at``), save it, and print it."""
    from ..io.storage import check_storage_options, is_url, storage_kind
    from ..planning.machine import save_machine_model
    from .measure import measure_machine_model, measure_reads

    # fsspec options go to URLs; a local folder takes none (checked before measuring).
    options_of = {
        location: check_storage_options(options, location, "--reads-at")
        if is_url(location)
        else None
        for location in reads_at
    }
    model = measure_machine_model(quick=quick)
    rates, calls = dict(model.read_bytes_per_second), dict(model.read_call_seconds)
    for location, location_options in options_of.items():
        key = f"{storage_kind(location)}/zstd"
        rates[key], calls[key] = measure_reads(
            location, storage_options=location_options, quick=quick
        )
    model = replace(model, read_bytes_per_second=rates, read_call_seconds=calls)
    where = save_machine_model(model, path)
    print(f"\nmachine model ({model.source}):")
    for d, rate in sorted(model.kernel_pairs_per_second.items()):
        print(f"  kernel, d = {d:<5d}                {rate / 1e6:10.1f} M pairs/s a core")
    for d, cost in sorted(model.kernel_row_seconds.items()):
        print(f"  kernel's row preparation, d = {d:<4d}{cost * 1e9:10.1f} ns a row")
    for key, rate in sorted(model.read_bytes_per_second.items()):
        call = model.read_call(key) * 1e3
        print(f"  reads, {key:<24s} {rate / 2**20:10.1f} MiB/s a thread, {call:.3f} ms a read")
    print(f"  a graph task                     {model.task_seconds * 1e3:10.3f} ms")
    print(f"  a fit's fixed cost               {model.fixed_seconds:10.3f} s")
    print(f"  an idle worker                   {model.worker_baseline_bytes / 2**20:10.1f} MiB")
    for d, cost in sorted(model.scree_histogram_seconds.items()):
        sums = model.scree_sum_seconds.get(d, float("nan"))
        print(
            f"  scree, d = {d:<5d}                 {cost * 1e9:10.2f} ns a pair and value "
            f"(histograms), {sums * 1e9:.2f} (sums)"
        )
    print(f"  a quantile scan's noise draw     {model.noise_draw_seconds * 1e9:10.1f} ns")
    print(f"  the embedded cluster's start     {model.start_seconds:10.3f} s")
    for title, cost in sorted(model.stage_seconds.items()):
        print(f"  fixed cost: {title:<20s} {cost:10.3f} s")
    print(f"saved to {where}")
    return 0


def _kernel_against_gemm(n: int, d: int, repeats: int) -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from ..kernel import block_pair_sum

    rng = np.random.default_rng()  # fresh data each run: the timings do not depend on it
    rows = rng.standard_normal((n, d))
    other = rng.standard_normal((n, d))
    product = np.empty((n, n))
    block_pair_sum(rows[:64])  # compiles the numba pass, or loads it from the cache
    with threadpool_limits(1):
        kernel = _best_time(lambda: block_pair_sum(rows), repeats)
        gemm = _best_time(lambda: np.matmul(rows, other.T, out=product), repeats)
    flops = 2.0 * n * n * d
    print(
        f"\nkernel: within-block sum of {n} rows x {d} features (sphere), 1 thread, 2 n^2 d flops"
    )
    print(
        f"  kernel                          {kernel:8.4f} s  {flops / kernel / 1e9:7.2f} GFLOP/s"
        f"  {n * (n - 1) / 2 / kernel / 1e6:8.1f} Mpairs/s"
    )
    print(f"  GEMM ({n} x {d}) @ ({d} x {n})  {gemm:8.4f} s  {flops / gemm / 1e9:7.2f} GFLOP/s")
    print(f"  kernel rate / GEMM rate         {gemm / kernel:8.3f}")


def _default_path_against_threads(n: int, d: int) -> None:
    import numpy as np

    from .. import DPPCA
    from ..datasets import make_elliptical, random_directions, spiked_spectrum

    entropy = np.random.SeedSequence().generate_state(2)  # fresh data each run, from the OS
    data = make_elliptical(
        n,
        spiked_spectrum(d, n_spikes=2),
        random_directions(d, seed=int(entropy[0])),
        df=1.0,
        seed=int(entropy[1]),
    )

    def fit(scheduler=None, rows=data):
        DPPCA(n_components=2, scheduler=scheduler, progress=False).fit(rows)

    print(f"\nfit: {n} records x {d} features in memory, 2 components, default design")
    fit("threads", data[:500])  # this process's one-time costs (imports, first calls)
    threads = _best_time(lambda: fit("threads"), 1)
    first = _best_time(fit, 1)
    later = _best_time(fit, 1)
    print(f"  scheduler='threads'             {threads:8.3f} s")
    print(
        f"  default path, first fit         {first:8.3f} s  {first / threads:6.2f} x threads"
        "  (starts the embedded cluster unless a client is active)"
    )
    print(f"  default path, second fit        {later:8.3f} s  {later / threads:6.2f} x threads")


def _best_time(call: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best
