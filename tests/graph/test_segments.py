"""The fused graph: a few segment tasks a thread, the same bits as one task per block pair.

* The task count of a fit's graph is the public rule's, from n = 10^4 to 10^9 on lazy
  stand-in stores (metadata only: nothing is read), and does not grow with n on a fixed
  cluster.
* K_hat is bitwise equal between the fused graph and a one-pair-per-task reference graph
  kept here, over designs, chunkings (aligned and misaligned Zarr chunks, numpy, a dask
  array's own chunks) and thread counts.
"""

from __future__ import annotations

import dataclasses
import math

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from dask_dppca.design import RegularDesign, plan_blocks
from dask_dppca.graph import graph_layout, kernel_sum_graph, lanes_total
from dask_dppca.graph.lane_task import LaneState
from dask_dppca.io import open_records
from dask_dppca.kernel import ExactSum, block_pair_sum, pairwise_sum
from dask_dppca.kernel.spatial_sign import sphere, winsor

pytestmark = pytest.mark.timeout(300)

RNG = np.random.default_rng(11)  # test data only


def _expected_tasks(plan, n_threads: int) -> tuple[int, int]:
    """(segments, merges) by the rule as documented, written out independently here: two
    lanes a thread up to 8192 lanes, never fewer than one a thread; a lane's share of the
    4 d |P| flops in ceil(share / 4e12) segments, 1 to 4; never more segments than
    block-pair groups; sums merged 8 at a time down to at most 8.
    """
    lanes = max(n_threads, min(2 * n_threads, 8192))
    share = 4.0 * plan.n_features * plan.n_pairs / lanes
    segments = min(len(plan.tasks()), lanes * min(4, max(1, math.ceil(share / 4e12))))
    merges, ends = 0, segments
    while ends > 8:
        ends = math.ceil(ends / 8)
        merges += ends
    return segments, merges


def _graph_tasks(lane_sums) -> dict:
    total = dask.delayed(lanes_total)(*lane_sums)
    return dict(total.__dask_optimize__(total.__dask_graph__(), total.__dask_keys__()))


@pytest.mark.slow
@pytest.mark.parametrize("n", [10**4, 10**5, 10**6, 10**7, 10**8, 10**9])
def test_the_task_count_is_the_public_rule_s_whatever_n(tmp_path, n):
    """A 16-thread cluster (4 x 4), d = 32, design 'auto', a stand-in store with no chunk
    written: the graph built as a fit builds it has the rule's tasks, none of them a read."""
    d, threads = 32, 16
    path = str(tmp_path / "standin.zarr")
    zarr.create_array(path, shape=(n, d), chunks=(min(n, 131072), d), dtype="f8")
    records = open_records(path)
    _, plan = plan_blocks(n, d, records.row_chunks, "auto", threads)
    data = records.blocks(plan.block_sizes)
    tasks = _graph_tasks(kernel_sum_graph(data, plan, sphere(), threads))
    segments, merges = _expected_tasks(plan, threads)
    got = [key for key in tasks if str(key).startswith("dppca-pairs-")]
    assert len(got) == segments
    assert len(tasks) == segments + merges + 1  # and the total's task
    assert not [key for key in tasks if isinstance(key, tuple)]  # no read task, no block key
    layout = graph_layout(data, plan, threads)
    assert layout.n_tasks == segments + merges
    assert segments <= 2 * threads * 4
    if n >= 10**6:  # enough block-pair groups: 1 to 4 segments a lane, whatever n
        assert segments in {2 * threads * s for s in range(1, 5)}


@pytest.mark.slow
def test_sixteen_thousand_threads_get_a_lane_each(tmp_path):
    """1000 workers x 16 threads: one lane a thread (the scheduler's dispatch, not the
    balance, bounds the wall there), so the segments are a multiple of the threads."""
    n, d, threads = 10**9, 32, 16000
    path = str(tmp_path / "standin.zarr")
    zarr.create_array(path, shape=(n, d), chunks=(131072, d), dtype="f8")
    records = open_records(path)
    _, plan = plan_blocks(n, d, records.row_chunks, "auto", threads)
    layout = graph_layout(records.blocks(plan.block_sizes), plan, threads)
    segments, merges = _expected_tasks(plan, threads)
    assert (layout.n_segments, layout.merge_tasks) == (segments, merges)
    assert segments in {threads * s for s in range(1, 5)}


def test_the_task_count_does_not_follow_the_store_s_chunks(tmp_path):
    """The same terabyte-shaped plan on stores chunked like its blocks and in 32 MiB
    chunks: the same segment tasks (the reads are inside them), whatever the chunking."""
    n, d, threads = 10**8, 32, 64
    counts = set()
    for chunk in (12288, 131072, 4096):
        path = str(tmp_path / f"c{chunk}.zarr")
        zarr.create_array(path, shape=(n, d), chunks=(chunk, d), dtype="f8")
        records = open_records(path)
        _, plan = plan_blocks(
            n, d, records.row_chunks, RegularDesign(k=1, block_size=12288), threads
        )
        layout = graph_layout(records.blocks(plan.block_sizes), plan, threads)
        assert layout.reads_in_tasks and layout.input_tasks == 0
        counts.add(layout.n_tasks)
        # A block is decoded with the chunks it overlaps: at most its rows plus a chunk.
        assert sum(layout.segment_rows) <= layout.block_reads * (12288 + chunk)
    assert len(counts) == 1


# -- the reference: one task per block pair ----------------------------------------------


def _reference_graph(data: da.Array, plan, spatial_sign):
    """K_hat's unnormalised sum, one Dask task per block pair (kept here as the oracle):
    each group of the plan sums its pairs' d x d sums in the kernel's balanced tree, the
    groups' upper triangles are added exactly, and the total rounded once."""
    if len(data.chunks[1]) != 1:
        data = data.rechunk({1: -1})
    blocks = data.to_delayed().ravel().tolist()
    d = plan.n_features

    def pair(a, b):
        return block_pair_sum(a, b, spatial_sign, tile_rows=plan.tile_rows)

    def group(*sums):
        return LaneState(
            ExactSum((d * (d + 1) // 2,)).plus(pairwise_sum(list(sums))[np.triu_indices(d)])
        )

    groups = [
        dask.delayed(group)(
            *[dask.delayed(pair)(blocks[i], None if i == j else blocks[j]) for i, j in task]
        )
        for task in plan.tasks()
    ]
    return dask.delayed(lanes_total)(*groups)


def _zarr(tmp_path, x, chunk):
    path = str(tmp_path / f"x{chunk}.zarr")
    zarr.open_array(path, mode="w", shape=x.shape, chunks=(chunk, x.shape[1]), dtype="f8")[:] = x
    return path


@pytest.mark.parametrize(
    "design",
    [
        "complete",
        RegularDesign(k=1, block_size=40, seed=0),
        RegularDesign(k=3, block_size=30, seed=4),
        RegularDesign(k=2, block_size=55, seed=1),
    ],
    ids=["complete", "regular-k1", "regular-k3", "regular-k2-ragged"],
)
@pytest.mark.parametrize("chunking", ["zarr-aligned", "zarr-misaligned", "numpy", "dask"])
def test_the_fused_graph_gives_the_bits_of_one_task_per_block_pair(tmp_path, design, chunking):
    n, d = 700, 5
    x = RNG.standard_t(2, size=(n, d)) * np.array([6.0, 3.0, 1.0, 0.5, 0.2])
    x[::37] *= 1e6  # far rows: the exact path and wide exponents in the exact sums
    x[5::41] = x[4::41]  # exact duplicates
    block = 40 if design == "complete" else design.block_size
    source = {
        "zarr-aligned": lambda: _zarr(tmp_path, x, block),
        "zarr-misaligned": lambda: _zarr(tmp_path, x, 97),
        "numpy": lambda: x,
        "dask": lambda: da.from_array(x, chunks=((90, 10, 300, 200, 100), d)),
    }[chunking]()
    records = open_records(source)
    g = winsor(2.5) if chunking == "dask" else sphere()
    for threads in (1, 2, 5, 64):
        design_obj, plan = plan_blocks(n, d, records.row_chunks, design, threads)
        data = records.blocks(plan.block_sizes)
        want = _reference_graph(data, plan, g)
        got = dask.delayed(lanes_total)(*kernel_sum_graph(data, plan, g, threads))
        want, got = dask.compute(want, got, scheduler="threads")
        assert got.tobytes() == want.tobytes(), (threads, design_obj)
        if chunking.startswith("zarr"):
            assert graph_layout(data, plan, threads).reads_in_tasks


def test_a_broken_segment_that_drops_a_group_is_caught_by_the_reference(tmp_path, monkeypatch):
    """The oracle can fail: a segment task that skips its last block pair differs."""
    from dask_dppca.graph import lane_task

    x = RNG.standard_normal((400, 4))
    records = open_records(_zarr(tmp_path, x, 50))
    _, plan = plan_blocks(400, 4, records.row_chunks, RegularDesign(k=1, block_size=50), 2)
    data = records.blocks(plan.block_sizes)
    real = lane_task.segment_task

    def broken(segment, reader, *given):
        ends = segment.group_ends.copy()
        ends[-1] -= 1  # the last block pair left out
        if ends[-1] == (ends[-2] if len(ends) > 1 else 0):
            ends = ends[:-1]
        return real(
            dataclasses.replace(segment, pairs=segment.pairs[:-1], group_ends=ends),
            reader,
            *given,
        )

    monkeypatch.setattr("dask_dppca.graph.lanes.segment_task", broken)
    got = dask.delayed(lanes_total)(*kernel_sum_graph(data, plan, sphere(), 2))
    want, got = dask.compute(_reference_graph(data, plan, sphere()), got, scheduler="sync")
    assert got.tobytes() != want.tobytes()


# -- the scree passes run in the same segments ------------------------------------------


@pytest.mark.parametrize("chunking", ["zarr-misaligned", "numpy"])
def test_the_scree_passes_in_segments_give_the_per_pair_totals(tmp_path, chunking):
    """The scree's counts and exact sums, in segments for any thread count, equal the
    block-pair-by-block-pair totals (the oracle: one call per block pair, added here)."""
    from dask_dppca.graph.scree import merge_partials, scree_histogram_graph, scree_sums_graph
    from dask_dppca.kernel.scree_stats import block_histograms, block_sums

    n, d = 600, 4
    x = RNG.standard_t(3, size=(n, d)) * np.array([4.0, 2.0, 1.0, 0.5])
    source = _zarr(tmp_path, x, 70) if chunking.startswith("zarr") else x
    records = open_records(source)
    _, plan = plan_blocks(n, d, records.row_chunks, RegularDesign(k=2, block_size=50), 2)
    data = records.blocks(plan.block_sizes)
    directions = np.linalg.qr(RNG.standard_normal((d, 2)))[0].T
    clip = np.array([3.0, 2.0, 5.0])
    edges = np.cumsum((0,) + plan.block_sizes)
    block = [x[edges[i] : edges[i + 1]] for i in range(len(plan.block_sizes))]

    def oracle(function, *args, **kwargs):
        return merge_partials(
            *[
                function(
                    block[i],
                    *args,
                    other=None if i == j else block[j],
                    indices=(i, j),
                    **kwargs,
                )
                for i, j in plan.block_pairs
            ]
        )

    want_counts = oracle(block_histograms, directions, trace=True)
    want_sums = oracle(block_sums, directions, clip).to_float()
    for threads in (1, 3, 64):
        counts = dask.compute(
            scree_histogram_graph(data, directions, plan.block_pairs, n_threads=threads),
            scheduler="threads",
        )[0]
        sums = dask.compute(
            scree_sums_graph(data, plan.block_pairs, directions, clip, n_threads=threads),
            scheduler="threads",
        )[0]
        assert np.array_equal(merge_partials(*counts), want_counts), threads
        assert merge_partials(*sums).to_float().tobytes() == want_sums.tobytes(), threads
        assert len(counts) <= 8


@pytest.mark.parametrize("threads", [1, 3, 16, 1600])
@pytest.mark.parametrize(
    "sizes", [(100,) * 10, (7,), (3, 4, 5), (12288,) * 4000 + (77,), (50,) * 999 + (10,)]
)
def test_a_pass_runs_whole_blocks_in_few_tasks(sizes, threads):
    """Every row once, no block split, two runs a thread (fewer when blocks run out),
    more only past 256 MiB a run."""
    from dask_dppca.graph import pass_block_sizes

    runs = pass_block_sizes(sizes, 32, threads)
    assert sum(runs) == sum(sizes)
    ends = set(np.cumsum(sizes).tolist())
    assert set(np.cumsum(runs).tolist()) <= ends
    wanted = max(max(threads, min(2 * threads, 8192)), math.ceil(sum(sizes) * 256 / 2**28))
    assert len(runs) == min(len(sizes), wanted)
