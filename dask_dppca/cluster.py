"""Where a fit runs: a Dask local scheduler, an existing client, an address, or the
embedded LocalCluster (the default when no distributed client is active).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import distributed

__all__ = ["LOCAL_SCHEDULERS", "compute_target", "thread_count", "embedded_client",
           "close_embedded_cluster"]

#: Dask's in-process schedulers, accepted by name.
LOCAL_SCHEDULERS = {"synchronous": "synchronous", "sync": "synchronous",
                    "single-threaded": "synchronous", "threads": "threads",
                    "threading": "threads", "processes": "processes"}
#: Seconds to wait for a scheduler address to answer before giving up.
CONNECT_TIMEOUT = 10
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


@contextmanager
def compute_target(scheduler: Any = None) -> Iterator[distributed.Client | str]:
    """Yield what to compute on: a ``distributed.Client`` or a local scheduler name.

    Parameters
    ----------
    scheduler : None, str or distributed.Client
        ``None``: the active distributed client if there is one, else the embedded
        LocalCluster (started on first use, reused, closed at exit).  A local
        scheduler name (``"synchronous"``, ``"threads"``, ``"processes"``).  A
        scheduler address (``"tcp://host:8786"``, ``"tls://..."``; the client's TLS
        certificates come from the Dask configuration, see :func:`tls_config`).  Or a
        ``distributed.Client`` (for example one made with
        ``distributed.Client(address, security=distributed.Security(...))``).

    Raises
    ------
    ValueError
        For an unknown scheduler value, a ``tls://`` address without client
        certificates in the Dask configuration, or an address that does not answer
        (or refuses the handshake) within ``CONNECT_TIMEOUT`` seconds.
    """
    if isinstance(scheduler, distributed.Client):
        yield scheduler
        return
    if scheduler is None:
        try:
            yield distributed.get_client()
        except ValueError:
            yield embedded_client()
        return
    if isinstance(scheduler, str) and scheduler in LOCAL_SCHEDULERS:
        yield LOCAL_SCHEDULERS[scheduler]
        return
    if isinstance(scheduler, str) and ("://" in scheduler or ":" in scheduler):
        client = _connect(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    raise ValueError(
        f"scheduler: unknown value {scheduler!r}; expected None (embedded LocalCluster), "
        f"one of {sorted(set(LOCAL_SCHEDULERS))}, an address such as 'tcp://host:8786', "
        "or a distributed.Client"
    )


def thread_count(target: distributed.Client | str) -> int:
    """Worker threads a compute target offers (public: the cluster's size)."""
    if isinstance(target, str):
        return 1 if target == "synchronous" else (os.cpu_count() or 1)
    workers = target.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(int(info.get("nthreads", 1)) for info in workers.values()))


def _connect(address: str) -> distributed.Client:
    security = distributed.Security()  # TLS material from the Dask configuration
    if address.startswith("tls://"):
        missing = [TLS_CONFIG_KEYS[name] for name, value in (
            ("ca_file", security.tls_ca_file), ("cert", security.tls_client_cert),
            ("key", security.tls_client_key)) if not value]
        if missing:
            raise ValueError(
                f"scheduler: {address!r} needs TLS client certificates; set "
                f"{', '.join(missing)} in the Dask configuration (or the DASK_DISTRIBUTED__COMM__TLS__* "
                "environment variables, or dask-dppca's --tls-ca-file/--tls-cert/--tls-key), "
                "or pass a distributed.Client made with security=distributed.Security(...)"
            )
    _check_answers(address, security)
    try:
        return distributed.Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False,
                                  security=security)
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
        comm = await connect(address, timeout=CONNECT_TIMEOUT,
                             **security.get_connection_args("client"))
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
def tls_config(ca_file: str | None = None, cert: str | None = None,
               key: str | None = None) -> Iterator[None]:
    """Within the block, connect to ``tls://`` addresses with these client certificates.

    Sets the Dask configuration keys of :data:`TLS_CONFIG_KEYS` (those left ``None``
    keep their configured value) and requires encryption, so a plain ``tcp://``
    address is refused rather than silently used.
    """
    import dask

    values = {TLS_CONFIG_KEYS[name]: value
              for name, value in (("ca_file", ca_file), ("cert", cert), ("key", key))
              if value is not None}
    if not values:
        yield
        return
    with dask.config.set({**values, "distributed.comm.require-encryption": True}):
        yield


def embedded_client() -> distributed.Client:
    """The embedded LocalCluster's client: one worker process per core, one thread each."""
    with _embedded_lock:
        client = _embedded.get("client")
        if client is None or client.status != "running":
            cluster = distributed.LocalCluster(
                n_workers=max(1, min(os.cpu_count() or 1, 8)),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            client = distributed.Client(cluster, set_as_default=False)
            _embedded.update(cluster=cluster, client=client)
        return client


def close_embedded_cluster() -> None:
    """Stop the embedded LocalCluster if one was started."""
    with _embedded_lock:
        client = _embedded.pop("client", None)
        cluster = _embedded.pop("cluster", None)
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


atexit.register(close_embedded_cluster)
