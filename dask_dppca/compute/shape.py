"""The size of a compute target, read without running anything: :class:`ClusterShape`.

A plan (``dask-dppca plan``, ``DPPCA.plan``) needs the workers, their threads and their
memory limits, the public size of the cluster a fit would run on.  :func:`cluster_shape`
reads them from a running cluster's scheduler (one ``scheduler_info`` request, no task),
or describes the embedded cluster a fit would start on this machine without starting it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import distributed
from distributed.system import MEMORY_LIMIT

from ..graph.worker_tasks import WorkerTasks
from .cluster import (
    active_client,
    connect,
    workers_in_this_process,
)
from .schedulers import LOCAL_SCHEDULERS, check_scheduler

__all__ = ["ClusterShape", "cluster_shape"]


@dataclass(frozen=True)
class ClusterShape:
    """Workers, threads per worker and each worker's memory limit (bytes).

    Attributes
    ----------
    workers : int
        Worker processes.
    threads_per_worker : int
        Threads of each worker (of the smallest, for a mixed cluster).
    memory_limit : int or None
        Each worker's memory limit in bytes (the smallest one); None when unlimited.
    source : str
        Where the figures come from (given, a scheduler's address, this machine).
    total_threads : int or None
        The threads of all workers together when they differ between workers (else
        ``workers * threads_per_worker``).
    in_process : bool
        Whether the workers run in this process (the embedded cluster, a local
        scheduler): an input in this process's memory is then in the worker's too.
    local_scheduler : bool
        Whether it is a Dask local scheduler (no workers: no worker-wide tasks).
    starts : bool
        Whether it is the embedded cluster a run would start (not running yet): the run
        pays its start and its first imports and compiled code.
    """

    workers: int
    threads_per_worker: int
    memory_limit: int | None
    source: str = "given"
    total_threads: int | None = None
    in_process: bool = False
    local_scheduler: bool = False
    starts: bool = False

    def __post_init__(self) -> None:
        for name in ("workers", "threads_per_worker"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        limit = self.memory_limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"memory_limit: must be a number of bytes >= 1, got {limit!r}")

    @property
    def n_threads(self) -> int:
        """Threads of the whole cluster (what the design rule uses)."""
        return self.total_threads or self.workers * self.threads_per_worker

    @property
    def worker_tasks(self) -> WorkerTasks | None:
        """The cluster as the graph's worker-wide tasks are cut for; None for a local
        scheduler (:mod:`dask_dppca.graph.worker_tasks`).
        """
        if self.local_scheduler:
            return None
        return WorkerTasks(self.workers, self.threads_per_worker, self.memory_limit)

    def describe(self) -> dict[str, Any]:
        """The shape as a plain dict."""
        return {
            "workers": self.workers,
            "threads_per_worker": self.threads_per_worker,
            "n_threads": self.n_threads,
            "memory_limit": self.memory_limit,
            "source": self.source,
        }


def cluster_shape(scheduler: Any = None) -> ClusterShape:
    """The shape of the target the estimator's ``scheduler`` parameter names.

    ``None``: the active distributed client's cluster if there is one, else the embedded
    cluster a fit would start (one worker, a thread per core, this machine's memory),
    without starting it.  A local scheduler name: this process (one thread for
    ``"synchronous"``, a thread per core otherwise).  An address or a client: its
    workers as its scheduler reports them (no task runs).
    """
    check_scheduler(scheduler)
    cores = os.cpu_count() or 1
    if isinstance(scheduler, str) and scheduler in LOCAL_SCHEDULERS:
        threads = 1 if LOCAL_SCHEDULERS[scheduler] == "synchronous" else cores
        return ClusterShape(
            1,
            threads,
            int(MEMORY_LIMIT),
            f"scheduler={scheduler!r}",
            in_process=True,
            local_scheduler=True,
        )
    if scheduler is None:
        scheduler = active_client()
        if scheduler is None:
            return ClusterShape(
                1,
                cores,
                int(MEMORY_LIMIT),
                "the embedded cluster on this machine",
                in_process=True,
                starts=True,
            )
    if isinstance(scheduler, distributed.Client):
        return _from_client(scheduler)
    client = connect(scheduler)
    try:
        return _from_client(client)
    finally:
        client.close()


def _from_client(client: distributed.Client) -> ClusterShape:
    info = client.scheduler_info(n_workers=-1)
    workers = list(info["workers"].values())
    if not workers:
        raise ValueError(
            f"scheduler: the cluster at {info.get('address', '?')} has no workers; start "
            "some, or plan with --workers/--threads/--memory-limit"
        )
    threads = [max(1, int(w.get("nthreads", 1))) for w in workers]
    limits = [int(w["memory_limit"]) for w in workers if w.get("memory_limit")]
    return ClusterShape(
        len(workers),
        min(threads),
        min(limits) if len(limits) == len(workers) else None,
        f"the scheduler at {info.get('address', '?')}",
        total_threads=sum(threads) if len(set(threads)) > 1 else None,
        in_process=workers_in_this_process(client),
    )
