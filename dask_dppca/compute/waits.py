"""Bounded waits: a result from a cluster, or a clear error when it cannot make progress.

:func:`await_result` is ``future.result()`` with a bound: it fails with
:class:`ClusterStalledError` when the cluster cannot make progress (no running worker,
every worker paused, a needed worker gone) for longer than the configured stall
timeout (Dask configuration key ``dask-dppca.stall-timeout``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import dask
import distributed

from .failures import (
    UNDER_FOOTPRINT,
    SchedulerLostError,
    largest_rss_mib,
    memory_restarts,
    scheduler_address,
)

__all__ = [
    "DEFAULT_STALL_TIMEOUT",
    "STALL_TIMEOUT_KEY",
    "ClusterStalledError",
    "await_done",
    "await_result",
    "stall_timeout",
]

#: Dask configuration key: seconds a fit waits on a cluster that cannot make progress
#: (environment variable ``DASK_DASK_DPPCA__STALL_TIMEOUT``).
STALL_TIMEOUT_KEY = "dask-dppca.stall-timeout"
DEFAULT_STALL_TIMEOUT = 30.0
#: Seconds between two looks at the cluster while waiting for a result.
_POLL = 0.5


class ClusterStalledError(RuntimeError):
    """The cluster could not make progress within the stall timeout; the work was cancelled.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> issubclass(dd.ClusterStalledError, RuntimeError)  # nothing was released
    True
    """


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
    _wait(client, lambda: finished.wait(_POLL), [future], label, needed, limit)
    try:
        # Done: an error or cancellation raises at once; a result is fetched from its worker.
        return future.result(timeout=limit)
    except TimeoutError:
        raise ClusterStalledError(
            f"{label}: finished, but its result did not arrive from the worker holding it "
            f"within {limit:g} s (the wait is the Dask configuration key {STALL_TIMEOUT_KEY!r})"
        ) from None


def await_done(
    client: distributed.Client,
    futures: list[distributed.Future],
    label: str,
    needed: Callable[[dict], str | None] | None = None,
) -> None:
    """Wait, bounded like :func:`await_result`, until every future is done, without
    fetching any result; the first error among them is raised.
    """
    limit = stall_timeout()
    remaining = [len(futures)]
    lock = threading.Lock()
    finished = threading.Event()

    def one_done(_: Any) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] <= 0:
                finished.set()

    if not futures:
        return
    for future in futures:
        future.add_done_callback(one_done)
    _wait(client, lambda: finished.wait(_POLL), futures, label, needed, limit)
    while True:
        for future in futures:
            if future.status in ("error", "cancelled"):
                future.result(timeout=limit)  # raises its error or cancellation
        # Done, then lost with its worker and being computed again: wait again, by
        # looking at their status (a lost future may count as done without being so).
        # Never result(): it would fetch the value (a sealed lane sum) to the client.
        again = [future for future in futures if future.status != "finished"]
        if not again:
            return
        _wait(client, functools.partial(_settled, again), again, label, needed, limit)


def _settled(futures: list[distributed.Future]) -> bool:
    """After a pause of one poll: whether none of ``futures`` is still to be computed."""
    time.sleep(_POLL)
    return all(future.status in ("finished", "error", "cancelled") for future in futures)


def _wait(client, done, futures, label, needed, limit) -> None:
    """Until ``done()`` (which takes about one poll) is true; a stalled cluster cancels
    ``futures`` and raises.
    """
    began = time.time()
    stalled_since = None
    while not done():
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"]
        except (OSError, TimeoutError) as error:
            raise SchedulerLostError(
                f"{label}: the scheduler at {scheduler_address(client)} went away ({error})"
            ) from None
        reason = (
            _stall_reason(workers)
            or _held_by_paused(workers)
            or (needed(workers) if needed else None)
        )
        if reason is None:
            stalled_since = None
            continue
        stalled_since = stalled_since or time.monotonic()
        if time.monotonic() - stalled_since > limit:
            for future in futures:
                future.cancel()
            raise ClusterStalledError(
                f"{label}: {reason} for {limit:g} s, so the work was stopped "
                f"(the wait is the Dask configuration key {STALL_TIMEOUT_KEY!r})"
                f"{_restarts_seen(client, began)}"
            )


def _restarts_seen(client, since: float) -> str:
    """Workers restarted over their memory limit during the wait, in words ("" for none):
    a worker killed and restarted in a loop leaves the cluster without workers, or with
    one still starting, and that is the cause to name.
    """
    restarts = memory_restarts(client, since)
    if not restarts:
        return ""
    rss = largest_rss_mib(restarts)
    return (
        f"; meanwhile the nannies restarted workers {len(restarts)} time(s) for exceeding "
        f"their memory limit (up to {rss:.0f} MiB): {UNDER_FOOTPRINT} restarts them at "
        "rest; raise --memory-limit (or the cluster's worker memory)"
    )


def _stall_reason(workers: dict) -> str | None:
    """Why no task can run on these workers, or None when some can."""
    if not workers:
        return "the cluster has no workers"
    if any(info.get("status") == "running" for info in workers.values()):
        return None
    if any(_executing(info) for info in workers.values()):
        return None
    states = sorted({str(info.get("status")) for info in workers.values()})
    return (
        f"no worker can run tasks (worker status: {', '.join(states)}; a paused worker "
        "is over its memory pause threshold)"
    )


def _held_by_paused(workers: dict) -> str | None:
    """A paused worker holding tasks it cannot start (they wait for it, however many other
    workers run), or None.
    """
    for address, info in sorted(workers.items()):
        if info.get("status") != "paused" or _executing(info):
            continue
        counts = (info.get("metrics") or {}).get("task_counts", {})
        queued = sum(int(counts.get(state, 0)) for state in ("ready", "constrained"))
        if queued:
            return (
                f"worker {address} is paused (over its memory pause threshold) with "
                f"{queued} task(s) waiting on it"
            )
    return None


def _executing(info: dict) -> int:
    return int((info.get("metrics") or {}).get("task_counts", {}).get("executing", 0))
