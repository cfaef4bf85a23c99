"""Shared fixtures.  Seeds here generate TEST DATA only (never privacy noise)."""

from __future__ import annotations

import math
import os

import pytest
from distributed import Client, LocalCluster

from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum

#: Most workers ``-n auto`` starts: each may run a cluster, a notebook or a browser.
MAX_AUTO_WORKERS = 4


def _usable_cores() -> int:
    """The cores this process may use: its CPU affinity and a cgroup v2 CPU quota (a
    container limited to 2 CPUs on a large host reports the host's cores elsewhere).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        with open("/sys/fs/cgroup/cpu.max") as limits:
            quota, period = limits.read().split()[:2]
        if quota != "max":
            cores = min(cores or 1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores or 1)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): the usable cores, at most MAX_AUTO_WORKERS."""
    return min(_usable_cores(), MAX_AUTO_WORKERS)


#: Tests that share nothing across their parameters and each take tens of seconds: each
#: parameter is its own unit of work instead of their whole file going to one worker.
APART = ("tests/benchmarks/test_benchmarks.py::test_smallest_run_exits_cleanly",)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (pyproject's addopts), except the tests in :data:`APART`.

    Each file runs on one worker, so that its module fixtures (a cluster, a server) are
    made once; the benchmarks' smallest runs (about 20 commands of 5 to 70 s) would make
    theirs one worker's long tail, so they are spread one by one.
    """
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesWithSlowParametersApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(APART):
                return nodeid
            return super()._split_scope(nodeid)

    return FilesWithSlowParametersApart(config, log)


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
