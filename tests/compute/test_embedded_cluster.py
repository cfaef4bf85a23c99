"""The embedded LocalCluster listens nowhere but loopback, and by default not at all.

distributed starts an HTTP server with every scheduler and worker (health, metrics, an
``/info`` page with the scheduler's log and a form that closes workers); with
``dashboard_address=":0"`` it listened on 0.0.0.0 and [::] while the process held the
exact K_hat.  The listening sockets of this process are sampled every few milliseconds
while a default fit starts the embedded cluster and runs.
"""

from __future__ import annotations

import ipaddress
import threading
import urllib.request

import dask
import numpy as np
import psutil
import pytest

import dask_dppca as dd
from dask_dppca.compute import cluster as cluster_module

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.filterwarnings(
        "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
    ),
]


def _listening() -> set[tuple[str, int]]:
    return {
        (s.laddr.ip, s.laddr.port)
        for s in psutil.Process().net_connections(kind="inet")
        if s.status == psutil.CONN_LISTEN
    }


class _Watch:
    """Every listening socket of this process while the block runs (sampled every 2 ms)."""

    def __enter__(self) -> _Watch:
        self.seen: set[tuple[str, int]] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(0.002):
            self.seen |= _listening()

    def __exit__(self, *exc_info) -> None:
        self._done.set()
        self._thread.join()
        self.seen |= _listening()


def _outside_loopback(sockets) -> set:
    return {(ip, port) for ip, port in sockets if not ipaddress.ip_address(ip).is_loopback}


def test_a_default_fit_opens_no_socket_outside_loopback_and_leaves_none_listening():
    cluster_module.close_embedded_cluster()  # this fit starts it
    before = _listening()
    x = np.random.default_rng(0).standard_normal((600, 4))  # test data
    with _Watch() as watch:
        dd.DPPCA(random_state=0).fit(x)
        during_fit_after_start = _listening()
    assert _outside_loopback(watch.seen - before) == set(), watch.seen
    assert during_fit_after_start - before == set()  # no HTTP server once it is up
    assert cluster_module.embedded_dashboard_link() is None


def test_the_dashboard_on_request_is_on_loopback_and_its_link_answers():
    cluster_module.close_embedded_cluster()
    before = _listening()
    try:
        with dask.config.set({cluster_module.DASHBOARD_KEY: True}), _Watch() as watch:
            client = cluster_module.embedded_client()
        link = cluster_module.embedded_dashboard_link()
        assert link is not None and link == client.dashboard_link
        assert link.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(link, timeout=30) as page:
            assert page.status == 200 and b"bokeh" in page.read().lower()
        assert _outside_loopback(watch.seen - before) == set(), watch.seen
        assert len(_listening() - before) == 1  # the scheduler's dashboard, not the worker's
    finally:
        cluster_module.close_embedded_cluster()


def test_a_dashboard_without_bokeh_is_refused_naming_the_key_and_the_extra(monkeypatch):
    real = cluster_module.importlib.util.find_spec
    monkeypatch.setattr(
        cluster_module.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "bokeh" else real(name, *args),
    )
    with dask.config.set({cluster_module.DASHBOARD_KEY: True}):
        with pytest.raises(ValueError, match=r"dask-dppca\.dashboard.*dask-dppca\[dashboard\]"):
            cluster_module.dashboard_requested()
    with dask.config.set({cluster_module.DASHBOARD_KEY: "maybe"}):
        with pytest.raises(ValueError, match=r"dask-dppca\.dashboard: expected true or false"):
            cluster_module.dashboard_requested()


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_a_current_client_whose_close_began_is_passed_over():
    """``distributed.get_client()`` still returns a client whose close began (its
    connections closed: "ConnectionPool is closed" on any call); the default path and
    the planner's cluster shape pass it over for the embedded cluster."""
    import distributed

    from dask_dppca.compute.shape import cluster_shape
    from dask_dppca.compute.target import compute_target

    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc:
        client = distributed.Client(lc)
        try:
            client.status = "closing"  # a close that began and did not finish
            assert distributed.get_client() is client
            assert cluster_module.active_client() is None
            with compute_target(None) as target:
                assert target.client is not client
                assert target.client is cluster_module.embedded_client()
            assert cluster_shape(None).in_process
        finally:
            client.status = "running"
            client.close()
