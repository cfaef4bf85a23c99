"""Worker-wide tasks: a run of segments on a worker's threads, the same bits as one task
per block pair, each block read once a task, one task a worker at a time on a real
cluster, and a shape that fits the memory limit it is given.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter

import dask
import numpy as np
import pytest
import zarr

from dask_dppca.design import RegularDesign, plan_blocks
from dask_dppca.graph import graph_layout, kernel_sum_graph, lanes_total
from dask_dppca.graph.worker_tasks import (
    WORKER_BASELINE_BYTES,
    BatchShape,
    WorkerTasks,
    batch_shape,
    exact_sum_bytes,
    pause_fraction,
)
from dask_dppca.io import open_records
from dask_dppca.kernel.spatial_sign import sphere

from .test_segments import _reference_graph

pytestmark = pytest.mark.timeout(300)

RNG = np.random.default_rng(23)  # test data only


def _store(tmp_path, x, chunk):
    path = str(tmp_path / f"x{chunk}.zarr")
    zarr.open_array(path, mode="w", shape=x.shape, chunks=(chunk, x.shape[1]), dtype="f8")[:] = x
    return path


def _hostile(n: int, d: int) -> np.ndarray:
    x = RNG.standard_t(2, size=(n, d)) * np.geomspace(6.0, 0.2, d)
    x[::37] *= 1e6  # far rows: the exact path and wide exponents in the exact sums
    x[5::41] = x[4::41]  # exact duplicates
    return x


@pytest.mark.parametrize(
    "design",
    [
        "complete",
        RegularDesign(k=3, block_size=30, seed=4),
        RegularDesign(k=2, block_size=55),
        RegularDesign(k=3, block_size=25, seed=2, walk_group=4),
    ],
    ids=["complete", "regular-k3", "regular-k2-ragged", "regular-grouped"],
)
@pytest.mark.parametrize(
    "cluster",
    [
        WorkerTasks(1, 1, None),
        WorkerTasks(2, 3, None),
        WorkerTasks(3, 4, 2**30),
        WorkerTasks(2, 4, WORKER_BASELINE_BYTES + 2**20),  # one thread, one sum
    ],
    ids=["1x1", "2x3", "3x4", "2x4-tight"],
)
def test_worker_tasks_give_the_bits_of_one_task_per_block_pair(tmp_path, design, cluster):
    n, d = 700, 5
    x = _hostile(n, d)
    records = open_records(_store(tmp_path, x, 97))  # chunks across the blocks
    threads = cluster.workers * cluster.threads_per_worker
    _, plan = plan_blocks(n, d, records.row_chunks, design, threads)
    data = records.blocks(plan.block_sizes)
    layout = graph_layout(data, plan, threads, cluster)
    assert 1 <= len(layout.worker_tasks) <= 4 * cluster.workers
    got = dask.delayed(lanes_total)(
        *kernel_sum_graph(data, plan, sphere(), threads, cluster=cluster)
    )
    want = _reference_graph(data, plan, sphere())
    want, got = dask.compute(want, got, scheduler="threads")
    assert got.tobytes() == want.tobytes()


def test_a_worker_task_reads_each_of_its_blocks_once(tmp_path, monkeypatch):
    """Reads counted at the store: each worker task reads a block once, however many of
    its segments use it, and the layout the plan shows counts the same reads."""
    from dask_dppca.io import zarr_blocks

    n, d = 1500, 4
    records = open_records(_store(tmp_path, RNG.standard_normal((n, d)), 50))
    cluster = WorkerTasks(2, 4, None)
    design = RegularDesign(k=3, block_size=50, seed=2)
    _, plan = plan_blocks(n, d, records.row_chunks, design, 8)
    data = records.blocks(plan.block_sizes)
    layout = graph_layout(data, plan, 8, cluster)
    reads: Counter = Counter()
    lock = threading.Lock()
    real = zarr_blocks.ZarrBlocks.__getitem__

    def counted(self, selection):
        with lock:
            reads[selection[0].start] += 1
        return real(self, selection)

    monkeypatch.setattr(zarr_blocks.ZarrBlocks, "__getitem__", counted)
    sums = kernel_sum_graph(data, plan, sphere(), 8, cluster=cluster)
    dask.compute(*sums, scheduler="sync")
    assert sum(reads.values()) == layout.block_reads
    assert layout.block_reads < sum(layout.segment_reads)  # fewer than a read a segment
    assert max(reads.values()) <= len(layout.worker_tasks)


def test_a_broken_worker_task_that_drops_a_segment_is_caught_by_the_reference(
    tmp_path, monkeypatch
):
    """The oracle can fail: a worker task that skips its last segment differs."""
    from dask_dppca.graph import worker_tasks

    x = RNG.standard_normal((400, 4))
    records = open_records(_store(tmp_path, x, 50))
    _, plan = plan_blocks(400, 4, records.row_chunks, RegularDesign(k=1, block_size=50), 4)
    data = records.blocks(plan.block_sizes)
    real = worker_tasks.batch_task

    def broken(batch, reader):
        return real(dataclasses.replace(batch, segments=batch.segments[:-1]), reader)

    monkeypatch.setattr("dask_dppca.graph.lanes.batch_task", broken)
    cluster = WorkerTasks(1, 2, None)
    got = dask.delayed(lanes_total)(*kernel_sum_graph(data, plan, sphere(), 4, cluster=cluster))
    want, got = dask.compute(_reference_graph(data, plan, sphere()), got, scheduler="sync")
    assert got.tobytes() != want.tobytes()


def test_the_shape_is_the_most_threads_and_sums_that_fit():
    """Written out from the rule: the bytes a worker may use, less the baseline and the
    finished and merged sums, over one thread's bytes and one running sum."""
    d, per_thread = 10_000, 900 * 2**20
    exact = exact_sum_bytes(d)
    assert exact == 3 * 8 * d * (d + 1) // 2
    limit = 16 * 2**30
    shape = batch_shape(WorkerTasks(100, 16, limit), d, per_thread, finished_sums=1)
    room = limit * pause_fraction() - WORKER_BASELINE_BYTES - 2 * exact
    assert shape.threads == int((room - exact) // per_thread) < 16
    assert shape.sums == max(
        1, min(shape.threads, int((room - shape.threads * per_thread) // exact))
    )
    peak = WORKER_BASELINE_BYTES + 2 * exact + shape.threads * per_thread + shape.sums * exact
    assert peak <= limit * pause_fraction()
    assert batch_shape(WorkerTasks(1, 16, None), d, per_thread, 1) == BatchShape(16, 16)
    assert batch_shape(WorkerTasks(1, 16, 2**20), d, per_thread, 1) == BatchShape(1, 1)


@pytest.mark.timeout(120)
def test_on_a_cluster_one_worker_task_runs_a_worker_at_a_time(tmp_path):
    """Real workers: each declares the resource (the worker plugin), the fit's worker
    tasks carry it, no worker runs two at once, and K_hat keeps its bits."""
    from distributed import Client, LocalCluster, get_task_stream

    from dask_dppca.decomposition.reference import kendall_matrix
    from dask_dppca.graph.worker_tasks import WORKER_TASK_RESOURCE

    path = _store(tmp_path, _hostile(3000, 6), 250)
    want = kendall_matrix(path, scheduler="synchronous")
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        with get_task_stream(client) as stream:
            got = kendall_matrix(path, scheduler=client)
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        assert [w["resources"].get(WORKER_TASK_RESOURCE) for w in workers] == [1, 1]
        spans = [
            (record["worker"], span["start"], span["stop"])
            for record in stream.data
            if str(record["key"]).startswith("dppca-pairs-")
            for span in record["startstops"]
            if span["action"] == "compute"
        ]
    assert got.tobytes() == want.tobytes()
    assert spans
    for worker in {w for w, _, _ in spans}:
        mine = sorted((a, b) for w, a, b in spans if w == worker)
        assert all(b0 <= a1 for (_, b0), (a1, _) in zip(mine, mine[1:]))


@pytest.mark.parametrize("k", [1, 2, 3, 6])
@pytest.mark.parametrize("group", [2, 3, 8])
def test_a_grouped_walk_keeps_the_pairs_and_degrees(k, group):
    """Grouping the walk relabels the circulant graph's vertices only: with equal blocks
    the same pair count and largest degree (the sensitivity), every block pair once, a
    group's blocks consecutive in the walk."""
    n, block = 48 * 20, 20
    plain = RegularDesign(k=k, block_size=block, seed=5)
    grouped = RegularDesign(k=k, block_size=block, seed=5, walk_group=group)
    a, b = plain.plan((n,), 3), grouped.plan((n,), 3)
    assert (b.n_pairs, b.max_degree) == (a.n_pairs, a.max_degree)
    assert len(set(b.block_pairs)) == len(b.block_pairs)
    walk = grouped.walk(48).tolist()
    assert sorted(walk) == list(range(48))
    starts = [walk.index(g * group) for g in range(-(-48 // group))]
    for g, at in enumerate(starts):
        members = list(range(g * group, min(48, (g + 1) * group)))
        assert walk[at : at + len(members)] == members


def test_the_auto_rule_cuts_a_large_chunk_into_a_walk_group(tmp_path):
    """A terabyte of d = 16 in 131 072-row chunks on 1000 x 16: blocks of a quarter chunk,
    kept together in the walk, so the plan's worker tasks decode each chunk about once."""
    import dask_dppca as dd

    path = str(tmp_path / "tb.zarr")
    zarr.create_array(path, shape=(8 * 10**9, 16), chunks=(131072, 16), dtype="f8")
    plan = dd.DPPCA(2).plan(path, workers=1000, threads=16, memory_limit="64GiB")
    assert plan.design["block_size"] == 32768 and plan.design["walk_group"] == 4
    assert plan.graph["rows_decoded"] <= 1.1 * 8 * 10**9
    assert plan.graph["worker_tasks"] <= 4 * 1000
    assert plan.time["task_seconds"] <= 0.1 * plan.time["wall_seconds"]


@pytest.mark.timeout(120)
def test_a_cluster_with_no_worker_yet_gets_segment_tasks():
    """An adaptive cluster still starting its workers: no shape to cut worker tasks for,
    so each segment is a task (the fit's bounded waits then see workers come or not)."""
    from distributed import Client, LocalCluster

    from dask_dppca.compute.target import ClusterTarget

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        assert ClusterTarget(client).worker_tasks is None


class _Store:
    """A reader the shape of a Zarr store's (rows, chunk_rows, slicing), counting reads."""

    def __init__(self, x: np.ndarray, chunk_rows: int, fail: bool = False) -> None:
        self.x, self.shape, self.chunk_rows, self.fail = x, x.shape, chunk_rows, fail
        self.reads: list[tuple[int, int]] = []

    def __getitem__(self, selection):
        rows = selection[0]
        self.reads.append((rows.start, rows.stop))
        if self.fail:
            raise OSError("the store went away")
        return self.x[rows]


def _segment_of(blocks, starts, rows):
    from dask_dppca.graph.lane_task import Segment

    n = len(blocks)
    return Segment(
        sphere(), 16, 2, np.zeros((0, 2), np.int32), np.zeros(0, np.int32),
        np.asarray(blocks), np.asarray(rows), np.asarray(starts), np.zeros(n, np.int32),
    )  # fmt: skip


def test_blocks_inside_a_chunk_are_cut_from_one_read_and_errors_reach_every_reader():
    """Four blocks of 25 rows in one 100-row chunk: one read, the blocks' rows exact, the
    chunk dropped after its blocks' last use; a failed read raises in every thread."""
    from dask_dppca.graph.worker_tasks import SharedBlocks

    x = np.arange(400.0).reshape(200, 2)
    store = _Store(x, 100)
    segments = [_segment_of([0, 1], [0, 25], [25, 25]), _segment_of([2, 3], [50, 75], [25, 25])]
    shared = SharedBlocks(store, segments)
    for index, first in enumerate((0, 25, 50, 75)):
        assert np.array_equal(shared.get(index, first, 25), x[first : first + 25])
    assert store.reads == [(0, 100)]
    for index in range(4):
        shared.done(index)
    assert shared.held == {}
    broken = SharedBlocks(_Store(x, 100, fail=True), segments)
    errors = []

    def read(index):
        try:
            broken.get(index, 25 * index, 25)
        except OSError as error:
            errors.append(error)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(errors) == 4
