"""Blocks follow the block rule whatever the input's chunking, and the task count is bounded.

The complete design kept every input chunk as a block: a 600 x 4 array in 1-row chunks
gave 180300 block-pair tasks (68 s on ``threads``, a 1.2 GB scheduler), 2000 rows in
1-row chunks a 6.8 GB client.  Chunks are now merged into blocks of at least the rule's
smallest block, inside the reads for a Zarr store (one read per block, each chunk read
once); a plan beyond the task limit of n, d and the thread count is refused.
"""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.design import (
    RegularDesign,
    merge_chunks,
    plan_blocks,
    planned_tasks,
    smallest_block_rows,
    task_limit,
)
from dask_dppca.graph import kernel_sum_graph
from dask_dppca.io import open_records
from dask_dppca.kernel import sphere
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

N, D, THREADS = 2000, 4, 2


def _x():
    return np.random.default_rng(21).standard_t(3, size=(N, D))  # test data


def _zarr(x, chunk_rows):
    array = zarr.create_array(
        zarr.storage.MemoryStore(), shape=x.shape, chunks=(chunk_rows, D), dtype="f8"
    )
    array[:] = x
    return array


def _graph_tasks(data, threads=THREADS):
    """(plan, tasks of the fit's graph beyond the input's own) for an input."""
    records = open_records(data)
    _, plan = plan_blocks(*records.shape, records.row_chunks, "complete", threads)
    lanes = kernel_sum_graph(records.blocks(plan.block_sizes), plan, sphere(), threads)
    total = dask.delayed(lambda *sums: sums)(*lanes)
    graph = dict(total.__dask_optimize__(total.__dask_graph__(), total.__dask_keys__()))
    own = len(dict(data.__dask_graph__())) if isinstance(data, da.Array) else 0
    return plan, len(graph) - own


def _fit(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(2, random_state=5, scheduler="threads").fit(data)


def test_one_row_chunks_give_the_rules_blocks_and_tasks_and_the_same_fit():
    x = _x()
    rule, rule_tasks = _graph_tasks(x)  # rows in memory: the block rule itself
    inputs = {
        "zarr 1-row chunks": _zarr(x, 1),
        "dask 1-row chunks": da.from_array(x, chunks=(1, D)),
        "zarr 500-row chunks": _zarr(x, 500),
    }
    for name, data in inputs.items():
        records = open_records(data)
        _, plan = plan_blocks(N, D, records.row_chunks, "complete", THREADS)
        assert plan.block_sizes == rule.block_sizes, name  # not 2000 blocks
        assert planned_tasks(plan) == planned_tasks(rule) <= task_limit(N, D, THREADS, 1)
        _, tasks = _graph_tasks(data)
        assert tasks <= rule_tasks + 2, (name, tasks)  # the store's reader and its read
    want = _fit(x)
    for name, data in inputs.items():
        got = _fit(data)
        assert np.array_equal(got.components_, want.components_), name
        assert got.privacy_["sigma"] == want.privacy_["sigma"], name


def test_a_zarr_stores_small_chunks_are_merged_inside_one_read_per_block():
    x = _x()
    store = _zarr(x, 100)
    records = open_records(store)
    _, plan = plan_blocks(N, D, records.row_chunks, "complete", THREADS)
    data = records.blocks(plan.block_sizes)
    assert data.chunks[0] == plan.block_sizes == (N,)
    graph = dict(data.__dask_graph__())
    reads = [key for key in graph if isinstance(key, tuple) and key[0] == data.name]
    assert len(reads) == 1  # 20 chunks of 100 rows, one read
    assert np.array_equal(data.compute(scheduler="synchronous"), x)


@pytest.mark.parametrize(
    "chunks",
    [(1,) * 5000, (100,) * 50, (3000, 1, 1999), (2236, 1, 1, 2762), (6000,), (1, 5999)],
)
def test_merged_blocks_keep_whole_chunks_and_reach_the_smallest_block(chunks):
    blocks = merge_chunks(chunks, D)
    assert sum(blocks) == sum(chunks)
    ends = set(np.cumsum(chunks).tolist())
    assert set(np.cumsum(blocks).tolist()) <= ends  # never a chunk split
    least = smallest_block_rows(D)
    assert all(b >= least for b in blocks) or len(blocks) == 1
    assert all(b < 2 * least + max(chunks) for b in blocks)


def test_a_plan_beyond_the_task_limit_is_refused_naming_what_to_change():
    design = RegularDesign(k=1, block_size=2, seed=0)
    with pytest.raises(ValueError, match=r"^design: the plan has \d+ graph tasks.*block_size"):
        plan_blocks(20_000, D, None, design, THREADS)
    with pytest.raises(ValueError, match=r"^design: the plan has"):
        dd.DPPCA(scheduler="synchronous", design=design).fit(np.zeros((20_000, D)))
    _, plan = plan_blocks(20_000, D, None, RegularDesign(k=1, block_size=256), THREADS)
    assert planned_tasks(plan) <= task_limit(20_000, D, THREADS, plan.n_pairs)
