"""Releasing a noisy statistic on a compute target: partial totals -> one task -> noise.

The generic twin of :mod:`.release` for the analysis's statistics (scree quantiles and
means, score-map counts): the partial totals are computed on the workers; once they all
are, one task that is never retried (``pure=False``, ``retries=0``) adds them exactly and
runs ``release(total)`` on the trusted worker (placement as for the directions), so the
exact total never exists as a Dask key and only the released values are gathered.  On a
local scheduler the partials are computed and released in this process.  Every wait is
bounded.  Budgets are the caller's: an analysis reserves all its parts before anything
is read and keeps them charged if any stage fails (conservative).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dask
import distributed

from ..graph.scree import merge_partials
from .failures import killed_worker_error
from .placement import choose_placement, describe_placement, placement_available
from .progress import cluster_progress, local_progress
from .target import ClusterTarget, ComputeTarget
from .waits import await_done, await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["release_statistic", "statistic_task"]


def statistic_task(release: Callable[[Any], Any], *partials: Any) -> tuple[Any, str]:
    """Where the release runs: the partials' exact total, then ``release(total)``; the
    released values and the address of the worker that drew them.
    """
    try:
        where = distributed.get_worker().address
    except ValueError:  # not on a worker: a local scheduler, this process
        where = "this process"
    return release(merge_partials(*partials)), where


def release_statistic(
    target: ComputeTarget,
    release: Callable[[Any], Any],
    partials: list,
    label: str,
    *,
    trusted_worker: str | None = None,
    require_trusted: bool = False,
    progress: bool = False,
) -> tuple[Any, str]:
    """Run ``release`` once on the exact total of ``partials``; the result and where it ran.

    Parameters
    ----------
    target : ComputeTarget
    release : callable
        ``release(total) -> released values``; it draws the noise (a mechanism's method).
    partials : list of Delayed
        Partial totals (int64 arrays or ExactSums).
    label : str
        Names the release in errors.

    Returns
    -------
    (object, str)
        The released values and where the noise was drawn.
    """
    if not isinstance(target, ClusterTarget):
        if require_trusted:
            raise ValueError(
                "require_trusted: a local scheduler releases in this process, which is no "
                "trusted worker; use a cluster with one (or require_trusted=False)"
            )
        with local_progress(progress), single_threaded_blas(True):
            values = dask.compute(*partials, scheduler=getattr(target, "name", "sync"))
        return statistic_task(release, *values)
    client = target.client
    placement = choose_placement(client, trusted_worker, require_trusted)
    described = describe_placement(placement)
    prepare_workers(client)

    def trusted_present(workers: dict) -> str | None:
        if placement_available(placement, workers):
            return None
        return f"the trusted worker ({described}) left the cluster"

    started = time.time()
    with single_threaded_blas(target.in_process):
        futures = client.compute(partials)
        future = None
        try:
            with cluster_progress(client, futures, progress):
                await_done(client, futures, label, needed=trusted_present)
            future = client.submit(
                statistic_task,
                release,
                *futures,
                key=f"dppca-statistic-{label}-{time.time_ns()}",
                pure=False,
                retries=0,
                **placement,
            )
            values, where = await_result(client, future, label, needed=trusted_present)
            return values, f"{where} ({described})"
        except distributed.KilledWorker as error:
            raise killed_worker_error(
                client, error, label, "the analysis stays charged", since=started
            ) from None
        finally:
            if future is not None:
                future.release()
            for f in futures:
                f.release()
