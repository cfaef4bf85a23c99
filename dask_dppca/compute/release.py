"""Running a planned release on a compute target: exact sum -> noise once -> eigenvectors.

This is the one place a :class:`~.ReleaseMechanism` meets the data.

* A local scheduler computes the lanes' sums in this process and releases here.
* On a cluster the lanes' sums stay on the workers (sealed between them); one task that
  is never retried (``pure=False``, ``retries=0``) adds them exactly, rounds once and
  draws the noise on the trusted worker behind a release ticket (:mod:`.tickets`), so
  the exact total never exists as a Dask key and only the release is gathered.  Every
  wait is bounded (:func:`~dask_dppca.compute.waits.await_result`): a cluster that stops
  making progress, or a trusted worker that leaves, fails the fit with a clear error
  and nothing is released.
"""

from __future__ import annotations

from typing import Any

import dask
import distributed

from ..graph import lanes_total
from ..privacy import PrivateRelease, ReleaseMechanism
from .cluster import TRUSTED_RESOURCE
from .placement import choose_placement, describe_placement, placement_available
from .progress import cluster_progress, local_progress
from .tickets import claim_release_ticket, mark_release_dispatched
from .waits import ClusterStalledError, await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["release_here", "release_on_cluster", "release_task"]


def release_task(
    mechanism: ReleaseMechanism, n_components: int, fit_id: str, *lane_sums: Any
) -> PrivateRelease:
    """The release, where it runs: the lanes' exact total, the ticket, the noise, eigh."""
    kernel_sum = lanes_total(*lane_sums)
    worker = claim_release_ticket(fit_id)
    released_on = worker.address if worker is not None else "this process"
    return mechanism.release(kernel_sum, n_components, released_on=released_on)


def release_here(
    scheduler: str,
    mechanism: ReleaseMechanism,
    lane_sums: list,
    n_components: int,
    fit_id: str,
    *,
    require_trusted: bool,
    progress: bool,
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
    release = release_task(mechanism, n_components, fit_id, *lanes)
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
) -> tuple[PrivateRelease, str]:
    """The release on a cluster: one non-retried task on the trusted worker; only it is gathered."""
    placement = choose_placement(client, trusted_worker, require_trusted)
    described = describe_placement(placement)
    prepare_workers(client)

    def trusted_worker_present(workers: dict) -> str | None:
        if placement_available(placement, workers):
            return None
        return f"the trusted worker ({described}) left the cluster and did not come back"

    # BLAS limited before the first task can start (in-process workers).
    with single_threaded_blas(in_process):
        lane_futures = client.compute(lane_sums)
        mark_release_dispatched(fit_id)  # before it can draw (abandon_release)
        release_future = client.submit(
            release_task,
            mechanism,
            n_components,
            fit_id,
            *lane_futures,
            key=f"dppca-release-{fit_id}",
            pure=False,
            retries=0,
            **placement,
        )
        try:
            with cluster_progress(client, [*lane_futures, release_future], progress):
                release = await_result(
                    client, release_future, f"release {fit_id}", needed=trusted_worker_present
                )
        except ClusterStalledError as error:
            raise ClusterStalledError(f"{error}; nothing was released") from None
        except distributed.KilledWorker as error:
            raise RuntimeError(
                f"release {fit_id}: the trusted worker died while releasing ({error}); "
                "nothing was released to this client"
            ) from None
        finally:
            release_future.release()
            for future in lane_futures:
                future.release()
    return release, described
