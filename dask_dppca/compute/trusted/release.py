"""Running a release on a compute target: exact total -> noise once -> the noisy result.

This is the one place a mechanism meets the data.  Two kinds of release take the same
path (``release_locally``, ``release_on_workers``):

* the directions (:func:`release_here`, :func:`release_on_cluster`): a
  :class:`~.ReleaseMechanism` on the lanes' exact sums (noise once, then eigenvectors);
* any other noisy statistic of an analysis (:func:`release_statistic`: scree quantiles
  and means, score-map counts and histograms), released where the directions are.

* A local scheduler computes the partial totals in this process and releases here (and
  refuses ``require_trusted``).
* On a cluster the partial totals stay on the workers (sealed between them); once they
  are all computed, one task that is never retried (``pure=False``, ``retries=0``) adds
  them exactly and draws the noise on the trusted worker behind a release ticket
  (:mod:`.tickets`), so the exact total never exists as a Dask key and only the release
  is gathered; a re-execution (its worker lost after drawing) refuses to draw a second
  time.  Every wait is bounded (:mod:`.waits`): a cluster that stops making progress, a
  trusted worker that leaves, a worker killed over its memory limit or a scheduler that
  goes away fails with one line (:mod:`.failures`) that says whether anything can have
  been drawn: nothing before the release is submitted.

Budgets are the caller's: a fit reserves its own; an analysis reserves all its parts
before anything is read and keeps them charged if any stage fails (conservative).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import dask
import distributed

from ...graph import lanes_total
from ...graph.scree_task import merge_partials
from ...privacy import PrivateRelease, ReleaseMechanism
from ...privacy.budget.charging import release_dispatched
from ..cluster import TRUSTED_RESOURCE
from ..failures import (
    SchedulerLostError,
    is_scheduler_loss,
    killed_worker_error,
    scheduler_address,
)
from ..progress import cluster_progress, local_progress
from ..waits import ClusterStalledError, await_done, await_result
from ..workers import prepare_workers, single_threaded_blas
from .placement import choose_placement, describe_placement, placement_unavailable
from .site_ledger import charged_where_drawn
from .tickets import (
    claim_release_ticket,
    current_worker,
    mark_release_dispatched,
    mark_release_settled,
    prune_release_tickets,
)

__all__ = [
    "Draw",
    "DrawRunner",
    "release_here",
    "release_locally",
    "release_on_cluster",
    "release_on_workers",
    "release_statistic",
    "release_task",
    "statistic_task",
]

T = TypeVar("T")


def release_task(
    mechanism: ReleaseMechanism, n_components: int, fit_id: str, *lane_sums: Any, dataset: str = ""
) -> PrivateRelease:
    """The release, where it runs: the lanes' exact total, the ledger configured here
    (:mod:`.site_ledger`: charged before the draw, or the release refused), the ticket,
    the noise, eigh.
    """
    kernel_sum = lanes_total(*lane_sums)
    here = current_worker()
    with charged_where_drawn(mechanism, fit_id, dataset, getattr(here, "address", None)) as drawing:
        worker = claim_release_ticket(fit_id)
        released_on = worker.address if worker is not None else "this process"
        drawing[0] = True
        return mechanism.release(kernel_sum, n_components=n_components, released_on=released_on)


def statistic_task(
    release: Callable[[Any], Any],
    release_id: str,
    combine: Callable[..., Any],
    *partials: Any,
    charge: Any = None,
    label: str = "",
    dataset: str = "",
) -> Any:
    """A statistic's release, where it runs: the exact total of the partials (which stays
    here), the ledger configured here charged with ``charge`` (:mod:`.site_ledger`: before
    the draw, or the release refused), then the noisy release, drawn at most once (the
    ticket).
    """
    here = getattr(current_worker(), "address", None)
    with charged_where_drawn(charge, release_id, dataset, here, what=label) as drawing:
        claim_release_ticket(release_id)
        drawing[0] = True
        return release(combine(*partials))


def _unsealed(exact: Any) -> Any:
    """A single exact statistic as its mechanism reads it (sealed counts: their array)."""
    return getattr(exact, "counts", exact)


@dataclass(frozen=True)
class Draw:
    """One release as the shared steps run it: ``task(*args, *partials, **kwargs)``
    draws the noise once, under the release ticket ``ticket``; the rest names it.
    """

    task: Callable[..., Any]
    args: tuple
    kwargs: dict = field(default_factory=dict)
    ticket: str = ""
    label: str = ""  # in waits and errors
    key: str = ""  # its Dask key on a cluster
    finished: str = "the release"  # what a lost scheduler kept from finishing
    trusted: str = "trusted"  # what the local refusal says it is not ("no ... worker")
    stage_id: str | None = None  # an analysis stage marked dispatched before it can draw
    bar: bool = False  # a progress bar of its own on a cluster


class DrawRunner(Protocol):
    """A compute target as a statistic's release sees it (:class:`~.target.ComputeTarget`
    implements it; target.py imports this module, not the other way round).
    """

    def release_draw(self, draw: Draw, partials: list[Any]) -> tuple[Any, str]:
        """Compute ``partials`` and run ``draw`` once on their total, where the target's
        release options say; the result and where.
        """
        ...


def _directions(mechanism: ReleaseMechanism, n_components: int, fit_id: str, dataset: str) -> Draw:
    """The directions' release of the fit ``fit_id`` (:func:`release_task`)."""
    return Draw(
        release_task,
        (mechanism, n_components, fit_id),
        {"dataset": dataset},
        ticket=fit_id,
        label=f"release {fit_id}",
        key=f"dppca-release-{fit_id}",
        finished="the fit",
        trusted=repr(TRUSTED_RESOURCE),
        bar=True,
    )


def release_here(
    scheduler: str,
    mechanism: ReleaseMechanism,
    lane_sums: list,
    n_components: int,
    fit_id: str,
    *,
    require_trusted: bool,
    progress: bool,
    dataset: str = "",
) -> tuple[PrivateRelease, str]:
    """The release on a local scheduler: the sums computed and released in this process."""
    draw = _directions(mechanism, n_components, fit_id, dataset)
    return release_locally(
        scheduler, draw, lane_sums, require_trusted=require_trusted, progress=progress
    )


def release_on_cluster(
    client: distributed.Client,
    in_process: bool,
    mechanism: ReleaseMechanism,
    lane_sums: list,
    n_components: int,
    fit_id: str,
    *,
    trusted_worker: str | None,
    require_trusted: bool,
    progress: bool,
    dataset: str = "",
) -> tuple[PrivateRelease, str]:
    """The release on a cluster: one non-retried task on the trusted worker; only it is gathered."""
    return release_on_workers(
        client,
        in_process,
        _directions(mechanism, n_components, fit_id, dataset),
        lane_sums,
        trusted_worker=trusted_worker,
        require_trusted=require_trusted,
        progress=progress,
    )


def release_statistic(
    target: DrawRunner,
    release: Callable[[Any], T],
    statistic: Any,
    label: str,
    *,
    charge: Any,
    dataset: str = "",
    stage_id: str = "",
) -> tuple[T, str]:
    """``release(exact value of statistic)``, run once where the directions are released.

    Parameters
    ----------
    target : ComputeTarget
        Where it runs, and where it releases (its :class:`~.placement.ReleaseOptions`).
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
    stage_id : str, optional
        The analysis stage this release belongs to: its ledger rows are marked
        dispatched (:func:`~dask_dppca.privacy.budget.charging.release_dispatched`) before
        anything can draw (a stage's first release dispatches it; later ones find it so).

    Returns
    -------
    (result, where)
        The noisy result and where it was drawn, in words.
    """
    multiple = isinstance(statistic, Sequence)
    partials = list(statistic) if multiple else [statistic]
    release_id = f"statistic-{uuid.uuid4().hex}"
    draw = Draw(
        statistic_task,
        (release, release_id, merge_partials if multiple else _unsealed),
        {"charge": charge, "label": label, "dataset": dataset},
        ticket=release_id,
        label=label,
        key=f"dppca-{release_id}",
        stage_id=stage_id,
    )
    return target.release_draw(draw, partials)


def release_locally(
    scheduler: str, draw: Draw, partials: list, *, require_trusted: bool, progress: bool
) -> tuple[Any, str]:
    """The release on a local scheduler: the partials computed and released in this process."""
    if require_trusted:
        raise ValueError(
            f"require_trusted: the local scheduler {scheduler!r} releases in this process, "
            f"which is no {draw.trusted} worker; use a cluster with one (or "
            "require_trusted=False)"
        )
    with local_progress(progress), single_threaded_blas(True):
        values = dask.compute(*partials, scheduler=scheduler)
    if draw.stage_id is not None:
        release_dispatched(draw.stage_id)  # before it can draw
    result = draw.task(*draw.args, *values, **draw.kwargs)
    mark_release_settled(draw.ticket)
    return result, f"this process (local scheduler {scheduler!r})"


def release_on_workers(
    client: distributed.Client,
    in_process: bool,
    draw: Draw,
    partials: list,
    *,
    trusted_worker: str | None,
    require_trusted: bool,
    progress: bool,
) -> tuple[Any, str]:
    """The release on a cluster: one non-retried task on the trusted worker; only it is gathered."""
    placement = choose_placement(client, trusted_worker, require_trusted)
    described = describe_placement(placement)
    prepare_workers(client)
    started = time.time()
    # BLAS limited before the first task can start (in-process workers).
    with single_threaded_blas(in_process):
        futures = client.compute(partials)
        submitted: list = []  # the release's future, once it is submitted
        try:
            result = _submit_once_computed(
                client, draw, futures, submitted, placement, described, progress
            )
        except BaseException as error:
            failure = _failure(client, draw, error, submitted, started)
            if failure is None:
                raise
            raise failure from None
        finally:
            for future in [*submitted, *futures]:
                future.release()
    return result, described


def _submit_once_computed(
    client: distributed.Client,
    draw: Draw,
    futures: list,
    submitted: list,
    placement: dict,
    described: str,
    progress: bool,
) -> Any:
    """Wait for the partials, then submit the release (into ``submitted``); its result."""

    def trusted_worker_present(workers: dict) -> str | None:
        return placement_unavailable(placement, workers, described)

    def trusted_worker_stayed(workers: dict) -> str | None:  # while the inputs compute
        return placement_unavailable(placement, workers, described, paused=False)

    with cluster_progress(client, futures, progress):
        # The partials first, then the release: until it is submitted no noise can be
        # drawn, so a release that fails before (a lost scheduler, a dead worker, a
        # stall) provably released nothing and its budgets are given back.
        await_done(client, futures, draw.label, needed=trusted_worker_stayed)
    if draw.stage_id is not None:
        release_dispatched(draw.stage_id)  # before it can draw
    mark_release_dispatched(draw.ticket, _scheduler_id(client))  # before it can draw
    submitted.append(
        client.submit(
            draw.task,
            *draw.args,
            *futures,
            **draw.kwargs,
            key=draw.key,
            pure=False,
            retries=0,
            **placement,
        )
    )
    # Its own bar: the release is submitted once the partials are done, so their bar
    # cannot show it.
    with cluster_progress(client, submitted, progress and draw.bar):
        result = await_result(client, submitted[0], draw.label, needed=trusted_worker_present)
    mark_release_settled(draw.ticket)
    prune_release_tickets(client)
    return result


def _failure(
    client: distributed.Client, draw: Draw, error: BaseException, submitted: list, started: float
) -> BaseException | None:
    """The one-line error a failed release raises, saying what it may have drawn; None
    for an error that is not the cluster's (raised as it is).
    """
    outcome = _outcome(submitted[0] if submitted else None)
    if isinstance(error, distributed.KilledWorker):
        return killed_worker_error(client, error, draw.label, outcome, since=started)
    if isinstance(error, (ClusterStalledError, SchedulerLostError)):
        return type(error)(f"{error}; {outcome}")
    if not is_scheduler_loss(error, client):
        return None
    return SchedulerLostError(
        f"{draw.label}: the scheduler at {scheduler_address(client)} went away before "
        f"{draw.finished} finished; {outcome}"
    )


def _outcome(release_future: Any) -> str:
    """What a failed release released: nothing, or a release that may have drawn."""
    if release_future is None:
        return "nothing was released and no noise was drawn"
    return (
        "nothing was released to this client, but the release was submitted and may have "
        "drawn its noise, so it stays charged to every active budget unless its ticket "
        "proves it never drew"
    )


def _scheduler_id(client: distributed.Client) -> str | None:
    """The scheduler's id (a restarted scheduler has another): see abandon_release."""
    try:
        return str(client.scheduler_info(n_workers=0)["id"])
    except (OSError, TimeoutError, KeyError, RuntimeError):
        return None
