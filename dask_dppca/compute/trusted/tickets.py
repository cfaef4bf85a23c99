"""Release tickets: a fit's noise is drawn at most once, and an abandoned release never.

A release claims its ticket (:func:`claim_release_ticket`) just before it draws.  On a
distributed worker the ticket lives in the scheduler's metadata, under a distributed
lock, so it survives the loss of the worker that claimed it: a re-execution (a lost
worker, a recomputed key) refuses to draw a second time instead of releasing twice.
Elsewhere it lives in this process.

A failed fit asks :func:`abandon_release` whether its budget reservations may be
given back: only when the release provably never drew, and then it is marked so that a
release task that starts late refuses to draw.

A long-lived cluster would keep one ticket per fit for ever: a client prunes the
tickets of its settled releases (all but the last few, :func:`prune_release_tickets`)
and any ticket older than an hour, each time it submits a release.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import distributed

from ...privacy.budget.charging import release_dispatched

__all__ = [
    "ABANDONED_METADATA_KEY",
    "RELEASE_METADATA_KEY",
    "ReleaseAlreadyDrawnError",
    "abandon_release",
    "claim_release_ticket",
    "current_worker",
    "mark_release_dispatched",
    "mark_release_settled",
    "prune_release_tickets",
]

#: Scheduler metadata prefix under which release tickets are recorded, one per fit id.
RELEASE_METADATA_KEY = ("dask-dppca", "releases")
#: Scheduler metadata prefix of the releases a failed fit abandoned before they drew.
ABANDONED_METADATA_KEY = ("dask-dppca", "abandoned")
#: Seconds :func:`abandon_release` waits for the ticket's lock before proving nothing.
ABANDON_TIMEOUT = 10.0

_local_tickets: set[str] = set()
_local_tickets_lock = threading.Lock()
# Fit ids whose release was dispatched from this process: called here, or submitted as a
# task.  For the budget: see abandon_release.
_dispatched: set[str] = set()
# The scheduler (its id) each cluster release was submitted to: a scheduler that went
# away took its tickets with it, and a restarted one proves nothing about them.
_dispatched_to: dict[str, str] = {}


#: Tickets of this process's most recent settled releases left in the scheduler's
#: metadata (a client may read where its release ran); older ones are pruned.
KEPT_SETTLED_TICKETS = 16
#: Seconds after which any release ticket is pruned (another process's too): far beyond
#: the moments in which a drawn release's task can run again (its worker died before
#: the result reached the client, which waits for it at most the stall timeout).
TICKET_RETENTION = 3600.0
# This process's settled releases whose tickets are not pruned yet, oldest first.
_settled: collections.deque[str] = collections.deque()


class ReleaseAlreadyDrawnError(RuntimeError):
    """The release of this fit already ran once; noise is never drawn twice."""


def mark_release_dispatched(fit_id: str, scheduler_id: str | None = None) -> None:
    """Record, before it can draw, that the release of ``fit_id`` is called or submitted
    here (to the scheduler ``scheduler_id``, on a cluster).

    First in every ledger charged for it
    (:func:`~dask_dppca.privacy.budget.charging.release_dispatched`:
    a ledger row whose release was never dispatched proves that nothing was drawn);
    a ledger that refuses (its row was resolved meanwhile) stops the release here.
    """
    release_dispatched(fit_id)
    _dispatched.add(fit_id)
    if scheduler_id is not None:
        _dispatched_to[fit_id] = scheduler_id


def mark_release_settled(fit_id: str) -> None:
    """Record that the release of ``fit_id`` returned to this client (its task can no
    longer run: its key was released), so that its ticket may be pruned later.
    """
    # It stays among the dispatched ones (so abandon_release never takes a drawn release
    # for one that never drew: a fit stopped after this point, say by SIGTERM while it
    # prunes the tickets, keeps its reservation) until its ticket is pruned.
    _settled.append(fit_id)


def prune_release_tickets(client: distributed.Client) -> int:
    """Remove from the scheduler's metadata the tickets of this process's settled
    releases but the last ``KEPT_SETTLED_TICKETS``, and every ticket older than
    ``TICKET_RETENTION`` seconds; returns how many.  Never fails a fit: a scheduler
    that refuses (an old one) keeps its tickets.
    """
    prunable = [_settled.popleft() for _ in range(max(0, len(_settled) - KEPT_SETTLED_TICKETS))]
    older_than = time.time() - TICKET_RETENTION
    prefix = list(RELEASE_METADATA_KEY)

    # Defined here, so that it travels by value: the scheduler needs no dask-dppca.
    def prune(dask_scheduler: Any, fit_ids: list[str], older_than: float) -> int:
        tickets = dask_scheduler.get_metadata(prefix, default=None)
        if not isinstance(tickets, dict):
            return 0
        old = [
            fit_id
            for fit_id, ticket in tickets.items()
            if fit_id in fit_ids
            or (isinstance(ticket, dict) and ticket.get("time", older_than) < older_than)
        ]
        for fit_id in old:
            del tickets[fit_id]
        return len(old)

    try:
        pruned = int(client.run_on_scheduler(prune, fit_ids=prunable, older_than=older_than))
    except Exception:  # pruning is housekeeping; the tickets stay
        _settled.extendleft(reversed(prunable))
        return 0
    for fit_id in prunable:  # long settled: their fits committed
        _dispatched.discard(fit_id)
        _dispatched_to.pop(fit_id, None)
    return pruned


def abandon_release(fit_id: str, client: distributed.Client | None) -> bool:
    """For a failed fit: make sure its release can never draw; True if it never did.

    A release never called or submitted from this process (:func:`mark_release_dispatched`)
    cannot have drawn.  Without a cluster (``client`` None: a local scheduler) one that
    was called drew or was about to, in this thread.  On a cluster a submitted release
    may not have started: if its ticket is free, the release is marked abandoned (under
    the lock :func:`claim_release_ticket` takes, which refuses an abandoned release), so
    a release task that starts late refuses to draw; a ticket already taken means it
    drew.  A scheduler that cannot be reached, or another one than the release was
    submitted to (restarted: the tickets were in the old one's memory), proves nothing
    (False).
    """
    if fit_id not in _dispatched:
        return True
    if client is None:
        return False
    lock = distributed.Lock(
        f"dask-dppca-release-{fit_id}", scheduler_rpc=client.scheduler, loop=client.loop
    )
    try:
        submitted_to = _dispatched_to.get(fit_id)
        if submitted_to is not None and submitted_to != str(
            client.scheduler_info(n_workers=0).get("id")
        ):
            return False  # a restarted scheduler: the ticket, if any, went with the old one
        if not lock.acquire(timeout=ABANDON_TIMEOUT):
            return False
        try:
            if client.get_metadata([*RELEASE_METADATA_KEY, fit_id], default=None) is not None:
                return False
            client.set_metadata([*ABANDONED_METADATA_KEY, fit_id], {"time": time.time()})
            return True
        finally:
            lock.release()
    except (OSError, TimeoutError, RuntimeError):
        return False


def claim_release_ticket(fit_id: str) -> Any:
    """Record that the release of ``fit_id`` is drawing its noise; refuse a second time.

    Returns the worker it runs on (None outside one).

    Raises
    ------
    ReleaseAlreadyDrawnError
        If the release already drew, or its failed fit abandoned it.
    """
    mark_release_dispatched(fit_id)
    worker = current_worker()
    if worker is None:
        with _local_tickets_lock:
            if fit_id in _local_tickets:
                raise ReleaseAlreadyDrawnError(f"release {fit_id} already drew its noise")
            _local_tickets.add(fit_id)
        return None
    client = distributed.get_client()
    key = [*RELEASE_METADATA_KEY, fit_id]
    with distributed.Lock(f"dask-dppca-release-{fit_id}"):
        if client.get_metadata([*ABANDONED_METADATA_KEY, fit_id], default=None) is not None:
            raise ReleaseAlreadyDrawnError(
                f"release {fit_id} was abandoned by its failed fit; refusing to draw"
            )
        ticket = client.get_metadata(key, default=None)
        if ticket is not None:
            raise ReleaseAlreadyDrawnError(
                f"release {fit_id} already drew its noise (on {ticket['worker']}); "
                "refusing to draw again"
            )
        client.set_metadata(key, {"worker": worker.address, "time": time.time()})
    return worker


def current_worker() -> Any:
    """The distributed worker running the caller, or None."""
    try:
        return distributed.get_worker()
    except ValueError:
        return None
