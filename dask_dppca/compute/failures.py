"""What went wrong on a cluster, in one line: a worker that died, a scheduler that left.

* :func:`killed_worker_error`: Dask's ``KilledWorker`` names a key and a worker.  The
  nanny records a worker it restarts for exceeding its memory limit (the scheduler's
  ``worker-restart-memory`` events); the error says which task died (a read of the
  store, a block-pair task, the release), that it hit the memory limit, and what to
  change.
* :class:`SchedulerLostError`: the scheduler went away during a fit (its futures are
  cancelled, its connection closed).  Whether the release may have drawn its noise is
  the release ticket's business (:mod:`.tickets`); the message says which it is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import distributed

__all__ = [
    "MEMORY_EVENT",
    "UNDER_FOOTPRINT",
    "SchedulerLostError",
    "WorkerDiedError",
    "is_scheduler_loss",
    "killed_worker_error",
    "largest_rss_mib",
    "lost_scheduler",
    "memory_restarts",
    "scheduler_address",
    "task_role",
]

#: The scheduler's event topic for a worker its nanny restarted over the memory limit.
MEMORY_EVENT = "worker-restart-memory"
#: The usual cause of workers that die before any task runs, in words (measured: a
#: worker holds about 270 MiB once numpy, Dask, numba and the kernel are imported).
UNDER_FOOTPRINT = (
    "a worker's memory limit below its own footprint (about 300 MiB once the kernel is imported)"
)


class SchedulerLostError(RuntimeError):
    """The scheduler of the fit's cluster went away before the fit finished."""


class WorkerDiedError(RuntimeError):
    """A worker died running one of the fit's tasks as many times as Dask allows."""


def scheduler_address(client: Any) -> str:
    """The scheduler's address as the client knows it (also after it went away)."""
    scheduler = getattr(client, "scheduler", None)
    address = getattr(scheduler, "address", None) if scheduler is not None else None
    return str(address or getattr(client, "_start_arg", None) or "?")


def is_scheduler_loss(error: BaseException, client: Any) -> bool:
    """Whether ``error`` (raised waiting for a result) means the scheduler went away.

    A cancelled future whose client no longer runs, or a closed connection to the
    scheduler.
    """
    if isinstance(error, distributed.client.FutureCancelledError) and "scheduler" in str(
        getattr(error, "reason", "")
    ):
        return True  # "scheduler-connection-lost" (the client may have reconnected since)
    if isinstance(error, asyncio.CancelledError):
        return not _scheduler_answers(client)
    if isinstance(error, OSError):
        return not _scheduler_answers(client)
    return False


def lost_scheduler(error: BaseException, target: Any, what: str) -> SchedulerLostError | None:
    """``error`` as the one clear :class:`SchedulerLostError` when the scheduler of
    ``target`` (a cluster target) no longer answers; None otherwise.

    For a step that may fail anywhere when the scheduler goes away (a stage of an
    analysis: placing its release, registering the worker setup, persisting its
    input), whatever the surface error was (a ``KeyError`` from an empty
    ``scheduler_info``, a closed comm).
    """
    client = getattr(target, "client", None)
    if client is None or isinstance(error, SchedulerLostError) or _scheduler_answers(client):
        return None
    return SchedulerLostError(
        f"{what}: the scheduler at {scheduler_address(client)} went away ({type(error).__name__})"
    )


def _scheduler_answers(client: Any) -> bool:
    if getattr(client, "status", None) != "running":
        return False
    try:
        client.scheduler_info(n_workers=0)
    except (OSError, TimeoutError, RuntimeError, asyncio.CancelledError):
        return False
    return True


def task_role(key: Any) -> str:
    """What a key of a fit's graph does, in words."""
    name = key[0] if isinstance(key, tuple) else key
    text = str(name)
    if text.startswith("dppca-read-"):
        block = f" (rows of block {key[1]})" if isinstance(key, tuple) and len(key) > 1 else ""
        return f"the read of the store{block}, task {key!r}"
    if text.startswith("dppca-pairs-"):
        return f"a block-pair task, which reads its blocks and sums their pairs ({text})"
    if text.startswith("dppca-release-"):
        return f"the release on the trusted worker ({text})"
    if text.startswith(("dppca-sum-", "dppca-reader-")):
        return f"a task adding the lanes' sums ({text})"
    return f"task {key!r} (of the input's own graph)"


def killed_worker_error(
    client: Any, error: distributed.KilledWorker, label: str, outcome: str, since: float = 0.0
) -> WorkerDiedError:
    """The one-line error for ``KilledWorker``: which task, why its workers died, what to
    change; ``outcome`` ends it (for example "nothing was released").  Memory restarts
    are those the scheduler recorded from ``since`` (a time.time() value) on.
    """
    task = error.task
    last = getattr(error.last_worker, "address", str(error.last_worker))
    restarts = memory_restarts(client, since)
    if restarts:
        rss = largest_rss_mib(restarts)
        limit = _memory_limit(error.last_worker)
        limit_text = f" of its {limit / 2**20:.0f} MiB limit" if limit else ""
        killed = len({(event.get("worker"), event.get("pid")) for event in restarts})
        return WorkerDiedError(
            f"{label}: {task_role(task)} was killed {killed} time(s) for exceeding "
            f"its worker's memory limit (last on {last}, {rss:.0f} MiB{limit_text}); "
            f"{outcome}. Give the workers more memory (dask worker --memory-limit), fewer "
            "threads per worker, or the store smaller row chunks"
        )
    return WorkerDiedError(
        f"{label}: the workers running {task_role(task)} died "
        f"{error.allowed_failures + 1} time(s) (last {last}), not for their memory limit; "
        f"{outcome}. See that worker's log for why it stopped"
    )


def largest_rss_mib(restarts: list[dict]) -> float:
    """The largest resident memory, in MiB, among :func:`memory_restarts`' records."""
    return max(event.get("rss", 0) for event in restarts) / 2**20


def memory_restarts(client: Any, since: float) -> list[dict]:
    """The scheduler's records of workers restarted over their memory limit since
    ``since`` (a time.time() value); none when the scheduler cannot be asked.
    """
    try:
        events = client.get_events(MEMORY_EVENT)
    except (OSError, TimeoutError, RuntimeError):
        return []
    return [event for when, event in events if isinstance(event, dict) and when >= since]


def _memory_limit(worker: Any) -> int | None:
    limit = getattr(worker, "memory_limit", None)
    return int(limit) if limit else None
