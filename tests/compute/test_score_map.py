"""The score map stage on Dask: the graph's exact counts equal the block functions' on the
whole data, whatever the chunks; the stage releases a map on a local scheduler and on a
cluster (on the trusted worker), with groups from numpy, pandas and dask labels; the
exact counts are sealed between workers.  Seeds make TEST DATA only; the seeded samplers
are NOT private.
"""

from __future__ import annotations

import json
import pickle

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from distributed import Client, LocalCluster

from dask_dppca.compute import TRUSTED_RESOURCE
from dask_dppca.compute.target import ClusterTarget, LocalScheduler
from dask_dppca.compute.trusted.placement import ReleaseOptions
from dask_dppca.compute.trusted.score_map import release_score_map
from dask_dppca.graph import sealed
from dask_dppca.graph.score_stats import (
    ExactCounts,
    histogram_counts_graph,
    label_codes,
    project_scores,
    quantile_counts_graph,
)
from dask_dppca.kernel.score_stats import count_at_most, group_codes, histogram_counts
from dask_dppca.privacy.mechanisms.laplace import SeededDiscreteLaplace
from dask_dppca.privacy.mechanisms.noise import SeededSampler
from dask_dppca.privacy.mechanisms.quantile import quantile_candidates
from dask_dppca.privacy.mechanisms.score_map import ScoreMap, ScoreMapMechanism

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(8)  # test data
    x = rng.standard_normal((3000, 4)) * [5.0, 2.0, 1.0, 0.5]
    x[:3] = [[np.nan, 0, 0, 0], [np.inf, 0, 0, 0], [1e300, 1e300, 0, 0]]
    labels = np.array(["a", "b", "c"], dtype=object)[rng.integers(0, 3, 3000)]
    labels[:10] = "unknown"
    return x, labels


def test_graph_counts_equal_the_block_functions_on_the_whole_data(data):
    x, labels = data
    v = np.eye(4)[:2]
    with np.errstate(all="ignore"):
        whole = x @ v.T
    for chunks in (3000, 700, 256):
        scores = project_scores(da.from_array(x, chunks=(chunks, 4)), v)
        grid = quantile_candidates(True, 4)
        (counts,) = dask.compute(quantile_counts_graph(scores, grid), scheduler="synchronous")
        with np.errstate(all="ignore"):
            assert np.array_equal(counts.counts, count_at_most(whole, grid))
        (dev,) = dask.compute(
            quantile_counts_graph(scores, grid, centre=(1.0, -2.0)), scheduler="synchronous"
        )
        with np.errstate(all="ignore"):
            expected = count_at_most(np.abs(whole - [1.0, -2.0]), grid)
        assert np.array_equal(dev.counts, expected)
        codes = label_codes(labels, ["a", "b", "c"], scores.chunks[0])
        xe, ye = np.linspace(-9, 9, 5), np.linspace(-4, 4, 4)
        (hist,) = dask.compute(
            histogram_counts_graph(scores, xe, ye, codes, 4), scheduler="synchronous"
        )
        assert np.array_equal(
            hist.counts,
            histogram_counts(whole, xe, ye, group_codes(labels, ["a", "b", "c"]), 4),
        )


def test_labels_from_pandas_and_dask_series_xarray_and_zarr_give_the_same_codes(data, tmp_path):
    import dask.dataframe as dd
    import xarray as xr
    import zarr

    _, labels = data
    store = zarr.create_array(
        store=str(tmp_path / "labels.zarr"), shape=labels.shape, chunks=(700,), dtype=str
    )
    store[:] = labels.astype(str)
    chunks = (1000, 1000, 1000)
    expected = group_codes(labels, ["a", "b", "c"])
    series = pd.Series(labels).astype("category")
    for given in (
        labels,
        series,
        dd.from_pandas(series, npartitions=4),
        xr.DataArray(labels, dims="row"),
        da.from_array(labels, chunks=500),
        store,
        str(tmp_path / "labels.zarr"),
    ):
        codes = label_codes(given, ["a", "b", "c"], chunks)
        assert codes.chunks == (chunks,)
        assert np.array_equal(codes.compute(scheduler="synchronous"), expected)
    with pytest.raises(ValueError, match="labels"):
        label_codes(labels[:5], ["a"], chunks)


def test_exact_counts_pickled_on_a_worker_open_only_on_workers(monkeypatch):
    monkeypatch.setitem(sealed._STATE, "worker_process", True)
    blob = pickle.dumps(ExactCounts(np.arange(3)))
    assert pickle.loads(blob).counts.tolist() == [0, 1, 2]  # another worker may open it
    monkeypatch.setitem(sealed._STATE, "worker_process", False)
    monkeypatch.setattr(sealed, "_PROCESS_TOKEN", "another process")  # the client
    with pytest.raises(sealed.ExactSumLeakError):
        pickle.loads(blob)


def _stage(x, labels, target):
    mechanism = ScoreMapMechanism(
        x.shape[0],
        2.0,
        1e-5,
        bins=(6, 5),
        domain=("a", "b", "c"),
        methods=("additive", "sparse"),
    )
    scores = project_scores(da.from_array(x, chunks=(800, 4)), np.eye(4)[:2])
    return release_score_map(
        target,
        scores,
        mechanism,
        labels=labels,
        gaussian_sampler=SeededSampler(1),
        integer_sampler=SeededDiscreteLaplace(2),
    )


def _check_map(score_map, x, labels):
    assert score_map.groups == ("a", "b", "c", "other")
    assert set(score_map.histograms) == {"additive", "sparse"}
    assert score_map.histogram().counts.shape == (4, 31)
    exact = {g: np.sum(labels == g) for g in ("a", "b", "c")}
    sizes = score_map.group_sizes()
    sigma = score_map.privacy["group_counts"]["sigma"]
    for g, n_g in exact.items():
        assert abs(sizes[g] - n_g) < 6 * sigma  # noisy (the released group counts)
    inside = (np.abs(x[:, :2] - score_map.frame.centre) <= score_map.frame.half_width).all(1)
    assert inside.mean() > 0.97
    points = score_map.synthetic(rng=np.random.default_rng(0))
    assert sum(len(p) for p in points.values()) > 0.9 * x.shape[0]
    assert score_map.privacy["private"] is False  # the test samplers say so
    again = ScoreMap.from_dict(json.loads(json.dumps(score_map.to_dict())))  # JSON-ready
    assert again.frame == score_map.frame and again.groups == score_map.groups
    assert np.array_equal(again.group_counts, score_map.group_counts)
    assert "outside the frame" in score_map.summary()


def test_the_stage_releases_a_map_on_a_local_scheduler(data):
    x, labels = data
    score_map = _stage(x, labels, LocalScheduler("synchronous"))
    _check_map(score_map, x, labels)
    assert "this process" in score_map.privacy["released_on"]
    with pytest.raises(ValueError, match="require_trusted"):
        _stage(x, labels, LocalScheduler("synchronous", ReleaseOptions(require_trusted=True)))


@pytest.mark.cluster
def test_the_stage_releases_on_the_trusted_worker_of_a_cluster(data):
    x, labels = data
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            dashboard_address=":0",
            resources={TRUSTED_RESOURCE: 1},
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        trusted = ClusterTarget(client, ReleaseOptions(require_trusted=True))
        score_map = _stage(x, pd.Series(labels), trusted)
    _check_map(score_map, x, labels)
    assert TRUSTED_RESOURCE in score_map.privacy["released_on"]


@pytest.mark.parametrize(
    "rows",
    [
        np.full((60, 4), np.nan),
        np.full((60, 4), 5.0),
        np.tile([[1e308, -1e308, np.inf, 0.0], [-np.inf, 1e-300, 0.0, np.nan]], (30, 1)),
    ],
    ids=["all NaN", "constant", "extremes"],
)
def test_hostile_data_gets_a_bounded_treatment_never_an_error(rows):
    """Whatever the values, a map comes out: a finite frame, every record in one cell."""
    mechanism = ScoreMapMechanism(60, 1.0, 1e-5, bins=(3, 3), methods=("additive", "sparse"))
    scores = project_scores(da.from_array(rows, chunks=(25, 4)), np.eye(4)[:2])
    score_map = release_score_map(LocalScheduler("synchronous"), scores, mechanism)
    x_edges, y_edges = score_map.frame.edges(score_map.bins)
    assert np.all(np.isfinite(x_edges)) and np.all(np.diff(x_edges) > 0)
    assert np.all(np.isfinite(y_edges)) and np.all(np.diff(y_edges) > 0)
    assert score_map.histogram().counts.shape == (1, 10)
    assert score_map.privacy["private"] is True  # the default samplers


def test_a_statistic_release_draws_at_most_once():
    from dask_dppca.compute.trusted.release import _unsealed, statistic_task
    from dask_dppca.compute.trusted.tickets import ReleaseAlreadyDrawnError

    draws = []
    release = draws.append
    statistic_task(release, "statistic-test-once", _unsealed, ExactCounts(np.arange(2)))
    with pytest.raises(ReleaseAlreadyDrawnError):
        statistic_task(release, "statistic-test-once", _unsealed, ExactCounts(np.arange(2)))
    assert len(draws) == 1
