"""Where a fit runs: a Dask local scheduler, an existing client, an address, or the
embedded LocalCluster (the default when no distributed client is active).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import distributed

__all__ = ["LOCAL_SCHEDULERS", "compute_target", "embedded_client", "close_embedded_cluster"]

#: Dask's in-process schedulers, accepted by name.
LOCAL_SCHEDULERS = {"synchronous": "synchronous", "sync": "synchronous",
                    "single-threaded": "synchronous", "threads": "threads",
                    "threading": "threads", "processes": "processes"}
#: Seconds to wait for a scheduler address to answer before giving up.
CONNECT_TIMEOUT = 10

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
        scheduler address (``"tcp://host:8786"``, ``"tls://..."``; TLS settings come
        from the Dask configuration).  Or a ``distributed.Client``.

    Raises
    ------
    ValueError
        For an unknown scheduler value, or an address that does not answer within
        ``CONNECT_TIMEOUT`` seconds.
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


def _connect(address: str) -> distributed.Client:
    try:
        return distributed.Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise ValueError(
            f"scheduler: no Dask scheduler answered at {address!r} within "
            f"{CONNECT_TIMEOUT} s ({type(error).__name__}: {error})"
        ) from None


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
