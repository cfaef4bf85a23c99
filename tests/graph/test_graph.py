"""The graph layer: the block-pair graph and its reduction."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from dask.callbacks import Callback

import dask_dppca as dd
from dask_dppca import kendall_matrix
from dask_dppca.compute.trusted import release as release_module
from dask_dppca.design import CompleteDesign, RegularDesign, complete_blocks, plan_blocks
from dask_dppca.graph import graph_layout, kernel_sum_graph, lanes_total, segment_bounds
from dask_dppca.graph import lane_task as graph_module
from dask_dppca.io import open_records
from dask_dppca.kernel import block_pair_sum, pairwise_sum, rounding_error_bound
from dask_dppca.kernel.exact_sum import ExactSum
from dask_dppca.kernel.spatial_sign import sphere, winsor
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning
from tests.reference import reference_pair_sum, relative_error

RNG = np.random.default_rng(2)  # test data only


def _data(n=240, d=4):
    return RNG.standard_normal((n, d)) * np.array([5.0, 2.0, 1.0, 0.5])[:d]


def _planned(X, design, n_threads=2):
    """The input's records in the blocks of ``design`` (as a fit plans them), and the plan."""
    records = open_records(X)
    _, plan = plan_blocks(*records.shape, records.row_chunks, design, n_threads)
    return records.blocks(plan.block_sizes), plan


def _total(lane_sums):
    """The lanes' exact total as one delayed value (a fit adds them in the release task)."""
    return dask.delayed(lanes_total)(*lane_sums)


@pytest.mark.parametrize(
    "chunks",
    [(240,), (120, 120), (7, 13, 100, 120), (1,) * 10 + (230,), (239, 1), tuple([24] * 10)],
)
def test_same_result_for_every_chunking(chunks):
    x = _data()
    want = kendall_matrix(x, scheduler="synchronous")
    got = kendall_matrix(da.from_array(x, chunks=(chunks, 4)), scheduler="synchronous")
    assert relative_error(got, want) <= 1e-12


def test_columns_split_are_rechunked():
    x = _data()
    got = kendall_matrix(da.from_array(x, chunks=(50, 1)), scheduler="synchronous")
    assert relative_error(got, kendall_matrix(x, scheduler="synchronous")) <= 1e-12


def test_two_rows_is_one_pair():
    x = np.array([[0.0, 0.0], [3.0, 4.0]])
    got = kendall_matrix(da.from_array(x, chunks=(1, 2)), scheduler="synchronous")
    u = np.array([0.6, 0.8])
    assert np.allclose(got, np.outer(u, u), rtol=0, atol=1e-15)


def test_matches_pair_by_pair_reference_across_blocks():
    x = _data(90)
    want = reference_pair_sum(x, xi=lambda s: min(s, 1.5)) / (90 * 89 / 2)
    got = kendall_matrix(
        da.from_array(x, chunks=(17, 4)), "winsor", radius=1.5, scheduler="synchronous"
    )
    assert relative_error(got, want) <= 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "processes"])
def test_local_schedulers_agree(scheduler):
    x = da.from_array(_data(), chunks=(60, 4))
    want = kendall_matrix(x, scheduler="synchronous")
    assert relative_error(kendall_matrix(x, scheduler=scheduler), want) <= 1e-12


@pytest.mark.cluster
def test_distributed_cluster_agrees(cluster_client):
    x = da.from_array(_data(), chunks=(60, 4))
    want = kendall_matrix(x, scheduler="synchronous")
    assert relative_error(kendall_matrix(x, scheduler=cluster_client), want) <= 1e-12


def _counting_array(x, bounds, calls):
    def load(i):
        calls[i] += 1
        return x[bounds[i] : bounds[i + 1]]

    parts = [
        da.from_delayed(
            dask.delayed(load, pure=True)(i),
            shape=(bounds[i + 1] - bounds[i], x.shape[1]),
            dtype=x.dtype,
        )
        for i in range(len(bounds) - 1)
    ]
    return da.concatenate(parts, axis=0)


def test_building_reads_no_data_and_compute_reads_each_block_once():
    x = _data()
    bounds = [0, 50, 100, 170, 240]
    calls = collections.Counter()
    data = _counting_array(x, bounds, calls)
    plan = CompleteDesign().plan(data.chunks[0], data.shape[1])
    graph = _total(kernel_sum_graph(data, plan, sphere(), 2))
    assert calls == {}
    pair_tasks = [k for k in dict(graph.__dask_graph__()) if str(k).startswith("dppca-pairs-")]
    assert len(plan.tasks()) == 4 * 5 // 2
    assert len(pair_tasks) == len(segment_bounds(plan, 2, False)) == 4  # 2 lanes a thread

    computes = []
    with Callback(start=lambda dsk: computes.append(len(dsk))):
        (total,) = dask.compute(graph, scheduler="threads")
    assert computes and len(computes) == 1
    assert calls == dict.fromkeys(range(4), 1)
    assert relative_error(total / plan.n_pairs, kendall_matrix(x, scheduler="synchronous")) <= 1e-12


def test_block_pairs_cover_every_pair_once():
    x = _data(60)
    sizes = (10, 25, 25)
    plan = CompleteDesign().plan(sizes, x.shape[1])
    edges = np.cumsum((0,) + sizes)
    total = sum(
        block_pair_sum(
            x[edges[i] : edges[i + 1]], None if i == j else x[edges[j] : edges[j + 1]], sphere()
        )
        for i, j in plan.block_pairs
    )
    assert plan.n_pairs == 60 * 59 // 2
    assert relative_error(total, block_pair_sum(x, None, sphere())) <= 1e-12


def _task_sums_added_exactly(x, plan, spatial_sign):
    """The oracle: each task's block pairs summed as the task does, then added exactly."""
    bounds = np.cumsum((0,) + plan.block_sizes)
    block = [x[bounds[i] : bounds[i + 1]] for i in range(len(plan.block_sizes))]
    total = ExactSum((x.shape[1],) * 2)
    for group in plan.tasks():
        total = total.plus(
            pairwise_sum(
                [
                    block_pair_sum(
                        block[i],
                        None if i == j else block[j],
                        spatial_sign,
                        tile_rows=plan.tile_rows,
                    )
                    for i, j in group
                ]
            )
        )
    return total.to_float()


@pytest.mark.parametrize(
    "design",
    [
        CompleteDesign(),
        RegularDesign(k=3, block_size=40, seed=1),
        RegularDesign(k=1, block_size=30, seed=0),
    ],
    ids=["complete", "regular-k3", "regular-k1"],
)
def test_any_lane_count_gives_the_bits_of_the_task_sums_added_exactly(design):
    x = _data(600)
    data = da.from_array(
        x, chunks=(40 if isinstance(design, CompleteDesign) else design.block_size, 4)
    )
    if isinstance(design, CompleteDesign):  # 15 small blocks (a fit would merge them)
        plan = design.plan(data.chunks[0], 4)
    else:
        data, plan = _planned(data, design)
    want = _task_sums_added_exactly(x, plan, sphere())
    for n_threads in (1, 2, 3, 7, 100):
        got = dask.compute(
            _total(kernel_sum_graph(data, plan, sphere(), n_threads)), scheduler="threads"
        )[0]
        assert got.tobytes() == want.tobytes(), n_threads


def test_segments_hold_a_bounded_number_of_blocks_whatever_n(tmp_path):
    """k = 3 on a Zarr store: a segment reads each block it uses inside, once, and holds
    it only while its next groups need it; the most held does not grow with n, the
    segment count does not either, and no block is a read task."""
    most, counts = [], []
    for n_blocks in (64, 256, 1024):
        path = str(tmp_path / f"x{n_blocks}.zarr")
        zarr.open_array(path, mode="w", shape=(20 * n_blocks, 4), chunks=(20, 4), dtype="f8")[:] = (
            _data(20 * n_blocks)
        )
        data, plan = _planned(path, RegularDesign(k=3, block_size=20, seed=0))
        graph = _total(kernel_sum_graph(data, plan, sphere(), 2))
        layer = dict(graph.__dask_optimize__(graph.__dask_graph__(), graph.__dask_keys__()))
        segments = [key for key in layer if str(key).startswith("dppca-pairs-")]
        layout = graph_layout(data, plan, 2)
        assert len(segments) == layout.n_segments
        assert layout.block_reads <= n_blocks + 2 * layout.n_segments * 6
        most.append(layout.held_blocks)
        counts.append(layout.n_segments)
        assert not [key for key in layer if isinstance(key, tuple) and key[0] == data.name]
    assert most[0] >= 2 and most[0] == most[1] == most[2], most
    assert counts[0] == counts[1] == counts[2] == 4, counts


def test_blocks_one_task_alone_needs_are_read_inside_it(tmp_path):
    """Zarr chunks that are the blocks, one partner each: no read tasks, and the same bits
    as the same blocks computed by tasks of their own (a numpy input)."""
    x = _data(400)
    zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=x.shape, chunks=(50, 4), dtype="f8")[
        :
    ] = x
    data, plan = _planned(str(tmp_path / "x.zarr"), RegularDesign(k=1, block_size=50, seed=0))
    graph = _total(kernel_sum_graph(data, plan, sphere(), 2))
    tasks = graph.__dask_optimize__(graph.__dask_graph__(), graph.__dask_keys__())
    assert not [key for key in dict(tasks) if isinstance(key, tuple) and key[0] == data.name]
    from_tasks = _total(kernel_sum_graph(da.from_array(x, chunks=(50, 4)), plan, sphere(), 2))
    assert np.array_equal(*dask.compute(graph, from_tasks, scheduler="threads"))


def test_reduction_is_bitwise_repeatable():
    x = da.from_array(_data(400), chunks=(37, 4))
    first = kendall_matrix(x, scheduler="threads")
    assert all(np.array_equal(first, kendall_matrix(x, scheduler="threads")) for _ in range(3))


def test_custom_and_winsor_transforms_go_through_the_graph():
    x = _data(80)
    got = kendall_matrix(da.from_array(x, chunks=(30, 4)), winsor(2.0), scheduler="threads")
    want = reference_pair_sum(x, xi=lambda s: min(s, 2.0)) / (80 * 79 / 2)
    assert relative_error(got, want) <= 1e-10


# ---------------------------------------------------------------------------------------
# A block that holds other rows than its chunks declare (audit item b)
# ---------------------------------------------------------------------------------------


def _lying(x, declared_rows):
    """A dask array that declares ``declared_rows`` rows but computes to all of ``x``."""
    return da.from_delayed(
        dask.delayed(lambda: x)(), shape=(declared_rows, x.shape[1]), dtype=x.dtype
    )


def _neighbours_400_rows():
    """Replace-one neighbours (400 rows): a tight cluster and one record moved far away."""
    rng = np.random.default_rng(5)  # test data only
    s = 1e-6 * rng.standard_normal((400, 3))
    s_prime = s.copy()
    s[-1], s_prime[-1] = [1e6, 0, 0], [0, 1e6, 0]
    return s, s_prime


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_a_block_with_other_rows_than_declared_fails_before_any_release(scheduler, monkeypatch):
    """n, |P| and the sensitivity come from the declared shape; the kernel sums the rows
    the blocks really hold.  Every block task checks one against the other."""
    released = []
    monkeypatch.setattr(
        release_module, "release_task", lambda *args, **kwargs: released.append(args)
    )
    lying = _lying(_neighbours_400_rows()[0], 40)
    with pytest.raises(
        ValueError,
        match=r"^X: block 0 holds an array of shape \(400, 3\), but the "
        r"input declared \(40, 3\)",
    ):
        dd.DPPCA(n_components=1, scheduler=scheduler).fit(lying)
    assert released == []
    with pytest.raises(ValueError, match="declared"):
        kendall_matrix(lying, scheduler=scheduler)


@pytest.mark.cluster
def test_a_lying_block_fails_on_a_cluster_before_the_release(cluster_client):
    lying = _lying(_neighbours_400_rows()[0], 40)
    with pytest.raises(ValueError, match=r"block 0 holds an array of shape \(400, 3\)"):
        dd.DPPCA(n_components=1, scheduler=cluster_client).fit(lying)


def test_without_the_block_check_a_lying_input_breaks_the_sensitivity(monkeypatch):
    """The check has teeth: skipped, 400 real rows declared as 40 give neighbours 10x
    further apart than the sensitivity computed for n = 40 (the audit's 10.2x)."""
    monkeypatch.setattr(graph_module, "_check_block", lambda *args: None)
    s, s_prime = _neighbours_400_rows()
    gap = np.linalg.norm(
        kendall_matrix(_lying(s, 40), scheduler="synchronous")
        - kendall_matrix(_lying(s_prime, 40), scheduler="synchronous")
    )
    reported = CompleteDesign().plan((40,), 3).sensitivity(1.0)
    assert gap > 5 * reported


# ---------------------------------------------------------------------------------------
# Blocks for every core, and the rounding slack in step with the tiles actually used
# ---------------------------------------------------------------------------------------


def test_numpy_input_is_cut_by_the_block_rule_and_a_chunked_one_keeps_its_chunks():
    x = RNG.standard_normal((8000, 6))
    data, plan = _planned(x, "complete", n_threads=2)
    assert plan.block_sizes == complete_blocks(8000, 6, 2) and len(plan.block_sizes) > 1
    assert data.chunks[0] == plan.block_sizes
    chunked = da.from_array(x, chunks=(2000, -1))  # chunks above the rule's smallest block
    small = da.from_array(x, chunks=(500, -1))  # merged: 4 chunks a block
    for threads in (1, 2, 64):  # the same blocks (and bits) anywhere
        data, plan = _planned(chunked, "complete", n_threads=threads)
        assert plan.block_sizes == chunked.chunks[0] and data.name == chunked.name
        data, plan = _planned(small, "complete", n_threads=threads)
        assert plan.block_sizes == (2000,) * 4 == data.chunks[0]


def test_a_regular_design_in_grouped_tasks_reads_each_block_once_and_matches():
    x = _data(1200)
    bounds = list(range(0, 1201, 100))
    calls = collections.Counter()
    design = RegularDesign(k=3, block_size=100, seed=2)
    plan = design.plan((1200,), 4)
    assert len(plan.tasks()) < len(plan.block_pairs)  # small blocks: grouped
    got = kendall_matrix(_counting_array(x, bounds, calls), scheduler="threads", design=design)
    assert calls == dict.fromkeys(range(12), 1)
    edges = np.cumsum((0,) + plan.block_sizes)
    want = (
        sum(
            block_pair_sum(
                x[edges[i] : edges[i + 1]], None if i == j else x[edges[j] : edges[j + 1]], sphere()
            )
            for i, j in plan.block_pairs
        )
        / plan.n_pairs
    )
    assert relative_error(got, want) <= 1e-12


def test_rounding_slack_follows_the_blocks_and_tiles_the_kernel_really_ran(monkeypatch):
    """privacy_["rounding_slack"] = 2 G^2 rounding_error_bound(d, largest block, block pairs,
    tile), each read from the kernel calls the fit actually made."""
    calls = []
    real = graph_module.block_pair_sum

    def spy(block_a, block_b, spatial_sign, tile_rows):
        calls.append((len(block_a), tile_rows))
        return real(block_a, block_b, spatial_sign, tile_rows=tile_rows)

    monkeypatch.setattr(
        graph_module, "block_pair_sum", lambda a, b, g, tile_rows: spy(a, b, g, tile_rows)
    )
    x = RNG.standard_normal((6000, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        est = dd.DPPCA(n_components=1, random_state=0, scheduler="threads", design="complete").fit(
            x
        )
    tiles = {tile for _, tile in calls}
    assert len(calls) == est.privacy_["n_block_pairs"] > 1 and tiles == {est.privacy_["tile_rows"]}
    want = 2.0 * rounding_error_bound(5, max(rows for rows, _ in calls), len(calls), tiles.pop())
    assert est.privacy_["rounding_slack"] == want


@pytest.mark.cluster
def test_the_embedded_cluster_leaves_this_process_blas_as_it_was():
    """Its worker runs in this process: BLAS is limited to one thread during the fit
    only, never pinned for good (the user's own numpy would stay single-threaded).
    In a fresh interpreter with two BLAS threads, as a user's session starts."""
    script = (
        "import numpy as np, dask_dppca as dd\n"
        "from threadpoolctl import threadpool_info\n"
        "def threads(): return {l['filepath']: l['num_threads'] for l in threadpool_info()}\n"
        "before = threads()\n"
        "dd.DPPCA(2).fit(np.random.default_rng(0).standard_normal((400, 4)))  # test data\n"
        "after = threads()\n"
        "print(set(before.values()), {path: after[path] for path in before} == before)\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["{2}", "True"], done.stdout
