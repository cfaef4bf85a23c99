"""Where a fit runs, and how long it may wait there.

A compute target is a Dask local scheduler, an existing client, an address, or the
embedded LocalCluster (the default when no distributed client is active).  Every wait
on a cluster is bounded: :func:`await_result` fails with :class:`ClusterStalledError`
when the cluster cannot make progress (no running worker, every worker paused, a
needed worker gone) for longer than the configured stall timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import dask
import distributed

__all__ = ["LOCAL_SCHEDULERS", "STALL_TIMEOUT_KEY", "TRUSTED_RESOURCE", "ClusterStalledError", "await_result",
           "check_scheduler", "compute_target", "thread_count", "embedded_client", "in_this_process",
           "workers_in_this_process",
           "close_embedded_cluster"]

#: Dask's in-process schedulers, accepted by name.
LOCAL_SCHEDULERS = {"synchronous": "synchronous", "sync": "synchronous",
                    "single-threaded": "synchronous", "threads": "threads",
                    "threading": "threads", "processes": "processes"}
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

#: Dask configuration key: seconds a fit waits on a cluster that cannot make progress
#: (environment variable ``DASK_DASK_DPPCA__STALL_TIMEOUT``).
STALL_TIMEOUT_KEY = "dask-dppca.stall-timeout"
DEFAULT_STALL_TIMEOUT = 30.0
#: Seconds between two looks at the cluster while waiting for a result.
_POLL = 0.5

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
    check_scheduler(scheduler)
    if isinstance(scheduler, distributed.Client):
        yield scheduler
        return
    if scheduler is None:
        # Resolve first, then yield once: an error raised inside the caller's block must
        # leave as itself, not be caught here as "no active client".
        try:
            client = distributed.get_client()
        except ValueError:
            client = embedded_client()
        yield client
        return
    if isinstance(scheduler, str) and scheduler in LOCAL_SCHEDULERS:
        yield LOCAL_SCHEDULERS[scheduler]
        return
    client = _connect(scheduler)
    try:
        yield client
    finally:
        client.close()


def check_scheduler(scheduler: Any) -> None:
    """Raise ValueError unless ``scheduler`` is a value :func:`compute_target` takes.

    Checks the value only: nothing is started and no address is contacted.
    """
    if scheduler is None or isinstance(scheduler, distributed.Client):
        return
    if isinstance(scheduler, str) and (scheduler in LOCAL_SCHEDULERS or _is_address(scheduler)):
        return
    raise ValueError(
        f"scheduler: unknown value {scheduler!r}; expected None (embedded LocalCluster), "
        f"one of {sorted(set(LOCAL_SCHEDULERS))}, an address such as 'tcp://host:8786', "
        "or a distributed.Client"
    )


def _is_address(value: str) -> bool:
    return "://" in value or ":" in value


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
    """The embedded LocalCluster's client: one in-process worker, one thread per core.

    In-process (``processes=False``) rather than spawned worker processes: the kernel
    spends its time in numba and BLAS, which release the GIL, so threads keep every core
    busy; nothing is spawned, so a script without an ``if __name__ == "__main__":``
    guard works and the first fit does not pay for starting and importing in new
    interpreters (measurements in the closing note of issue 11 and in
    benchmarks/README.md).  One worker, so Dask's memory limit (80% pause threshold)
    applies to this one process as a whole, as it should.  The worker offers the
    ``dppca-trusted`` resource: the release is placed like on any cluster, and on this
    machine the client process holds the exact K_hat anyway (docs/privacy.md, threat
    model).  No dashboard is started, so none is advertised.
    """
    with _embedded_lock:
        client = _embedded.get("client")
        if client is None or client.status != "running":
            cluster = distributed.LocalCluster(
                n_workers=1,
                threads_per_worker=max(1, os.cpu_count() or 1),
                processes=False,
                dashboard_address=None,
                # No dashboard; the scheduler's small HTTP server (health, metrics) on a
                # free port, so a busy 8787 never prints a warning.
                scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"},
                resources={TRUSTED_RESOURCE: 1},
            )
            client = distributed.Client(cluster, set_as_default=False)
            _embedded.update(cluster=cluster, client=client)
        return client


def in_this_process(address: str) -> bool:
    """Whether a worker at ``address`` runs inside this process (an ``inproc://`` worker)."""
    return str(address).startswith("inproc://")


def workers_in_this_process(client: distributed.Client) -> bool:
    """Whether the client's workers all run inside this process (the embedded cluster,
    ``LocalCluster(processes=False)``)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return bool(workers) and all(in_this_process(address) for address in workers)


class ClusterStalledError(RuntimeError):
    """The cluster could not make progress within the stall timeout; the work was cancelled."""


def stall_timeout() -> float:
    """Seconds to wait on a cluster that cannot make progress (:data:`STALL_TIMEOUT_KEY`)."""
    value = dask.config.get(STALL_TIMEOUT_KEY, DEFAULT_STALL_TIMEOUT)
    seconds = float(dask.utils.parse_timedelta(value, default="s"))
    if not seconds > 0:
        raise ValueError(f"{STALL_TIMEOUT_KEY}: must be a positive duration, got {value!r}")
    return seconds


def await_result(
    client: distributed.Client,
    future: distributed.Future,
    label: str,
    needed: Callable[[dict], str | None] | None = None,
) -> Any:
    """``future.result()``, bounded: fail when the cluster cannot make progress.

    Every ``_POLL`` seconds without a result the scheduler's worker list is read.  The
    cluster is stalled when no worker is running (none left, or every one paused by
    its memory monitor) while none is executing a task, or when ``needed(workers)``
    names a missing requirement (e.g. the trusted worker left).  Stalled for longer
    than :func:`stall_timeout` seconds in a row: the future is cancelled and
    :class:`ClusterStalledError` says why.

    Parameters
    ----------
    client : distributed.Client
    future : distributed.Future
    label : str
        What is waited for, at the start of the error message.
    needed : callable, optional
        ``needed(workers) -> reason or None`` over the scheduler's worker information.
    """
    limit = stall_timeout()
    # Wait on a done-callback, not on ``future.result(timeout=...)``: on Python 3.11 a
    # result arriving just as that timeout expires leaves the awaiting task cancelled
    # (asyncio.timeout's pending cancel is not cleared), and distributed's ``sync`` then
    # dies with UnboundLocalError instead of returning or timing out.
    finished = threading.Event()
    future.add_done_callback(lambda _: finished.set())
    stalled_since = None
    while not finished.wait(_POLL):
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"]
        except (OSError, TimeoutError) as error:
            raise ClusterStalledError(f"{label}: lost the scheduler ({error})") from None
        reason = _stall_reason(workers) or (needed(workers) if needed else None)
        if reason is None:
            stalled_since = None
            continue
        stalled_since = stalled_since or time.monotonic()
        if time.monotonic() - stalled_since > limit:
            future.cancel()
            raise ClusterStalledError(
                f"{label}: {reason} for {limit:g} s, so the work was stopped "
                f"(the wait is the Dask configuration key {STALL_TIMEOUT_KEY!r})"
            )
    try:
        # Done: an error or cancellation raises at once; a result is fetched from its worker.
        return future.result(timeout=limit)
    except TimeoutError:
        raise ClusterStalledError(
            f"{label}: finished, but its result did not arrive from the worker holding it "
            f"within {limit:g} s (the wait is the Dask configuration key {STALL_TIMEOUT_KEY!r})"
        ) from None


def _stall_reason(workers: dict) -> str | None:
    """Why no task can run on these workers, or None when some can."""
    if not workers:
        return "the cluster has no workers"
    if any(info.get("status") == "running" for info in workers.values()):
        return None
    if any(_executing(info) for info in workers.values()):
        return None
    states = sorted({str(info.get("status")) for info in workers.values()})
    return (f"no worker can run tasks (worker status: {', '.join(states)}; a paused worker "
            "is over its memory pause threshold)")


def _executing(info: dict) -> int:
    return int((info.get("metrics") or {}).get("task_counts", {}).get("executing", 0))


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
