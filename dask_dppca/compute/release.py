"""Running a planned release on a compute target: exact sum -> noise once -> eigenvectors.

This is the one place a :class:`~.ReleaseMechanism` meets the data.

* A local scheduler computes the lanes' sums in this process and releases here.
* On a cluster the lanes' sums stay on the workers (sealed between them); once they are
  all computed, one task that is never retried (``pure=False``, ``retries=0``) adds them
  exactly, rounds once and draws the noise on the trusted worker behind a release
  ticket (:mod:`.tickets`), so the exact total never exists as a Dask key and only the
  release is gathered.  Every wait is bounded (:mod:`.waits`): a cluster that stops
  making progress, a trusted worker that leaves, a worker killed over its memory limit
  or a scheduler that goes away fails the fit with one line (:mod:`.failures`) that
  says whether anything can have been drawn: nothing before the release is submitted.
"""

from __future__ import annotations

import time
from typing import Any

import dask
import distributed

from ..graph import lanes_total
from ..privacy import PrivateRelease, ReleaseMechanism
from .cluster import TRUSTED_RESOURCE
from .failures import (
    SchedulerLostError,
    is_scheduler_loss,
    killed_worker_error,
    scheduler_address,
)
from .placement import choose_placement, describe_placement, placement_unavailable
from .progress import cluster_progress, local_progress
from .site_ledger import charged_where_drawn
from .tickets import (
    claim_release_ticket,
    current_worker,
    mark_release_dispatched,
    mark_release_settled,
    prune_release_tickets,
)
from .waits import ClusterStalledError, await_done, await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["release_here", "release_on_cluster", "release_task"]


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
    if require_trusted:
        raise ValueError(
            f"require_trusted: the local scheduler {scheduler!r} releases in this process, "
            f"which is no {TRUSTED_RESOURCE!r} worker; use a cluster with one (or "
            "require_trusted=False)"
        )
    with local_progress(progress), single_threaded_blas(True):
        lanes = dask.compute(*lane_sums, scheduler=scheduler)
    release = release_task(mechanism, n_components, fit_id, *lanes, dataset=dataset)
    return release, f"this process (local scheduler {scheduler!r})"


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
    placement = choose_placement(client, trusted_worker, require_trusted)
    described = describe_placement(placement)
    prepare_workers(client)

    def trusted_worker_present(workers: dict) -> str | None:
        return placement_unavailable(placement, workers, described)

    def trusted_worker_stayed(workers: dict) -> str | None:  # while the inputs compute
        return placement_unavailable(placement, workers, described, paused=False)

    started = time.time()
    # BLAS limited before the first task can start (in-process workers).
    with single_threaded_blas(in_process):
        lane_futures = client.compute(lane_sums)
        release_future = None
        try:
            with cluster_progress(client, lane_futures, progress):
                # The lanes first, then the release: until it is submitted no noise can be
                # drawn, so a fit that fails before (a lost scheduler, a dead worker, a
                # stall) provably released nothing and its budgets are given back.
                await_done(client, lane_futures, f"release {fit_id}", needed=trusted_worker_stayed)
            mark_release_dispatched(fit_id, _scheduler_id(client))  # before it can draw
            release_future = client.submit(
                release_task,
                mechanism,
                n_components,
                fit_id,
                *lane_futures,
                dataset=dataset,
                key=f"dppca-release-{fit_id}",
                pure=False,
                retries=0,
                **placement,
            )
            # Its own bar: the release is submitted once the lanes are done, so the lanes'
            # bar cannot show it.
            with cluster_progress(client, [release_future], progress):
                release = await_result(
                    client, release_future, f"release {fit_id}", needed=trusted_worker_present
                )
            mark_release_settled(fit_id)
            prune_release_tickets(client)
        except ClusterStalledError as error:
            raise ClusterStalledError(f"{error}; {_outcome(release_future)}") from None
        except distributed.KilledWorker as error:
            raise killed_worker_error(
                client, error, f"release {fit_id}", _outcome(release_future), since=started
            ) from None
        except SchedulerLostError as error:
            raise SchedulerLostError(f"{error}; {_outcome(release_future)}") from None
        except BaseException as error:
            if not is_scheduler_loss(error, client):
                raise
            raise SchedulerLostError(
                f"release {fit_id}: the scheduler at {scheduler_address(client)} went away "
                f"before the fit finished; {_outcome(release_future)}"
            ) from None
        finally:
            if release_future is not None:
                release_future.release()
            for future in lane_futures:
                future.release()
    return release, described


def _outcome(release_future: Any) -> str:
    """What a failed fit released: nothing, or a release that may have drawn."""
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
