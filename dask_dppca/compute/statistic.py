"""Releasing one noisy statistic where K_hat is released: on the trusted worker.

:func:`release_statistic` is the generic step of every statistic of an analysis beyond
the directions (scree quantiles and means, score-map counts and histograms), the twin of
:mod:`.release`: the exact statistic's partial totals are computed on the workers; once
they all are, one task that is never retried (``pure=False``, ``retries=0``) adds them
exactly and runs the mechanism's ``release`` on the total on the trusted worker (placement
as for the directions), so the exact total never exists as a Dask key and only the noisy
result is gathered.  The task claims a release ticket (:mod:`.tickets`) before it draws,
so a re-execution (its worker lost after drawing) refuses to draw a second time.  A local
scheduler computes and releases in this process (and refuses ``require_trusted``).  Every
wait is bounded (:mod:`.waits`).  Budgets are the caller's: an analysis reserves all its
parts before anything is read and keeps them charged if any stage fails (conservative).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import dask
import distributed

from ..graph.scree_task import merge_partials
from ..privacy.charging import release_dispatched
from .failures import (
    SchedulerLostError,
    is_scheduler_loss,
    killed_worker_error,
    scheduler_address,
)
from .placement import choose_placement, describe_placement, placement_unavailable
from .progress import cluster_progress, local_progress
from .release import _outcome, _scheduler_id
from .site_ledger import charged_where_drawn
from .target import ClusterTarget, ComputeTarget, LocalScheduler
from .tickets import (
    claim_release_ticket,
    current_worker,
    mark_release_dispatched,
    mark_release_settled,
    prune_release_tickets,
)
from .waits import ClusterStalledError, await_done, await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["release_statistic"]

T = TypeVar("T")


def _unsealed(exact: Any) -> Any:
    """A single exact statistic as its mechanism reads it (sealed counts: their array)."""
    return getattr(exact, "counts", exact)


def _release_task(
    release: Callable[[Any], Any],
    release_id: str,
    combine: Callable[..., Any],
    *partials: Any,
    charge: Any = None,
    label: str = "",
    dataset: str = "",
) -> Any:
    """On the trusted worker: the exact total of the partials (which stays here), the
    ledger configured here charged with ``charge`` (:mod:`.site_ledger`: before the draw,
    or the release refused), then the noisy release, drawn at most once (the ticket).
    """
    here = getattr(current_worker(), "address", None)
    with charged_where_drawn(charge, release_id, dataset, here, what=label) as drawing:
        claim_release_ticket(release_id)
        drawing[0] = True
        return release(combine(*partials))


def release_statistic(
    target: ComputeTarget,
    release: Callable[[Any], T],
    statistic: Any,
    label: str,
    *,
    charge: Any,
    dataset: str = "",
    trusted_worker: str | None = None,
    require_trusted: bool = False,
    progress: bool = False,
    stage_id: str = "",
) -> tuple[T, str]:
    """``release(exact value of statistic)``, run once where the directions are released.

    Parameters
    ----------
    target : ComputeTarget
    release : callable
        Picklable, e.g. ``functools.partial(mechanism.release, sampler=sampler)``: the one
        step that sees the exact statistic and draws the noise.
    statistic : Delayed or list of Delayed
        The lazy exact statistic (an ``ExactCounts`` or an array), or its partial totals
        (int64 arrays or ExactSums), added exactly in the release task.
    label : str
        Names the step in errors and logs.
    charge : mechanism with ``.parts``, or a charge
        What this one release costs: the ledger configured where it is drawn
        (:mod:`.site_ledger`) is charged with it before the draw.  Each statistic is its
        own row there (a site ledger that is also the client's file charges it twice:
        conservative).
    dataset : str
        For that ledger's row.
    trusted_worker, require_trusted, progress
        As for ``DPPCA``.
    stage_id : str, optional
        The analysis stage this release belongs to: its ledger rows are marked
        dispatched (:func:`~dask_dppca.privacy.charging.release_dispatched`) before
        anything can draw (a stage's first release dispatches it; later ones find it so).

    Returns
    -------
    (result, where)
        The noisy result and where it was drawn, in words.
    """
    partials: list[Any]
    if isinstance(statistic, Sequence):
        partials, combine = list(statistic), merge_partials
    else:
        partials, combine = [statistic], _unsealed
    release_id = f"statistic-{uuid.uuid4().hex}"
    if isinstance(target, LocalScheduler):
        if require_trusted:
            raise ValueError(
                f"require_trusted: the local scheduler {target.name!r} releases in this "
                "process, which is no trusted worker; use a cluster with one (or "
                "require_trusted=False)"
            )
        with local_progress(progress), single_threaded_blas(True):
            values = dask.compute(*partials, scheduler=target.name)
        release_dispatched(stage_id)  # before it can draw
        result = _release_task(
            release, release_id, combine, *values, charge=charge, label=label, dataset=dataset
        )
        mark_release_settled(release_id)
        return result, f"this process (local scheduler {target.name!r})"
    if not isinstance(target, ClusterTarget):
        raise ValueError(f"target: expected a ComputeTarget, got {target!r}")
    client = target.client
    placement = choose_placement(client, trusted_worker, require_trusted)
    described = describe_placement(placement)
    prepare_workers(client)

    def trusted_worker_present(workers: dict) -> str | None:
        return placement_unavailable(placement, workers, described)

    def trusted_worker_stayed(workers: dict) -> str | None:  # while the inputs compute
        return placement_unavailable(placement, workers, described, paused=False)

    started = time.time()
    with single_threaded_blas(target.in_process):
        futures = client.compute(partials)
        release_future = None
        try:
            with cluster_progress(client, futures, progress):
                await_done(client, futures, label, needed=trusted_worker_stayed)
            release_dispatched(stage_id)  # before it can draw
            mark_release_dispatched(release_id, _scheduler_id(client))
            release_future = client.submit(
                _release_task,
                release,
                release_id,
                combine,
                *futures,
                charge=charge,
                label=label,
                dataset=dataset,
                key=f"dppca-{release_id}",
                pure=False,
                retries=0,
                **placement,
            )
            result = await_result(client, release_future, label, needed=trusted_worker_present)
            mark_release_settled(release_id)
            prune_release_tickets(client)
        except distributed.KilledWorker as error:
            raise killed_worker_error(
                client, error, label, _outcome(release_future), since=started
            ) from None
        except (ClusterStalledError, SchedulerLostError) as error:
            raise type(error)(f"{error}; {_outcome(release_future)}") from None
        except BaseException as error:
            if not is_scheduler_loss(error, client):
                raise
            raise SchedulerLostError(
                f"{label}: the scheduler at {scheduler_address(client)} went away before the "
                f"release finished; {_outcome(release_future)}"
            ) from None
        finally:
            if release_future is not None:
                release_future.release()
            for future in futures:
                future.release()
    return result, described
