"""The road to a terabyte, on paper and by simulation (docs/scale.md).

A script, not a test:

    python benchmarks/bench_terabyte.py            # n = 4 x 10^9, d = 32 (1 TB of float64)
    python benchmarks/bench_terabyte.py --smoke    # n = 4 x 10^6, seconds

No data exists anywhere: the input is a Zarr store of that shape with its metadata only
(no chunk is written, and none is read: a plan reads metadata, and building a graph reads
nothing).  In one run it prints

1. for 10, 100 and 1000 workers of 16 threads (64 GiB each): the design ``"auto"``
   picks, its blocks and tasks, bytes read, peak memory per worker and the predicted
   wall time (``DPPCA.plan``, on the machine model saved here or the built-in
   default), and what the rule before the scheduler limit would have planned;
2. the graph of the 100-worker fit built lazily from the stand-in, as ``fit`` builds it
   (``Records.blocks`` then ``kernel_sum_graph``): its tasks, the bytes of the graph as
   pickled for the scheduler, the client's memory for it, and the time to build it;
3. the scheduler's cost per task measured here: no-op tasks in the same graph shape (the
   same lanes of chained tasks, the same shared inputs per lane, fewer lanes) on a
   LocalCluster of two single-threaded workers; its seconds and memory per task.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import sys
import tempfile
import time
import warnings


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def stand_in(folder: str, n: int, d: int, chunk: int) -> str:
    """A Zarr store of shape (n, d), float64, in chunks of ``chunk`` rows: metadata only."""
    import zarr

    path = os.path.join(folder, f"standin-{chunk}.zarr")
    zarr.create_array(path, shape=(n, d), chunks=(chunk, d), dtype="f8", overwrite=True)
    return path


def _old_rule(n: int, d: int, threads: int):
    """The auto rule before the scheduler limit (blocks not grown): (k, block, blocks)."""
    from dask_dppca.design import AUTO_FLOPS_PER_THREAD
    from dask_dppca.kernel import DEFAULT_MEMORY_BUDGET, tile_rows_for_budget

    budget = AUTO_FLOPS_PER_THREAD * threads
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d)
    block = int(min(16384, max(1024, budget / (4.0 * d * n)))) // tile * tile
    k = max(1, int(budget / (2.0 * n * block * d)) - 1)
    return k, block, -(-n // block)


def section_plans(folder: str, n: int, d: int, workers: list[int], threads: int):
    import dask_dppca as dd
    from dask_dppca.design import auto_design

    print(
        f"1. plans for n = {n:.3g}, d = {d} ({n * d * 8 / 1e12:.3g} TB), {threads} threads a worker"
    )
    stores = {}
    for w in workers:
        design = auto_design(n, d, w * threads)
        store = stand_in(folder, n, d, design.block_size)
        stores[w] = store
        started = time.perf_counter()
        plan = dd.DPPCA(n_components=2).plan(
            store, workers=w, threads=threads, memory_limit="64GiB", check=False
        )
        seconds = time.perf_counter() - started
        k, block, blocks = _old_rule(n, d, w * threads)
        des, g, m, t = plan.design, plan.graph, plan.memory, plan.time
        print(
            f"  {w:>5} workers: regular k={des['partners_k']}, blocks of {des['block_size']} "
            f"({des['n_blocks']} blocks, {des['n_block_pairs']} block pairs, "
            f"{des['n_pairs']:.3g} pairs); {g['n_tasks']} tasks ({g['lane_tasks']} in "
            f"{g['n_lanes']} lanes, {g['input_tasks']} input ({g['shared_blocks']} shared blocks), "
            f"{g['merge_tasks']} merge); "
            f"read {plan.bytes_read / 1e12:.3g} TB; peak {m['peak_bytes'] / 2**30:.3g} GiB a "
            f"worker; wall {t['wall_seconds'] / 60:.3g} min (pairs {t['pair_seconds'] / 60:.3g}"
            f" min, reads {t['read_seconds'] / 60:.3g} min, tasks {t['task_seconds'] / 60:.3g} "
            f"min); fits: {plan.fits}; planned in {seconds:.1f} s"
        )
        print(
            f"         before the scheduler limit: k={k}, blocks of {block}: {blocks} blocks, "
            f"about {int(blocks * (1 + k / 2))} block pairs"
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
    from dask_dppca.io import open_records

    print(f"\n2. the graph for {workers} workers x {threads} threads, built lazily (no data)")
    gc.collect()
    before = _rss()
    started = time.perf_counter()
    records = open_records(store)
    n, d = records.shape
    _, plan = plan_blocks(n, d, records.row_chunks, "auto", workers * threads)
    planned = time.perf_counter()
    lane_sums = kernel_sum_graph(
        records.blocks(plan.block_sizes), plan, dd.sphere(), workers * threads
    )
    graph = dask.base.collections_to_expr(lane_sums, optimize_graph=True).__dask_graph__()
    built = time.perf_counter()
    held = _rss() - before
    tasks = len(graph)
    size = len(cloudpickle.dumps(dict(graph), protocol=pickle.HIGHEST_PROTOCOL))
    print(
        f"  {tasks} tasks (+1 release); planned in {planned - started:.1f} s, graph built in "
        f"{built - planned:.1f} s; pickled {size / 2**20:.0f} MiB ({size / tasks:.0f} B a task);"
        f" client memory {held / 2**20:.0f} MiB ({held / tasks:.0f} B a task)"
    )


def section_scheduler(
    store: str, workers: int, threads: int, lanes: int, processes: bool = True
) -> None:
    """No-op tasks in the plan's graph shape, fewer lanes, on this machine."""
    from distributed import Client, LocalCluster

    from dask_dppca.design import plan_blocks
    from dask_dppca.graph.lanes import _layout
    from dask_dppca.io import open_records

    records = open_records(store)
    n, d = records.shape
    _, plan = plan_blocks(n, d, records.row_chunks, "auto", workers * threads)
    tasks, all_lanes, blocks_of, _, shared = _layout(plan, workers * threads)
    chosen = all_lanes[:: max(1, len(all_lanes) // lanes)][:lanes]
    layer: dict = {}
    ends = []
    for number, lane in enumerate(chosen):
        previous = None
        for task in lane:
            inputs = [f"block-{b}" for b in blocks_of[task] if b in shared]
            for key in inputs:
                layer.setdefault(key, (_no_op,))
            key = f"lane-{number}-{task}"
            layer[key] = (_no_op, previous, *inputs)
            previous = key
        ends.append(previous)
    count = len(layer)
    print(
        f"\n3. the scheduler's cost per task: {count} no-op tasks, {len(chosen)} of the "
        f"{len(all_lanes)} lanes of the {workers}-worker graph ({len(all_lanes[0])} tasks a lane)"
    )
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=processes,
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        client.submit(_no_op).result()  # warm
        gc.collect()
        before = client.run_on_scheduler(_rss)
        started = time.perf_counter()
        futures = client.get(layer, ends, sync=False)
        peak = before
        while not all(f.done() for f in futures):
            peak = max(peak, client.run_on_scheduler(_rss))
            time.sleep(0.2)
        client.gather(futures)
        seconds = time.perf_counter() - started
    per_task = seconds / count
    print(
        f"  {seconds:.1f} s: {per_task * 1e3:.3f} ms a task; this process (client and "
        f"scheduler) grew by at most {(peak - before) / 2**20:.0f} MiB "
        f"({(peak - before) / count / 1024:.1f} KiB a task)"
    )


def _no_op(*args):
    return None


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
        section_graph(stores[middle], middle, threads)
        # The smoke run's workers are threads of this process (it starts in a second).
        section_scheduler(
            stores[middle],
            middle,
            threads,
            lanes=4 if args.smoke else 100,
            processes=not args.smoke,
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
