"""Where a compute runs: the embedded LocalCluster, scheduler addresses and TLS.

:func:`embedded_client` starts (once) the in-process LocalCluster that is the default
target; :func:`connect` opens a client for a scheduler address, bounded; :func:`tls_config`
gives ``tls://`` addresses their client certificates.  :mod:`.target` wraps what comes out
as a :class:`~dask_dppca.compute.target.ComputeTarget`.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import dask
import distributed

__all__ = [
    "DASHBOARD_KEY",
    "TRUSTED_RESOURCE",
    "active_client",
    "close_embedded_cluster",
    "connect",
    "dashboard_requested",
    "embedded_client",
    "embedded_dashboard_link",
    "in_this_process",
    "tls_config",
    "where_drawn",
    "workers_in_this_process",
]

#: Seconds to wait for a scheduler address to answer before giving up.
CONNECT_TIMEOUT = 10
#: Worker resource that marks the trusted node (``dask worker --resources "dppca-trusted=1"``).
TRUSTED_RESOURCE = "dppca-trusted"
#: Port of ``dask scheduler`` when none is given (the deploy/ recipes use it).
DEFAULT_SCHEDULER_PORT = 8786
#: Dask configuration keys holding the client's TLS material (environment variables
#: ``DASK_DISTRIBUTED__COMM__TLS__CA_FILE`` etc. set them too).
TLS_CONFIG_KEYS = {
    "ca_file": "distributed.comm.tls.ca-file",
    "cert": "distributed.comm.tls.client.cert",
    "key": "distributed.comm.tls.client.key",
}

_embedded: dict[str, Any] = {}
_embedded_lock = threading.Lock()


def connect(address: str) -> distributed.Client:
    """A client of the scheduler at ``address``; fails within ``CONNECT_TIMEOUT`` seconds."""
    security = distributed.Security()  # TLS material from the Dask configuration
    if address.startswith("tls://"):
        missing = [
            TLS_CONFIG_KEYS[name]
            # distributed sets Security's fields in __init__ from __slots__ names, which
            # its inline types do not declare: hence the three ignores.
            for name, value in (
                ("ca_file", security.tls_ca_file),  # type: ignore[attr-defined]
                ("cert", security.tls_client_cert),  # type: ignore[attr-defined]
                ("key", security.tls_client_key),  # type: ignore[attr-defined]
            )
            if not value
        ]
        if missing:
            raise ValueError(
                f"scheduler: {address!r} needs TLS client certificates; set "
                f"{', '.join(missing)} in the Dask configuration (or the "
                "DASK_DISTRIBUTED__COMM__TLS__* "
                "environment variables, or dask-dppca's --tls-ca-file/--tls-cert/--tls-key), "
                "or pass a distributed.Client made with security=distributed.Security(...)"
            )
    _check_answers(address, security)
    try:
        return distributed.Client(
            address, timeout=CONNECT_TIMEOUT, set_as_default=False, security=security
        )
    except (OSError, TimeoutError) as error:
        raise ValueError(
            f"scheduler: no Dask scheduler answered at {address!r} within "
            f"{CONNECT_TIMEOUT} s ({type(error).__name__}: {error})"
        ) from None


def _check_answers(address: str, security: distributed.Security) -> None:
    """Fail within ``CONNECT_TIMEOUT`` when nothing at ``address`` completes a handshake.

    distributed's connect() awaits the scheduler's handshake without a deadline, so a
    port that accepts and never answers would hang ``Client()``: probe it with one.
    """
    from distributed.comm import connect

    async def handshake():
        comm = await connect(
            address, timeout=CONNECT_TIMEOUT, **security.get_connection_args("client")
        )
        await comm.close()

    try:  # in its own thread: works under a running event loop (notebooks) too
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, asyncio.wait_for(handshake(), CONNECT_TIMEOUT)).result()
    except (OSError, TimeoutError) as error:
        raise ValueError(
            f"scheduler: no Dask scheduler answered at {address!r} within "
            f"{CONNECT_TIMEOUT} s ({type(error).__name__}: {error or 'no handshake'})"
        ) from None


@contextmanager
def tls_config(
    ca_file: str | None = None, cert: str | None = None, key: str | None = None
) -> Iterator[None]:
    """Within the block, connect to ``tls://`` addresses with these client certificates.

    Sets the Dask configuration keys of ``TLS_CONFIG_KEYS`` (those left ``None``
    keep their configured value) and requires encryption, so a plain ``tcp://``
    address is refused rather than silently used.
    """
    values = {
        TLS_CONFIG_KEYS[name]: value
        for name, value in (("ca_file", ca_file), ("cert", cert), ("key", key))
        if value is not None
    }
    if not values:
        yield
        return
    with dask.config.set({**values, "distributed.comm.require-encryption": True}):
        yield


def active_client() -> distributed.Client | None:
    """The client this process made current (``distributed.get_client()``), if it runs.

    ``get_client`` also returns a client whose ``close`` began but did not finish (its
    connections closed, its status ``closing``); a fit sent to it would fail with
    "ConnectionPool is closed".  Such a client is no client: the embedded cluster serves.
    """
    try:
        client = distributed.get_client()
    except ValueError:
        return None
    return client if client.status == "running" else None


def embedded_client() -> distributed.Client:
    """The embedded LocalCluster's client: one in-process worker, one thread per core.

    In-process (``processes=False``) rather than spawned worker processes: the kernel
    spends its time in numba and BLAS, which release the GIL, so threads keep every core
    busy; nothing is spawned, so a script without an ``if __name__ == "__main__":``
    guard works and the first fit does not pay for starting and importing in new
    interpreters (benchmarks/README.md, bench_embedded).  One worker, so Dask's memory
    limit (80% pause threshold)
    applies to this one process as a whole, as it should.  The worker offers the
    ``dppca-trusted`` resource: the release is placed like on any cluster, and on this
    machine the client process holds the exact K_hat anyway (docs/privacy.md, threat
    model).

    Nothing listens on the network: the scheduler and the worker talk ``inproc://``, and
    the HTTP servers distributed starts with every scheduler and worker (health, metrics,
    its ``/info`` pages with the scheduler's log and a form that closes workers) are bound
    to 127.0.0.1, without routes, and stopped as soon as the cluster is up.  Unless the
    Dask configuration key :data:`DASHBOARD_KEY` asks for the dashboard (read when the
    cluster starts; it needs bokeh, the ``dashboard`` extra): then the scheduler's
    dashboard stays, on 127.0.0.1 only, and :func:`embedded_dashboard_link` (and the
    client's ``dashboard_link``) give its address.
    """
    with _embedded_lock:
        client = _embedded.get("client")
        if client is None or client.status != "running":
            dashboard = dashboard_requested()
            routes = {} if dashboard else _NO_ROUTES
            with dask.config.set(routes):
                cluster = _EmbeddedCluster(
                    n_workers=1,
                    threads_per_worker=max(1, os.cpu_count() or 1),
                    processes=False,
                    # Loopback only, any free port (never the busy-8787 warning); the
                    # workers' servers are stopped below whatever is asked.
                    dashboard_address=LOOPBACK_ANY_PORT,
                    worker_dashboard_address=LOOPBACK_ANY_PORT,
                    scheduler_kwargs={"dashboard": dashboard},
                    resources={TRUSTED_RESOURCE: 1},
                )
            try:
                cluster.sync(_stop_http_servers, cluster, not dashboard)
                client = distributed.Client(cluster, set_as_default=False)
            except BaseException:
                cluster.close()
                raise
            _embedded.update(cluster=cluster, client=client)
            if dashboard:
                print(
                    f"dask-dppca: the embedded cluster's dashboard: {cluster.dashboard_link}",
                    file=sys.stderr,
                )
        return client


#: Dask configuration key: start the embedded cluster with its dashboard (on 127.0.0.1;
#: environment variable ``DASK_DASK_DPPCA__DASHBOARD=true``).  Needs bokeh.
DASHBOARD_KEY = "dask-dppca.dashboard"
#: Where the embedded cluster's HTTP servers bind while they exist: loopback, a free port.
LOOPBACK_ANY_PORT = "127.0.0.1:0"
#: distributed's HTTP routes, none (the servers are stopped at once anyway).
_NO_ROUTES: dict[str, list[str]] = {
    "distributed.scheduler.http.routes": [],
    "distributed.worker.http.routes": [],
}


def dashboard_requested() -> bool:
    """Whether :data:`DASHBOARD_KEY` asks for the embedded cluster's dashboard.

    Raises
    ------
    ValueError
        If the key holds no boolean, or asks for the dashboard while bokeh, which draws
        it, is not installed.
    """
    value = dask.config.get(DASHBOARD_KEY, False)
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        value = value.strip().lower() in ("true", "1", "yes")
    if not isinstance(value, bool):
        raise ValueError(f"{DASHBOARD_KEY}: expected true or false, got {value!r}")
    if value and importlib.util.find_spec("bokeh") is None:
        raise ValueError(
            f"{DASHBOARD_KEY}: the dashboard needs bokeh, which is not installed; "
            "pip install 'dask-dppca[dashboard]'"
        )
    return value


def embedded_dashboard_link() -> str | None:
    """The address of the embedded cluster's dashboard, or None when it has none."""
    cluster = _embedded.get("cluster")
    return cluster.dashboard_link or None if cluster is not None else None


class _EmbeddedCluster(distributed.LocalCluster):
    """The embedded LocalCluster, whose dashboard link names the address it listens on.

    distributed builds the link from the scheduler's address, which for ``inproc://`` is
    the machine's network address, where nothing answers; the dashboard is on 127.0.0.1.
    """

    @property
    def dashboard_link(self) -> str:
        """``http://127.0.0.1:PORT/status``, or "" without a dashboard."""
        scheduler = self.scheduler
        server = getattr(scheduler, "http_server", None)
        if scheduler is None or server is None or "dashboard" not in scheduler.services:
            return ""
        return f"http://127.0.0.1:{server.port}/status"


async def _stop_http_servers(cluster: distributed.LocalCluster, scheduler_too: bool) -> None:
    """Stop the workers' HTTP servers (and the scheduler's), on the cluster's event loop."""
    nodes = [*cluster.workers.values(), *([cluster.scheduler] if scheduler_too else [])]
    for node in nodes:
        server = getattr(node, "http_server", None)
        if server is not None:
            server.stop()
        node.services.pop("dashboard", None)


def in_this_process(address: str) -> bool:
    """Whether a worker at ``address`` runs inside this process (an ``inproc://`` worker)."""
    return str(address).startswith("inproc://")


#: How a report names a worker of this process (the embedded cluster's, an ``inproc://``
#: address: a name no reader could look up).
IN_PROCESS_WORKER = "the embedded cluster (a worker in this process)"


def where_drawn(address: object) -> str:
    """Where a release's noise was drawn, as a report shows it: an ``inproc://`` worker
    as ``IN_PROCESS_WORKER``, any other address or description as it is.

    Examples
    --------
    >>> from dask_dppca.compute.cluster import where_drawn
    >>> where_drawn("inproc://192.0.2.2/6816/4")
    'the embedded cluster (a worker in this process)'
    >>> where_drawn("tls://10.0.0.7:40123")
    'tls://10.0.0.7:40123'
    """
    text = "" if address is None else str(address)
    return IN_PROCESS_WORKER if in_this_process(text) else text


def workers_in_this_process(client: distributed.Client) -> bool:
    """Whether the client's workers all run inside this process (the embedded cluster,
    ``LocalCluster(processes=False)``).
    """
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return bool(workers) and all(in_this_process(address) for address in workers)


def close_embedded_cluster() -> None:
    """Stop the embedded LocalCluster if one was started."""
    with _embedded_lock:
        client = _embedded.pop("client", None)
        cluster = _embedded.pop("cluster", None)
        if client is not None:
            # A progress bar's feed on the scheduler notices its closed connection at its
            # next update (every 0.1 s); let it, so that closing right after a fit (the CLI
            # exits) does not cancel the feed mid-sleep and log a CancelledError traceback.
            time.sleep(0.3)
            client.close()
        if cluster is not None:
            cluster.close()


atexit.register(close_embedded_cluster)
