"""Shared fixtures.  Seeds here generate TEST DATA only (never privacy noise)."""

from __future__ import annotations

import pytest
from distributed import Client, LocalCluster

from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum


@pytest.fixture(scope="session")
def cluster_client():
    """A real distributed LocalCluster: two worker processes, one thread each."""
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


@pytest.fixture(scope="session")
def elliptical():
    """t_1 data (d = 6) with two strong spikes; returns (X, true directions U[:, :2])."""
    d = 6
    directions = random_directions(d, seed=11)
    x = make_elliptical(
        3000, spiked_spectrum(d, n_spikes=2, spike=8.0), directions, df=1.0, seed=12
    )
    return x, directions[:, :2]


@pytest.fixture(scope="session", autouse=True)
def _close_the_embedded_cluster():
    """Stop the embedded cluster (if a test started one) while pytest still owns the
    output streams, rather than at interpreter exit."""
    yield
    from dask_dppca.compute import close_embedded_cluster

    close_embedded_cluster()
