"""Running a planned release on a compute target: exact sum -> noise once -> eigenvectors.

:func:`run_release` is the one place a :class:`~dask_dppca.privacy.mechanism.ReleaseMechanism`
meets the data.  On a local scheduler the exact sum is computed in this process and
released here.  On a distributed cluster the exact sum stays on the workers (sealed,
:class:`~dask_dppca.privacy.release.TrustedSum`); one task that is never retried
(``pure=False``, ``retries=0``) adds the noise on the trusted worker behind a release
ticket, and only its result is gathered.  Every wait is bounded
(:func:`dask_dppca.cluster.await_result`): a cluster that stops making progress, or a
trusted worker that leaves, fails the fit with a clear error and nothing is released.
"""

from __future__ import annotations

import warnings
from typing import Any

import dask
import distributed

from .. import cluster
from ..graph import compute_locally, single_threaded_blas
from ..progress import cluster_progress
from .mechanism import ReleaseMechanism
from .release import (
    TRUSTED_RESOURCE,
    PrivateRelease,
    TrustedSum,
    mark_release_dispatched,
    placement_available,
    private_release,
    register_sealing,
    release_placement,
)

__all__ = ["run_release", "UntrustedReleaseWarning"]


class UntrustedReleaseWarning(UserWarning):
    """No worker offers the ``dppca-trusted`` resource: the release may run on any worker."""


def run_release(
    mechanism: ReleaseMechanism,
    graph: Any,
    target: Any,
    n_components: int,
    fit_id: str,
    *,
    trusted_worker: str | None = None,
    require_trusted: bool = False,
    progress: bool = False,
) -> tuple[PrivateRelease, str]:
    """Compute the exact pair sum of ``graph`` and release it through ``mechanism``, once.

    Parameters
    ----------
    mechanism : ReleaseMechanism
        The calibrated release (public inputs only).
    graph : dask.delayed.Delayed
        The exact pair sum (:func:`dask_dppca.graph.kernel_sum_graph`).
    target : str or distributed.Client
        A local scheduler name or a client (:func:`dask_dppca.cluster.compute_target`).
    n_components : int
        Leading eigenvectors to return.
    fit_id : str
        Public random identifier of the fit (the release ticket).
    trusted_worker : str, optional
        Worker to release on when none offers ``dppca-trusted``.
    require_trusted : bool
        Refuse to release when neither a ``dppca-trusted`` worker nor ``trusted_worker``
        exists, instead of warning and releasing on any worker.
    progress : bool
        Show a progress bar (a widget in Jupyter).

    Returns
    -------
    (PrivateRelease, str)
        The release and where it was placed (for ``privacy_``).
    """
    if isinstance(target, str):
        if require_trusted:
            raise ValueError(
                f"require_trusted: the local scheduler {target!r} releases in this process, "
                f"which is no {TRUSTED_RESOURCE!r} worker; use a cluster with one (or "
                "require_trusted=False)"
            )
        kernel_sum = compute_locally(graph, target, progress)
        release = private_release(kernel_sum, mechanism.plan.n_pairs, mechanism.sigma,
                                  n_components, mechanism.sampler, fit_id)
        return release, f"this process (local scheduler {target!r})"
    return _run_on_cluster(mechanism, graph, target, n_components, fit_id,
                           trusted_worker, require_trusted, progress)


def _run_on_cluster(mechanism, graph, client, n_components, fit_id, trusted_worker,
                    require_trusted, progress):
    """Exact sum stays on the cluster; one non-retried task releases; only it is gathered."""
    placement = release_placement(client, trusted_worker)
    described = _describe_placement(placement)
    if not placement:
        if require_trusted:
            raise ValueError(
                f"require_trusted: no worker offers the {TRUSTED_RESOURCE!r} resource and no "
                "trusted_worker was named; start one with "
                f"`dask worker ... --resources {TRUSTED_RESOURCE}=1` (deploy/README.md)"
            )
        warnings.warn(
            f"no worker offers the {TRUSTED_RESOURCE!r} resource and no trusted_worker was "
            "named: the noise is added on whichever worker the scheduler picks (recorded in "
            "privacy_['released_on']); pass require_trusted=True to refuse instead",
            UntrustedReleaseWarning, stacklevel=4,
        )
    register_sealing(client)

    def trusted_worker_present(workers: dict) -> str | None:
        if placement_available(placement, workers):
            return None
        return f"the trusted worker ({described}) left the cluster and did not come back"

    # BLAS limited before the first task can start (in-process workers).
    with single_threaded_blas(client):
        sum_future = client.compute(dask.delayed(TrustedSum, pure=True)(graph))
        mark_release_dispatched(fit_id)  # before it can draw (abandon_release)
        release_future = client.submit(
            private_release, sum_future, mechanism.plan.n_pairs, mechanism.sigma, n_components,
            mechanism.sampler, fit_id,
            key=f"dppca-release-{fit_id}", pure=False, retries=0, **placement,
        )
        try:
            with cluster_progress(client, [sum_future, release_future], progress):
                release = cluster.await_result(client, release_future, f"release {fit_id}",
                                               needed=trusted_worker_present)
        except cluster.ClusterStalledError as error:
            raise cluster.ClusterStalledError(f"{error}; nothing was released") from None
        except distributed.KilledWorker as error:
            raise RuntimeError(
                f"release {fit_id}: the trusted worker died while releasing ({error}); "
                "nothing was released to this client"
            ) from None
        finally:
            release_future.release()
            sum_future.release()
    return release, described


def _describe_placement(placement: dict) -> str:
    if "resources" in placement and "workers" in placement:
        return f"a worker offering {TRUSTED_RESOURCE!r} with the trusted worker's TLS certificate"
    if "resources" in placement:
        return f"a worker offering {TRUSTED_RESOURCE!r}"
    if "workers" in placement:
        return f"trusted_worker {placement['workers'][0]}"
    return f"any worker (none offers {TRUSTED_RESOURCE!r})"
