"""Releasing one noisy statistic where K_hat is released: on the trusted worker.

:func:`release_statistic` is the generic step of every statistic of an analysis beyond
the directions (quantile counts, histograms): the exact statistic is computed on the
workers as one Dask value (an :class:`~dask_dppca.graph.score_stats.ExactCounts`, sealed
between worker processes), then one task that is never retried (``pure=False``,
``retries=0``) runs the mechanism's ``release`` on it on the trusted worker, and only its
noisy result is gathered.  A local scheduler computes and releases in this process (and
refuses ``require_trusted``), as :mod:`.release` does for the directions.  Every wait is
bounded (:mod:`.waits`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import dask
import distributed

from .placement import choose_placement, describe_placement, placement_available
from .progress import cluster_progress, local_progress
from .target import ClusterTarget, ComputeTarget, LocalScheduler
from .waits import await_done, await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["release_statistic"]

T = TypeVar("T")


def _release_task(release: Callable[[Any], Any], exact: Any) -> Any:
    """On the trusted worker: the noisy statistic of the exact one (which stays here)."""
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
    if isinstance(target, LocalScheduler):
        if require_trusted:
            raise ValueError(
                f"require_trusted: the local scheduler {target.name!r} releases in this "
                "process, which is no trusted worker"
            )
        with local_progress(progress), single_threaded_blas(True):
            (exact,) = dask.compute(statistic, scheduler=target.name)
        return _release_task(release, exact), f"this process (local scheduler {target.name!r})"
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
            release_future = client.submit(
                _release_task,
                release,
                exact_future,
                key=f"dppca-statistic-release-{uuid.uuid4().hex}",
                pure=False,
                retries=0,
                **placement,
            )
            result = await_result(client, release_future, label, needed=trusted_worker_present)
        except distributed.KilledWorker as error:
            raise RuntimeError(
                f"{label}: a worker died ({error}); "
                + (
                    "nothing was released"
                    if release_future is None
                    else "the release may have drawn its noise"
                )
            ) from None
        finally:
            if release_future is not None:
                release_future.release()
            exact_future.release()
    return result, described
