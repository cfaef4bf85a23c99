"""Layer 2: the block-pair graph and its reduction."""

from __future__ import annotations

import os
import subprocess
import sys

import collections

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback

from dask_dppca import kendall_matrix
from dask_dppca.design import CompleteDesign
from dask_dppca.graph import kernel_sum_graph, tree_sum
from dask_dppca.kernel import block_pair_sum
from dask_dppca.transforms import sphere, winsor

from tests.reference import reference_pair_sum, relative_error

RNG = np.random.default_rng(2)  # test data only


def _data(n=240, d=4):
    return RNG.standard_normal((n, d)) * np.array([5.0, 2.0, 1.0, 0.5])[:d]


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
    got = kendall_matrix(da.from_array(x, chunks=(17, 4)), "winsor", radius=1.5,
                         scheduler="synchronous")
    assert relative_error(got, want) <= 1e-10


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
        return x[bounds[i]:bounds[i + 1]]

    parts = [da.from_delayed(dask.delayed(load, pure=True)(i), shape=(bounds[i + 1] - bounds[i], x.shape[1]),
                             dtype=x.dtype) for i in range(len(bounds) - 1)]
    return da.concatenate(parts, axis=0)


def test_building_reads_no_data_and_compute_reads_each_block_once():
    x = _data()
    bounds = [0, 50, 100, 170, 240]
    calls = collections.Counter()
    data = _counting_array(x, bounds, calls)
    plan = CompleteDesign().plan(data.chunks[0], data.shape[1])
    graph = kernel_sum_graph(data, plan, sphere())
    assert calls == {}
    pair_tasks = [k for k in dict(graph.__dask_graph__()) if str(k).startswith("dppca-pair-")]
    assert len(pair_tasks) == 4 * 5 // 2

    computes = []
    with Callback(start=lambda dsk: computes.append(len(dsk))):
        (total,) = dask.compute(graph, scheduler="threads")
    assert computes and len(computes) == 1
    assert calls == {i: 1 for i in range(4)}
    assert relative_error(total / plan.n_pairs, kendall_matrix(x, scheduler="synchronous")) <= 1e-12


def test_block_pairs_cover_every_pair_once():
    x = _data(60)
    sizes = (10, 25, 25)
    plan = CompleteDesign().plan(sizes, x.shape[1])
    edges = np.cumsum((0,) + sizes)
    total = sum(
        block_pair_sum(x[edges[i]:edges[i + 1]],
                       None if i == j else x[edges[j]:edges[j + 1]], sphere())
        for i, j in plan.block_pairs
    )
    assert plan.n_pairs == 60 * 59 // 2
    assert relative_error(total, block_pair_sum(x, None, sphere())) <= 1e-12


def test_tree_sum_is_deterministic_and_exact_on_integers():
    parts = [dask.delayed(np.full)((2, 2), float(k)) for k in range(11)]
    total = tree_sum(parts)
    a = dask.compute(total, scheduler="threads")[0]
    b = dask.compute(total, scheduler="synchronous")[0]
    assert np.array_equal(a, b) and np.all(a == sum(range(11)))


def test_reduction_is_bitwise_repeatable():
    x = da.from_array(_data(400), chunks=(37, 4))
    first = kendall_matrix(x, scheduler="threads")
    assert all(np.array_equal(first, kendall_matrix(x, scheduler="threads")) for _ in range(3))


def test_custom_and_winsor_transforms_go_through_the_graph():
    x = _data(80)
    got = kendall_matrix(da.from_array(x, chunks=(30, 4)), winsor(2.0), scheduler="threads")
    want = reference_pair_sum(x, xi=lambda s: min(s, 2.0)) / (80 * 79 / 2)
    assert relative_error(got, want) <= 1e-10


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
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["{2}", "True"], done.stdout
