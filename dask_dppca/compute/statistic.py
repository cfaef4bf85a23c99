"""Releasing one noisy statistic where K_hat is released: on the trusted worker.

:func:`release_statistic` is the generic step of every statistic of an analysis beyond
the directions (quantile counts, histograms): the exact statistic is computed on the
workers as one Dask value (an :class:`~dask_dppca.graph.score_stats.ExactCounts`, sealed
between worker processes), then one task that is never retried (``pure=False``,
``retries=0``) runs the mechanism's ``release`` on it on the trusted worker, and only its
noisy result is gathered.  The task claims a release ticket (:mod:`.tickets`) before it
draws, so a re-execution (its worker lost after drawing) refuses to draw a second time.
A local scheduler computes and releases in this process (and refuses ``require_trusted``),
as :mod:`.release` does for the directions.  Every wait is bounded (:mod:`.waits`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import dask
import distributed

from .failures import SchedulerLostError
from .placement import choose_placement, describe_placement, placement_available
from .progress import cluster_progress, local_progress
from .release import _scheduler_id
from .target import ClusterTarget, ComputeTarget, LocalScheduler
from .tickets import (
    claim_release_ticket,
    mark_release_dispatched,
    mark_release_settled,
    prune_release_tickets,
)
from .waits import ClusterStalledError, await_done, await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["release_statistic"]

T = TypeVar("T")


def _release_task(release: Callable[[Any], Any], release_id: str, exact: Any) -> Any:
    """On the trusted worker: the noisy statistic of the exact one (which stays here),
    drawn at most once (the ticket).
    """
    claim_release_ticket(release_id)
    counts = getattr(exact, "counts", exact)
    return release(counts)


def release_statistic(
    target: ComputeTarget,
    statistic: Any,
    release: Callable[[Any], T],
    label: str,
    *,
    trusted_worker: str | None = None,
    require_trusted: bool = False,
    progress: bool = False,
) -> tuple[T, str]:
    """``release(exact value of statistic)``, run once where the directions are released.

    Parameters
    ----------
    target : ComputeTarget
    statistic : dask.delayed.Delayed
        Lazy exact statistic (an ``ExactCounts`` or an array).
    release : callable
        Picklable, e.g. ``functools.partial(mechanism.release, sampler=sampler)``: the one
        step that sees the exact statistic and draws the noise.
    label : str
        Names the step in errors and logs.
    trusted_worker, require_trusted, progress
        As for ``DPPCA``.

    Returns
    -------
    (result, where)
        The noisy result and where it was drawn, in words.
    """
    release_id = f"statistic-{uuid.uuid4().hex}"
    if isinstance(target, LocalScheduler):
        if require_trusted:
            raise ValueError(
                f"require_trusted: the local scheduler {target.name!r} releases in this "
                "process, which is no trusted worker"
            )
        with local_progress(progress), single_threaded_blas(True):
            (exact,) = dask.compute(statistic, scheduler=target.name)
        result = _release_task(release, release_id, exact)
        mark_release_settled(release_id)
        return result, f"this process (local scheduler {target.name!r})"
    if not isinstance(target, ClusterTarget):
        raise ValueError(f"target: expected a ComputeTarget, got {target!r}")
    client = target.client
    placement = choose_placement(client, trusted_worker, require_trusted)
    described = describe_placement(placement)
    prepare_workers(client)

    def trusted_worker_present(workers: dict) -> str | None:
        if placement_available(placement, workers):
            return None
        return f"the trusted worker ({described}) left the cluster"

    with single_threaded_blas(target.in_process):
        exact_future = client.compute(statistic)
        release_future = None
        try:
            with cluster_progress(client, [exact_future], progress):
                await_done(client, [exact_future], label, needed=trusted_worker_present)
            mark_release_dispatched(release_id, _scheduler_id(client))  # before it can draw
            release_future = client.submit(
                _release_task,
                release,
                release_id,
                exact_future,
                key=f"dppca-{release_id}",
                pure=False,
                retries=0,
                **placement,
            )
            result = await_result(client, release_future, label, needed=trusted_worker_present)
            mark_release_settled(release_id)
            prune_release_tickets(client)
        except distributed.KilledWorker as error:
            raise RuntimeError(
                f"{label}: a worker died ({error}); {_outcome(release_future)}"
            ) from None
        except (ClusterStalledError, SchedulerLostError) as error:
            raise type(error)(f"{error}; {_outcome(release_future)}") from None
        finally:
            if release_future is not None:
                release_future.release()
            exact_future.release()
    return result, described


def _outcome(release_future: Any) -> str:
    """What a failed release may have drawn."""
    if release_future is None:
        return "nothing was released and no noise was drawn"
    return "the release was submitted and may have drawn its noise (it stays charged)"
