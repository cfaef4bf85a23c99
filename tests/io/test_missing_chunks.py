"""No silent fill values: a chunk missing where the workers read stops the fit.

Zarr answers a read of an absent chunk with the fill value.  A store the workers cannot
see (deleted chunks, a path only the client has, a partly written array) must fail the
fit in the read task, with one line naming the store and the worker, before any release
and without charging a privacy budget.  A store written sparsely on purpose is read
with ``allow_fill_values=True``.  Each chunk is read once per fit (a counting store).
Seeds generate TEST DATA only.
"""

from __future__ import annotations

import collections
import re
import shutil

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, WrapperStore

import dask_dppca as dd
from dask_dppca.compute import compute_target
from dask_dppca.design import plan_blocks
from dask_dppca.graph import graph_layout
from dask_dppca.io import MissingChunkError, open_records

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)

N, D, CHUNK = 400, 4, 100
#: Blocks that are the chunks, one partner each: every block belongs to one block-pair
#: task alone, which reads it itself (no read task).
IN_TASK_READS = dd.RegularDesign(k=1, block_size=CHUNK, seed=0)


@pytest.fixture
def x():
    return np.random.default_rng(9).standard_normal((N, D))  # test data only


def _write(path, x, **kwargs):
    array = zarr.open_array(
        str(path), mode="w", shape=x.shape, chunks=(CHUNK, D), dtype="f8", **kwargs
    )
    array[:] = x
    return array


def _chunk_files(path):
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and p.name not in {"zarr.json", ".zarray", ".zattrs", ".zgroup"}
    )


def _fit_refused(source, **kwargs):
    """Fit inside a budget; return the error; check nothing was released or charged."""
    est = dd.DPPCA(
        n_components=2,
        random_state=0,
        scheduler=kwargs.pop("scheduler", "threads"),
        design=kwargs.pop("design", "auto"),
    )
    with dd.PrivacyBudget(epsilon=10, delta=1e-5) as budget:
        with pytest.raises(MissingChunkError) as error:
            est.fit(source, **kwargs)
    assert budget.spent == [] and budget.spent_epsilon == 0.0
    assert not hasattr(est, "components_")
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_chunk_never_written_stops_the_fit(tmp_path, x):
    array = zarr.open_array(
        str(tmp_path / "part.zarr"), mode="w", shape=x.shape, chunks=(CHUNK, D), dtype="f8"
    )
    array[:200] = x[:200]  # a writer that stopped half way
    message = _fit_refused(str(tmp_path / "part.zarr"))
    assert re.search(r"chunk 'c/[23]/0' of '" + re.escape(str(tmp_path / "part.zarr")), message)
    assert re.search(r"process \d+ on .+ \(local scheduler\)", message)
    assert "allow_fill_values=True" in message and "fill value 0.0" in message


def test_a_chunk_missing_under_a_block_pair_task_stops_the_fit(tmp_path, x):
    _write(tmp_path / "x.zarr", x)
    (tmp_path / "x.zarr" / "c" / "2" / "0").unlink()
    message = _fit_refused(str(tmp_path / "x.zarr"), design=IN_TASK_READS)
    assert f"chunk 'c/2/0' of '{tmp_path / 'x.zarr'}' is missing where process" in message


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_chunks_deleted_after_the_metadata_was_read(tmp_path, x, zarr_format):
    path = tmp_path / "x.zarr"
    _write(path, x, zarr_format=zarr_format)
    data = open_records(str(path)).array  # the client has read the metadata
    doomed = _chunk_files(path)[1]
    doomed.unlink()  # the workers' view: the chunk is gone
    with pytest.raises(MissingChunkError, match=re.escape(str(path))):
        data.sum().compute(scheduler="threads")


@pytest.mark.cluster
def test_a_store_the_workers_cannot_see_names_the_worker(tmp_path, x, cluster_client):
    path = tmp_path / "client-only.zarr"
    _write(path, x)
    opened = zarr.open_array(str(path), mode="r")  # as in a notebook: opened, then gone
    hidden = tmp_path / "elsewhere"
    shutil.move(path, hidden)
    try:
        message = _fit_refused(opened, scheduler=cluster_client)
    finally:
        shutil.move(hidden, path)
    workers = cluster_client.scheduler_info(n_workers=-1)["workers"]
    assert any(f"worker {address} reads it" in message for address in workers), message
    assert str(path) in message


def test_sharded_store_missing_a_shard(tmp_path, x):
    array = zarr.create_array(
        str(tmp_path / "s.zarr"), shape=x.shape, chunks=(50, D), shards=(CHUNK, D), dtype="f8"
    )
    array[:] = x
    _chunk_files(tmp_path / "s.zarr")[0].unlink()
    assert "'c/0/0'" in _fit_refused(str(tmp_path / "s.zarr"))


def test_sparse_on_purpose_is_refused_unless_allowed(tmp_path, x):
    x = x.copy()
    x[100:200] = 0.0  # equal to the fill value: Zarr skips the chunk
    _write(tmp_path / "sparse.zarr", x)
    assert len(_chunk_files(tmp_path / "sparse.zarr")) == N // CHUNK - 1
    _fit_refused(str(tmp_path / "sparse.zarr"))
    k = dd.kendall_matrix(str(tmp_path / "sparse.zarr"), allow_fill_values=True)
    np.testing.assert_allclose(k, dd.kendall_matrix(x), rtol=1e-12, atol=1e-15)
    est = dd.DPPCA(n_components=2, random_state=0, scheduler="threads")
    est.fit(str(tmp_path / "sparse.zarr"), allow_fill_values=True)
    assert est.n_samples_ == N


def test_a_relative_path_is_the_client_s_path(tmp_path, x, monkeypatch):
    """Resolved when opened: a worker in another directory reads the same store."""
    _write(tmp_path / "rel.zarr", x)
    monkeypatch.chdir(tmp_path)
    data = open_records("rel.zarr").array
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    np.testing.assert_array_equal(data.compute(scheduler="threads"), x)


class CountingStore(WrapperStore):
    """Counts every read of every key (what the workers ask the store for)."""

    def __init__(self, store, counts=None):
        super().__init__(store)
        self.counts = collections.Counter() if counts is None else counts

    def _with_store(self, store):
        return type(self)(store, self.counts)

    async def get(self, key, prototype, byte_range=None):
        self.counts[key] += 1
        return await self._store.get(key, prototype, byte_range)


@pytest.mark.parametrize("scheduler", ["threads", "synchronous"])
@pytest.mark.parametrize(
    "design",
    [
        dd.RegularDesign(
            k=1, block_size=130, seed=0
        ),  # blocks cut across the chunks: a chunk is decoded for each block it feeds
        IN_TASK_READS,
        dd.RegularDesign(k=2, block_size=CHUNK, seed=0),  # blocks shared by block-pair groups
    ],
    ids=["blocks-split-chunks", "read-in-segments", "shared-in-segments"],
)
def test_each_chunk_is_read_as_the_layout_says(tmp_path, x, scheduler, design):
    """Every chunk is read, and exactly as often as the graph's layout counts: once per
    segment for each of its blocks that overlaps the chunk (docs/scale.md)."""
    _write(tmp_path / "x.zarr", x)
    store = CountingStore(LocalStore(tmp_path / "x.zarr", read_only=True))
    opened = zarr.open_array(store=store, mode="r")
    store.counts.clear()
    with compute_target(scheduler) as target:
        threads = target.n_threads
    dd.DPPCA(n_components=2, random_state=0, scheduler=scheduler, design=design).fit(opened)
    chunks = {key: count for key, count in store.counts.items() if key.startswith("c/")}
    assert sorted(chunks) == [f"c/{i}/0" for i in range(N // CHUNK)]
    records = open_records(opened)
    _, plan = plan_blocks(N, D, records.row_chunks, design, threads)
    layout = graph_layout(records.blocks(plan.block_sizes), plan, threads)
    assert sum(chunks.values()) * CHUNK == sum(layout.segment_rows)
    if design is IN_TASK_READS and layout.n_segments == 1:
        assert set(chunks.values()) == {1}


def test_analyze_takes_the_fill_values_its_message_suggests(tmp_path, x, capsys):
    from dask_dppca.cli import main

    array = zarr.open_array(
        str(tmp_path / "part.zarr"), mode="w", shape=x.shape, chunks=(CHUNK, D), dtype="f8"
    )
    array[:200] = x[:200]
    line = f"analyze {tmp_path / 'part.zarr'} -k 2 --scheduler threads --output "
    assert main((line + str(tmp_path / "a.json")).split()) != 0
    err = capsys.readouterr().err
    assert "pass --allow-fill-values" in err  # the suggestion, in the CLI's spelling
    line += f"{tmp_path / 'b.json'} --allow-fill-values"
    assert main(line.split()) == 0, capsys.readouterr().err
