"""The road to a terabyte, on paper and by simulation (docs/scale.md).

A script, not a test:

    python benchmarks/bench_terabyte.py            # n = 4 x 10^9, d = 32 (1 TB of float64)
    python benchmarks/bench_terabyte.py --smoke    # n = 4 x 10^6, seconds

No data exists anywhere: the input is a Zarr store of that shape with its metadata only
(no chunk is written, and none is read: a plan reads metadata, and building a graph reads
nothing).  In one run it prints

1. for 10, 100 and 1000 workers of 16 threads (64 GiB each), for a store chunked like the
   design's blocks and for one in 32 MiB chunks (131072 rows): the design ``"auto"``
   picks, its blocks, the graph's tasks (segments, merges), the block reads and rows
   decoded, peak memory per worker and the predicted wall time with its parts
   (``DPPCA.plan``, on the machine model saved here or the built-in default);
2. the graph of the 100-worker fit built lazily from each stand-in, as ``fit`` builds it
   (``Records.blocks`` then ``kernel_sum_graph``): its tasks, the bytes of the graph as
   pickled for the scheduler, the client's memory for it, and the time to build it.

The scheduler's cost per task, and a cluster whose tasks sleep their modelled time at
the real task count, are ``benchmarks/bench_simulate.py``.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import sys
import tempfile
import time
import tracemalloc
import warnings


def stand_in(folder: str, n: int, d: int, chunk: int) -> str:
    """A Zarr store of shape (n, d), float64, in chunks of ``chunk`` rows: metadata only."""
    import zarr

    path = os.path.join(folder, f"standin-{chunk}.zarr")
    zarr.create_array(path, shape=(n, d), chunks=(chunk, d), dtype="f8", overwrite=True)
    return path


#: What zarr users write: 32 MiB chunks of float64 at d = 32.
CHUNK_32MIB = 131072


def section_plans(folder: str, n: int, d: int, workers: list[int], threads: int):
    import dask_dppca as dd
    from dask_dppca.design import auto_design

    print(
        f"1. plans for n = {n:.3g}, d = {d} ({n * d * 8 / 1e12:.3g} TB), {threads} threads a worker"
    )
    stores = {}
    for w in workers:
        design = auto_design(n, d, w * threads)  # its blocks, for a store chunked like them
        for chunk in (design.block_size, CHUNK_32MIB):
            store = stand_in(folder, n, d, chunk)
            stores[w, chunk] = store
            started = time.perf_counter()
            plan = dd.DPPCA(n_components=2).plan(
                store, workers=w, threads=threads, memory_limit="64GiB", check=False
            )
            seconds = time.perf_counter() - started
            des, g, m, t = plan.design, plan.graph, plan.memory, plan.time
            print(
                f"  {w:>5} workers, chunks of {chunk}: regular k={des['partners_k']}, blocks of "
                f"{des['block_size']} ({des['n_blocks']} blocks, {des['n_block_pairs']} block "
                f"pairs, {des['n_pairs']:.3g} pairs); {g['n_tasks']} tasks "
                f"({g['worker_tasks']} worker tasks of {g['worker_task_threads']} threads "
                f"running {g['segment_tasks']} segments of {g['block_pair_tasks']} groups, "
                f"{g['merge_tasks']} merge, {g['input_tasks']} input); {g['block_reads']} block "
                f"reads, {g['rows_decoded'] / n:.3g}x the rows decoded; peak "
                f"{m['peak_bytes'] / 2**30:.3g} GiB a worker; wall {t['wall_seconds'] / 60:.3g} "
                f"min (pairs {t['pair_seconds'] / 60:.3g} min, reads {t['read_seconds'] / 60:.3g}"
                f" min, makespan {t['makespan_seconds'] / 60:.3g} min, tasks "
                f"{t['task_seconds'] / 60:.3g} min = {t['task_seconds'] / t['wall_seconds']:.1%}"
                f"); fits: {plan.fits}; planned in {seconds:.1f} s"
            )
            for problem in plan.problems:
                print(f"         problem: {problem}")
    print(f"  machine model: {plan.time['machine_model']}")
    return stores


def section_graph(store: str, workers: int, threads: int) -> None:
    import cloudpickle
    import dask

    import dask_dppca as dd
    from dask_dppca.design import plan_blocks
    from dask_dppca.graph import kernel_sum_graph
    from dask_dppca.graph.worker_tasks import WorkerTasks
    from dask_dppca.io import open_records

    print(f"  {store.rsplit('/', 1)[-1]}:")
    started = time.perf_counter()
    records = open_records(store)
    n, d = records.shape
    _, plan = plan_blocks(n, d, records.row_chunks, "auto", workers * threads)
    planned = time.perf_counter()
    blocks = records.blocks(plan.block_sizes)

    cluster = WorkerTasks(workers, threads, 64 * 2**30)  # as the plans above

    def build():
        lane_sums = kernel_sum_graph(blocks, plan, dd.sphere(), workers * threads, cluster=cluster)
        return dask.base.collections_to_expr(lane_sums, optimize_graph=True).__dask_graph__()

    graph = build()
    built = time.perf_counter()
    tasks = len(graph)
    size = len(cloudpickle.dumps(dict(graph), protocol=pickle.HIGHEST_PROTOCOL))
    del graph
    gc.collect()
    # The graph's own memory in the client: what the build allocates and the graph keeps
    # (Python's allocations, traced in a second build; the plan is held either way).
    tracemalloc.start()
    graph = build()
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(graph) == tasks
    print(
        f"    {tasks} tasks (+1 release); planned in {planned - started:.1f} s, graph built in "
        f"{built - planned:.2f} s; pickled {size / 2**20:.1f} MiB ({size / tasks:.0f} B a "
        f"task); the graph holds {held / 2**20:.1f} MiB of the client's memory (peak "
        f"{peak / 2**20:.1f} MiB while built)"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="n = 4 x 10^6, one worker (seconds)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    n, d, threads = (4_000_000 if args.smoke else 4_000_000_000), 32, 16
    workers = [1] if args.smoke else [10, 100, 1000]
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        stores = section_plans(folder, n, d, workers, threads)
        middle = workers[len(workers) // 2]
        print(f"\n2. the graph for {middle} workers x {threads} threads, built lazily (no data)")
        for (w, _), store in sorted(stores.items()):
            if w == middle:
                section_graph(store, middle, threads)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
