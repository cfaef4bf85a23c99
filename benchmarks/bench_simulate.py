"""A simulated cluster at the real task count: the fit's graph with sleeping tasks.

A script, not a test:

    python benchmarks/bench_simulate.py            # n = 4 x 10^9, d = 32 (1 TB), 100 x 16
    python benchmarks/bench_simulate.py --smoke    # n = 4 x 10^6, 1 worker x 4 threads

No data exists anywhere: each input is a Zarr store with its metadata only (chunks of
12288 rows, and 32 MiB chunks of 131072 rows).  For each, the plan of the fit
(``DPPCA.plan``, on the machine model saved here or the built-in default) gives the
segments of the fused graph (``graph_layout``: a few segment tasks a thread); every
segment's modelled seconds are recomputed here from the same public pieces as the plan
(per block-pair group: pairs / pair rate + a kernel call per pair + a row cost per row;
per segment: its groups plus the chunks it decodes / read rate + a read call per block).

A real Dask scheduler (``distributed.LocalCluster``, workers in this process, as many
workers and threads as the plan's cluster) then runs the graph's structure with the same
task count: one task per segment sleeping its modelled seconds / ``--factor``, the
segments' sums merged 8 at a time (tasks that do nothing, each on its 8 inputs) down to
at most 8, and one release task on those.  The wall (submission to gather) is compared
with a prediction: the segments' sleeps packed on the threads (longest first onto the
least loaded), + the task count x the scheduler's cost per task, + a fixed cost, the last
two measured on the same cluster just before (a graph of independent no-op tasks, and
one task's round trip).

The "before" row is the graph as it was before commit 3589c98 (no segments): the plan's
block-pair groups cut into 2 lanes a thread of consecutive groups, each group a task
chained to the previous one of its lane, sleeping its own modelled seconds / factor (its
segment's reads spread evenly over its groups), the lanes merged 8 at a time, one
release.  At 100 workers that is ~490 000 tasks, too many for this machine in minutes:
``--before-fraction F`` runs every F-th lane on 1/F of the workers (the same lanes, two
a thread) and extrapolates to the whole graph, saying so.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from datetime import date

N_FULL, N_SMOKE, D = 4_000_000_000, 4_000_000, 32
CHUNKS = (12288, 131072)  # rows: 96 KiB chunks, and 32 MiB chunks
#: The cases of docs/scale.md's "Scale without knobs": (n, d, row chunk, dtype, workers,
#: threads a worker, memory limit).  Only worker tasks are simulated for them (two
#: threads a simulated worker: one for its worker task, one for the merges).
CASES = {
    "wide-2000": (1_000_000, 2000, 2048, "f8", 100, 16, "16GiB"),
    "wide-10000": (100_000, 10_000, 512, "f8", 100, 16, "16GiB"),
    "embeddings": (10_000_000, 1536, 2730, "f4", 100, 16, "64GiB"),
    "terabyte-1000": (8_000_000_000, 16, 131072, "f8", 1000, 16, "64GiB"),
}
LANES_PER_THREAD = 2  # the lanes of the graph before segments
MERGE_FANIN = 8  # sums a merge task adds


def _sleep(seconds, *inputs):
    """A simulated task: its modelled seconds asleep (the thread held, the GIL free)."""
    if seconds > 0:
        time.sleep(seconds)


def _no_op(*inputs):
    return None


def stand_in(folder: str, n: int, d: int, chunk: int, dtype: str = "f8") -> str:
    """A Zarr store of shape (n, d) in chunks of ``chunk`` rows: metadata only."""
    import zarr

    path = os.path.join(folder, f"standin-{n}-{d}-{chunk}.zarr")
    zarr.create_array(path, shape=(n, d), chunks=(chunk, d), dtype=dtype, overwrite=True)
    return path


def makespan(seconds: list[float], threads: int) -> float:
    """Longest first onto the least loaded of ``threads`` (each item runs on one)."""
    loads = [0.0] * max(1, min(threads, len(seconds)))
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(loads, loads[0] + s)
    return max(loads)


def modelled(store: str, workers: int, threads: int, model, memory_limit: str = "64GiB") -> dict:
    """The plan of the fit of ``store``; every worker task's, segment's and group's
    modelled seconds (the segments and groups as the graph before worker tasks ran them).
    """
    import dask_dppca as dd
    from dask_dppca.design import plan_blocks
    from dask_dppca.graph import graph_layout
    from dask_dppca.io import open_records
    from dask_dppca.planning.fit_plan import modelled_seconds

    started = time.perf_counter()
    fit_plan = dd.DPPCA(n_components=2).plan(
        store,
        workers=workers,
        threads=threads,
        memory_limit=memory_limit,
        check=False,
        machine=model,
    )
    records = open_records(store)
    n, d = records.shape
    _, plan = plan_blocks(n, d, records.row_chunks, "auto", workers * threads)
    blocks = records.blocks(plan.block_sizes)
    storage, codec = fit_plan.input["storage"], fit_plan.input["codec"]
    layout = graph_layout(blocks, plan, workers * threads, fit_plan.cluster.worker_tasks)
    work, reads = modelled_seconds(plan, layout, model, d * 8, storage, codec)
    prefix = [0.0, *itertools.accumulate(work)]
    segment_work = [prefix[b] - prefix[a] for a, b in layout.segments]
    per = layout.batch.threads
    worker_tasks = [
        makespan(segment_work[a:b], per) + r / per for (a, b), r in zip(layout.worker_tasks, reads)
    ]
    # the graph before worker tasks: a task a segment, each reading its own blocks
    before = graph_layout(blocks, plan, workers * threads)
    _, segment_reads = modelled_seconds(plan, before, model, d * 8, storage, codec)
    segments = [w + r for w, r in zip(segment_work, segment_reads)]
    # each group with its segment's reads spread evenly over the segment's groups
    groups = list(work)
    for (a, b), r in zip(before.segments, segment_reads):
        for t in range(a, b):
            groups[t] += r / (b - a)
    return {
        "fit_plan": fit_plan,
        "layout": layout,
        "before": before,
        "worker_tasks": worker_tasks,
        "segments": segments,
        "groups": groups,
        "seconds": time.perf_counter() - started,
    }


def merge_tree(layer: dict, sums: list[str], prefix: str) -> str:
    """Merge tasks, ``MERGE_FANIN`` sums each, down to at most that many, then a release."""
    level = 0
    while len(sums) > MERGE_FANIN:
        merged = []
        for number in range(0, len(sums), MERGE_FANIN):
            key = f"{prefix}-merge-{level}-{number // MERGE_FANIN}"
            layer[key] = (_no_op, *sums[number : number + MERGE_FANIN])
            merged.append(key)
        sums, level = merged, level + 1
    key = f"{prefix}-release"
    layer[key] = (_no_op, *sums)
    return key


def merge_tasks(sums: int) -> int:
    """Tasks :func:`merge_tree` adds over ``sums`` sums, the release included."""
    count = 1
    while sums > MERGE_FANIN:
        sums = -(-sums // MERGE_FANIN)
        count += sums
    return count


def segment_graph(segments: list[float], factor: float, prefix: str) -> tuple[dict, str]:
    """The fused graph: a sleeping task per segment, the merge tree, the release."""
    layer: dict = {}
    sums = []
    for number, seconds in enumerate(segments):
        key = f"{prefix}-segment-{number}"
        layer[key] = (_sleep, seconds / factor)
        sums.append(key)
    return layer, merge_tree(layer, sums, prefix)


def worker_task_graph(seconds: list[float], factor: float, prefix: str) -> tuple[dict, str]:
    """The graph now: a sleeping task per worker task, each needing the one resource its
    worker offers (one a worker at a time), the merge tree, the release."""
    layer: dict = {}
    sums = []
    for number, span in enumerate(seconds):
        key = f"{prefix}-segment-{number}"  # the work-done plugin's name for kernel tasks
        layer[key] = (_sleep, span / factor)
        sums.append(key)
    return layer, merge_tree(layer, sums, prefix)


def lanes(n_groups: int, n_lanes: int) -> list[tuple[int, int]]:
    """The graph before segments: consecutive groups in ``n_lanes`` lanes."""
    n_lanes = max(1, min(n_lanes, n_groups))
    bounds = [n_groups * k // n_lanes for k in range(n_lanes + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def lane_graph(
    groups: list[float], chosen: list[tuple[int, int]], factor: float, prefix: str
) -> tuple[dict, str]:
    """A task per block-pair group, chained in its lane; the lanes' ends merged."""
    layer: dict = {}
    ends = []
    for number, (first, stop) in enumerate(chosen):
        previous = None
        for task in range(first, stop):
            key = f"{prefix}-lane-{number}-{task}"
            layer[key] = (_sleep, groups[task] / factor) + ((previous,) if previous else ())
            previous = key
        ends.append(previous)
    return layer, merge_tree(layer, ends, prefix)


#: In-process workers share one process, so each worker's own background work runs on
#: the scheduler's cores, once per worker: its profiler samples the stacks of every thread
#: of the process (100 workers of 16: 100 x 1600 stacks every 10 ms), its system monitor
#: and event-loop tick run for all.  On a cluster each costs a worker its own process.
#: Profiling off and the two intervals longer, so the simulation measures the scheduler.
QUIET_WORKERS = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.admin.tick.interval": "1s",
}


def _work_done_plugin():
    """A scheduler plugin noting when the last sleeping (segment or lane) task finished."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class WorkDone(SchedulerPlugin):
        name = "bench-simulate-work-done"

        def __init__(self):
            self.last = None

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "memory" and ("-segment-" in key or "-lane-" in key):
                self.last = time.perf_counter()

    return WorkDone()


def simulate(
    layer: dict,
    final: str,
    workers: int,
    threads: int,
    probe: int,
    limit: float,
    resource: str | None = None,
):
    """Run ``layer`` on a fresh LocalCluster; its wall and the cluster's measured costs.
    ``resource``: every worker offers one, and the kernel tasks (``-segment-`` keys) need it.
    """
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set(QUIET_WORKERS):
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=threads,
            processes=False,
            dashboard_address=None,
            memory_limit=0,  # in-process workers would each count the whole process
            silence_logs=logging.ERROR,
            resources={resource: 1} if resource else None,
        )
        client = Client(cluster, timeout=60)
        try:
            if resource:
                kernel = [key for key in layer if "-segment-" in key]
                return _measure(cluster, client, layer, final, probe, limit, {resource: 1}, kernel)
            return _measure(cluster, client, layer, final, probe, limit)
        finally:
            client.close(timeout=30)
            cluster.close(timeout=60)


def _measure(
    cluster,
    client,
    layer: dict,
    final: str,
    probe: int,
    limit: float,
    needs: dict | None = None,
    kernel: list | None = None,
) -> dict:
    from distributed import wait

    def round_trip() -> float:
        started = time.perf_counter()
        client.submit(_no_op, pure=False).result(timeout=60)
        return time.perf_counter() - started

    # The client's own objects (the plans, the graph) are no scheduler's: out of the
    # collector's way, as they would be in a scheduler process of its own.
    gc.collect()
    gc.freeze()
    round_trip()  # warm
    fixed = min(round_trip() for _ in range(3))
    per_task = []
    for attempt in range(4):  # the first one warm-up (the workers' threads start)
        probe_layer = {f"probe-{attempt}-{i}": (_no_op,) for i in range(probe)}
        started = time.perf_counter()
        futures = client.get(probe_layer, list(probe_layer), sync=False)
        wait(futures, timeout=120)
        client.gather(futures)
        if attempt:
            per_task.append((time.perf_counter() - started - fixed) / probe)
        del futures
    plugin = _work_done_plugin()
    cluster.scheduler.add_plugin(plugin)
    executed = sum(w.state.executed_count for w in cluster.workers.values())
    started = time.perf_counter()
    if needs:  # Dask's public annotation of the kernel tasks' resource, as the fit sets it
        from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

        graph = HighLevelGraph(
            {
                "kernel": MaterializedLayer(
                    {k: layer[k] for k in kernel}, annotations={"resources": needs}
                ),
                "rest": MaterializedLayer({k: v for k, v in layer.items() if k not in kernel}),
            },
            {"kernel": set(), "rest": {"kernel"}},
        )
        futures = client.get(graph, [final], sync=False)
    else:
        futures = client.get(layer, [final], sync=False)
    wait(futures, timeout=limit)  # raises TimeoutError past the limit
    client.gather(futures)
    wall = time.perf_counter() - started
    ran = sum(w.state.executed_count for w in cluster.workers.values()) - executed
    del futures
    gc.unfreeze()
    return {
        "wall": wall,
        "fixed": fixed,
        "per_task": statistics.median(per_task),
        "ran": ran,
        "work_done": plugin.last - started,
    }


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds >= 120 else f"{seconds:.3g} s"


def report(name: str, sim: dict, n_tasks: int, span: float, factor: float) -> float:
    predicted = span / factor + n_tasks * sim["per_task"] + sim["fixed"]
    ratio = sim["wall"] / predicted
    print(
        f"  {name}: {n_tasks} tasks ({sim['ran']} ran), factor {factor:g}: measured "
        f"{sim['wall']:.1f} s, predicted {predicted:.1f} s = makespan {span / factor:.1f} s + "
        f"{n_tasks} x {sim['per_task'] * 1e3:.3f} ms + {sim['fixed'] * 1e3:.0f} ms; "
        f"measured / predicted {ratio:.3f}"
    )
    print(
        f"    the last sleeping task done at {sim['work_done']:.1f} s "
        f"({sim['work_done'] / predicted:.3f} of the prediction); the merges and the release "
        f"after it: {sim['wall'] - sim['work_done']:.1f} s"
    )
    sys.stdout.flush()
    return ratio


def run_case(name: str, factor: float, probe: int, model, workers: int | None = None) -> None:
    """One of :data:`CASES`: its plan, and its worker tasks on a simulated cluster
    (``workers`` instead of the case's own, for a cluster too large for one process)."""
    from dask_dppca.graph.worker_tasks import WORKER_TASK_RESOURCE

    n, d, chunk, dtype, case_workers, threads, limit = CASES[name]
    workers = workers or case_workers
    with tempfile.TemporaryDirectory() as folder:
        m = modelled(stand_in(folder, n, d, chunk, dtype), workers, threads, model, limit)
    plan, t, g, mem = m["fit_plan"], m["fit_plan"].time, m["fit_plan"].graph, m["fit_plan"].memory
    span = makespan(m["worker_tasks"], workers)
    print(
        f"{name}: {n:.3g} x {d} {dtype} in {chunk}-row chunks, {workers} x {threads} threads, "
        f"{limit}: design {plan.design['design']} (blocks of {plan.design['block_rows']}); "
        f"{g['worker_tasks']} worker tasks of {g['worker_task_threads']} threads and "
        f"{g['worker_task_sums']} sums, {g['n_tasks']} tasks; rows decoded "
        f"{g['rows_decoded'] / n:.3g}x the store; peak {mem['peak_bytes'] / 2**30:.3g} GiB of "
        f"{(mem['usable_bytes'] or 0) / 2**30:.3g} usable; fits: {plan.fits}; the plan: wall "
        f"{_minutes(t['wall_seconds'])} = makespan {_minutes(t['makespan_seconds'])} + "
        f"{g['n_tasks']} tasks {_minutes(t['task_seconds'])} "
        f"({t['task_seconds'] / t['wall_seconds']:.1%}) + fixed {t['fixed_seconds']:.2g} s "
        f"(planned in {m['seconds']:.1f} s)"
    )
    layer, final = worker_task_graph(m["worker_tasks"], factor, name)
    assert len(layer) == g["n_tasks"], (len(layer), g["n_tasks"])
    limit_s = 3 * (span / factor + len(layer) * 0.01) + 300
    sim = simulate(layer, final, workers, 2, probe, limit_s, WORKER_TASK_RESOURCE)
    report("worker tasks", sim, len(layer), span, factor)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="n = 4 x 10^6, 1 x 4 (seconds)")
    parser.add_argument("--workers", type=int, help="default 100 (smoke: 1)")
    parser.add_argument("--threads", type=int, help="per worker; default 16 (smoke: 4)")
    parser.add_argument(
        "--factor", type=float, help="modelled seconds / factor = sleep; default 2 (smoke: 25)"
    )
    parser.add_argument(
        "--before-fraction",
        type=int,
        help="run every F-th lane of the graph before segments on 1/F of the workers; "
        "default 10 (smoke: 1, the whole graph)",
    )
    parser.add_argument("--probe", type=int, default=3000, help="no-op tasks per cost probe")
    parser.add_argument(
        "--case",
        choices=sorted(CASES),
        help="simulate one of docs/scale.md's cases (worker tasks only) instead of the terabyte",
    )
    parser.add_argument(
        "--deadline", type=float, default=3000, help="seconds before the whole run is stopped"
    )
    args = parser.parse_args(argv)
    smoke = args.smoke
    n = N_SMOKE if smoke else N_FULL
    workers = args.workers or (1 if smoke else 100)
    threads = args.threads or (4 if smoke else 16)
    factor = args.factor or (25.0 if smoke else 2.0)
    fraction = args.before_fraction or (1 if smoke else 10)
    probe = min(args.probe, 200) if smoke else args.probe
    if workers % fraction:
        parser.error("--before-fraction must divide --workers")

    def give_up() -> None:
        print(f"stopped: still running after --deadline {args.deadline:g} s", flush=True)
        os._exit(3)

    watchdog = threading.Timer(args.deadline, give_up)
    watchdog.daemon = True
    watchdog.start()
    warnings.simplefilter("ignore")
    logging.getLogger("distributed").setLevel(logging.ERROR)

    from dask_dppca.graph.worker_tasks import WORKER_TASK_RESOURCE
    from dask_dppca.planning.machine import load_machine_model

    model = load_machine_model()
    if args.case:
        print(
            f"{date.today()}: load average {os.getloadavg()[0]:.2f} at the start; "
            f"{os.cpu_count()} CPUs; machine model: {model.source}"
        )
        run_case(args.case, args.factor or 4.0, probe, model, args.workers)
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
        return
    print(
        f"{date.today()}: load average {os.getloadavg()[0]:.2f} at the start; "
        f"{os.cpu_count()} CPUs; n = {n:.3g}, d = {D} ({n * D * 8 / 1e12:.3g} TB); "
        f"{workers} workers x {threads} threads in this process; factor {factor:g}; "
        f"machine model: {model.source}"
    )
    before = None
    with tempfile.TemporaryDirectory() as folder:
        for chunk in CHUNKS:
            m = modelled(stand_in(folder, n, D, chunk), workers, threads, model)
            plan, t, g = m["fit_plan"], m["fit_plan"].time, m["fit_plan"].graph
            span = makespan(m["worker_tasks"], workers)
            print(
                f"\nchunks of {chunk} rows: blocks of {plan.design['block_rows']} rows, "
                f"{g['block_pair_tasks']} block-pair groups in {g['segment_tasks']} segments, "
                f"{g['worker_tasks']} worker tasks of {g['worker_task_threads']} threads "
                f"(planned in {m['seconds']:.1f} s); the plan, unscaled: wall "
                f"{_minutes(t['wall_seconds'])} = makespan {_minutes(t['makespan_seconds'])} + "
                f"{g['n_tasks']} tasks {_minutes(t['task_seconds'])} + fixed "
                f"{t['fixed_seconds']:.2g} s (makespan recomputed here: {_minutes(span)}); "
                f"rows decoded {g['rows_decoded'] / n:.3g}x the store"
            )
            layer, final = worker_task_graph(m["worker_tasks"], factor, f"now-{chunk}")
            assert len(layer) == g["n_tasks"], (len(layer), g["n_tasks"])
            limit = 3 * (span / factor + len(layer) * 0.01) + 120
            sim = simulate(layer, final, workers, threads, probe, limit, WORKER_TASK_RESOURCE)
            report("worker tasks (now)", sim, len(layer), span, factor)
            seg_span = makespan(m["segments"], workers * threads)
            layer, final = segment_graph(m["segments"], factor, f"segments-{chunk}")
            limit = 3 * (seg_span / factor + len(layer) * 0.01) + 120
            sim = simulate(layer, final, workers, threads, probe, limit)
            report("a task a segment (before)", sim, len(layer), seg_span, factor)
            before = before or (m, sim)
        m, after_sim = before
        all_lanes = lanes(len(m["groups"]), LANES_PER_THREAD * workers * threads)
        chosen = all_lanes[::fraction]
        lane_seconds = [sum(m["groups"][a:b]) for a, b in all_lanes]
        chosen_seconds = [sum(m["groups"][a:b]) for a, b in chosen]
        full_tasks = len(m["groups"]) + merge_tasks(len(all_lanes))
        full_span = makespan(lane_seconds, workers * threads)
        t = m["fit_plan"].time
        print(
            f"\nbefore (lanes of chained block-pair tasks), chunks of {CHUNKS[0]} rows: "
            f"{len(all_lanes)} lanes, {full_tasks} tasks; the plan's model for it, unscaled: "
            f"{_minutes(full_span + full_tasks * model.task_seconds + t['fixed_seconds'])} = "
            f"makespan {_minutes(full_span)} + {full_tasks} tasks "
            f"{_minutes(full_tasks * model.task_seconds)} + fixed {t['fixed_seconds']:.2g} s"
        )
        layer, final = lane_graph(m["groups"], chosen, factor, "before")
        part_workers = workers // fraction
        part_span = makespan(chosen_seconds, part_workers * threads)
        if fraction > 1:
            print(
                f"  run: every {fraction}th lane ({len(chosen)} lanes, {len(layer)} tasks) on "
                f"{part_workers} workers x {threads} threads (2 lanes a thread, as in full)"
            )
        limit = 3 * (part_span / factor + len(layer) * 0.01) + 120
        sim = simulate(layer, final, part_workers, threads, probe, limit)
        report(
            "lanes (before)" + (f", 1/{fraction}" if fraction > 1 else ""),
            sim,
            len(layer),
            part_span,
            factor,
        )
        if fraction > 1:
            # the run's own cost per task beyond its sleeps and fixed cost, at full size
            own = (sim["wall"] - part_span / factor - sim["fixed"]) / len(layer)
            full = full_span / factor + full_tasks * own + after_sim["fixed"]
            probe_full = full_span / factor + full_tasks * after_sim["per_task"]
            print(
                f"  extrapolated to all {len(all_lanes)} lanes on {workers} workers: "
                f"{_minutes(full)} = makespan {full_span / factor:.1f} s + {full_tasks} tasks x "
                f"{own * 1e3:.3f} ms (this run's wall beyond its sleeps, per task); with the "
                f"{workers}-worker no-op cost ({after_sim['per_task'] * 1e3:.3f} ms a task): "
                f"{_minutes(probe_full + after_sim['fixed'])}"
            )
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
