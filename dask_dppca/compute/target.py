"""One type for where a compute runs: :class:`ComputeTarget`.

A target is a Dask local scheduler (:class:`LocalScheduler`) or a distributed cluster
reached through a client (:class:`ClusterTarget`: the embedded LocalCluster, an address,
or the user's client).  Everything the rest of the package needs of one is here: how
many threads it offers (public: the cluster's size), whether it computes in this
process (the BLAS policy), a bounded :meth:`~ComputeTarget.compute` with progress, the
release (:mod:`.release`) and the hook that abandons a failed fit's release.
:func:`compute_target` resolves the estimator's ``scheduler`` parameter.
"""

from __future__ import annotations

import os
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dask
import distributed

from ..graph.worker_tasks import WorkerTasks
from ..privacy import PrivateRelease, ReleaseMechanism
from .cluster import (
    active_client,
    connect,
    embedded_client,
    workers_in_this_process,
)
from .failures import (
    SchedulerLostError,
    is_scheduler_loss,
    killed_worker_error,
    scheduler_address,
)
from .first_compile import say_before_compiling
from .logs import quiet_own_task_failures
from .progress import cluster_progress, local_progress
from .schedulers import LOCAL_SCHEDULERS, check_scheduler
from .trusted.placement import DEFAULT_OPTIONS, ReleaseOptions
from .trusted.release import (
    Draw,
    release_here,
    release_locally,
    release_on_cluster,
    release_on_workers,
)
from .trusted.tickets import abandon_release
from .waits import await_result
from .workers import prepare_workers, single_threaded_blas

__all__ = ["ClusterTarget", "ComputeTarget", "LocalScheduler", "compute_target"]


class ComputeTarget(ABC):
    """Where a fit computes; use :func:`compute_target` to get one."""

    @property
    @abstractmethod
    def n_threads(self) -> int:
        """Worker threads the target offers (public: the design rule may use it)."""

    @property
    @abstractmethod
    def in_process(self) -> bool:
        """Whether the work runs in this process (BLAS is then limited per compute)."""

    @property
    def worker_tasks(self) -> WorkerTasks | None:
        """The workers the kernel's worker-wide tasks are cut for; None (the default, a
        local scheduler's): each segment is a task.
        """
        return None

    @abstractmethod
    def compute(self, collections: list, label: str, progress: bool = False) -> list:
        """Compute Dask collections and return their values; every wait bounded."""

    @abstractmethod
    def persist(self, collection: Any) -> Any:
        """``collection`` computed and kept where the target computes (lazily: later
        computations wait for it within their own bounded waits).
        """

    #: Where it releases (bound when the target is made).
    options: ReleaseOptions

    @abstractmethod
    def release(
        self,
        mechanism: ReleaseMechanism,
        lane_sums: list,
        n_components: int,
        fit_id: str,
        *,
        dataset: str = "",
    ) -> tuple[PrivateRelease, str]:
        """Run ``mechanism`` once on the lanes' exact sums (where :attr:`options` say);
        the release and where it ran.

        ``dataset`` (what was released on, public) goes into the row of the ledger
        configured where the noise is drawn, if any (:mod:`.site_ledger`).
        """

    @abstractmethod
    def release_draw(self, draw: Draw, partials: list[Any]) -> tuple[Any, str]:
        """Compute ``partials`` and run ``draw`` once on their total (a statistic's
        release, :func:`~.release.release_statistic`); the result and where it ran.
        """

    @abstractmethod
    def abandon(self, fit_id: str) -> bool:
        """For a failed fit: True if its release provably never drew (and now never will)."""


class LocalScheduler(ComputeTarget):
    """A Dask local scheduler (``"synchronous"``, ``"threads"``, ``"processes"``): this process."""

    def __init__(self, name: str, options: ReleaseOptions = DEFAULT_OPTIONS) -> None:
        self.name = LOCAL_SCHEDULERS[name]
        self.options = options

    @property
    def n_threads(self) -> int:
        """Worker threads the target offers."""
        return 1 if self.name == "synchronous" else (os.cpu_count() or 1)

    @property
    def in_process(self) -> bool:
        """Whether the work runs in this process."""
        return True

    def compute(self, collections: list, label: str, progress: bool = False) -> list:
        """Compute Dask collections and return their values; every wait bounded."""
        with local_progress(progress), single_threaded_blas(True):
            return list(dask.compute(*collections, scheduler=self.name))

    def persist(self, collection: Any) -> Any:
        """``collection`` computed into this process' memory."""
        with single_threaded_blas(True):
            return collection.persist(scheduler=self.name)

    def release(
        self,
        mechanism: ReleaseMechanism,
        lane_sums: list,
        n_components: int,
        fit_id: str,
        *,
        dataset: str = "",
    ) -> tuple[PrivateRelease, str]:
        """Run ``mechanism`` once on the lanes' exact sums; the release and where it ran."""
        return release_here(
            self.name,
            mechanism,
            lane_sums,
            n_components,
            fit_id,
            require_trusted=self.options.require_trusted,
            progress=self.options.progress,
            dataset=dataset,
        )

    def release_draw(self, draw: Draw, partials: list[Any]) -> tuple[Any, str]:
        """The partials computed and released in this process."""
        options = self.options
        return release_locally(
            self.name,
            draw,
            partials,
            require_trusted=options.require_trusted,
            progress=options.progress,
        )

    def abandon(self, fit_id: str) -> bool:
        """For a failed fit: True if its release provably never drew (and now never will)."""
        return abandon_release(fit_id, None)

    def __repr__(self) -> str:
        return f"LocalScheduler({self.name!r})"


class ClusterTarget(ComputeTarget):
    """A distributed cluster, through ``client``."""

    def __init__(
        self, client: distributed.Client, options: ReleaseOptions = DEFAULT_OPTIONS
    ) -> None:
        self.client = client
        self.options = options
        # A failed task of the fit is raised to the caller as one line; in-process workers
        # would log it first as a multi-line block (docs/robustness.md).
        quiet_own_task_failures()

    @property
    def n_threads(self) -> int:
        """Worker threads the target offers."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        return max(1, sum(int(info.get("nthreads", 1)) for info in workers.values()))

    @property
    def in_process(self) -> bool:
        """Whether the work runs in this process."""
        return workers_in_this_process(self.client)

    @property
    def worker_tasks(self) -> WorkerTasks | None:
        """The cluster's workers, threads and memory limit, as its scheduler says; None
        while it has no worker (an adaptive cluster still starting one): each segment is
        then a task, as on a local scheduler.
        """
        from .shape import cluster_shape

        try:
            return cluster_shape(self.client).worker_tasks
        except ValueError:  # no workers yet: the fit's own bounded waits cover the rest
            return None

    def persist(self, collection: Any) -> Any:
        """``collection`` computed and kept on the workers (its futures held by it).

        Rows in memory travel inside its graph once, on purpose (a lost worker's blocks
        are computed again from it): Dask's "Sending large graph" warning, which says
        that, is not shown for it.
        """
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            return self.client.persist(collection)

    def compute(self, collections: list, label: str, progress: bool = False) -> list:
        """Compute Dask collections and return their values; every wait bounded."""
        prepare_workers(self.client)
        started = time.time()
        with single_threaded_blas(self.in_process):
            futures = self.client.compute(collections)
            try:
                with cluster_progress(self.client, futures, progress):
                    return [await_result(self.client, future, label) for future in futures]
            except distributed.KilledWorker as error:
                raise killed_worker_error(
                    self.client, error, label, "nothing was released", since=started
                ) from None
            except BaseException as error:
                if isinstance(error, SchedulerLostError) or not is_scheduler_loss(
                    error, self.client
                ):
                    raise
                raise SchedulerLostError(
                    f"{label}: the scheduler at {scheduler_address(self.client)} went away; "
                    "nothing was released"
                ) from None
            finally:
                for future in futures:
                    future.release()

    def release(
        self,
        mechanism: ReleaseMechanism,
        lane_sums: list,
        n_components: int,
        fit_id: str,
        *,
        dataset: str = "",
    ) -> tuple[PrivateRelease, str]:
        """Run ``mechanism`` once on the lanes' exact sums; the release and where it ran."""
        options = self.options
        return release_on_cluster(
            self.client,
            self.in_process,
            mechanism,
            lane_sums,
            n_components,
            fit_id,
            trusted_worker=options.trusted_worker,
            require_trusted=options.require_trusted,
            progress=options.progress,
            dataset=dataset,
        )

    def release_draw(self, draw: Draw, partials: list[Any]) -> tuple[Any, str]:
        """One non-retried task on the trusted worker; only its result is gathered."""
        options = self.options
        return release_on_workers(
            self.client,
            self.in_process,
            draw,
            partials,
            trusted_worker=options.trusted_worker,
            require_trusted=options.require_trusted,
            progress=options.progress,
        )

    def abandon(self, fit_id: str) -> bool:
        """For a failed fit: True if its release provably never drew (and now never will)."""
        return abandon_release(fit_id, self.client)

    def __repr__(self) -> str:
        scheduler = self.client.scheduler
        if scheduler is None:  # a closed client has no scheduler to name
            return "ClusterTarget(<closed client>)"
        return f"ClusterTarget({scheduler.address!r})"


@contextmanager
def compute_target(
    scheduler: Any = None, options: ReleaseOptions = DEFAULT_OPTIONS, runs_kernel: bool = True
) -> Iterator[ComputeTarget]:
    """The :class:`ComputeTarget` for the estimator's ``scheduler`` parameter.

    Parameters
    ----------
    scheduler : None, str or distributed.Client
        ``None``: the active distributed client if there is one, else the embedded
        LocalCluster (started on first use, reused, closed at exit).  A local
        scheduler name (``"synchronous"``, ``"threads"``, ``"processes"``).  A
        scheduler address (``"tcp://host:8786"``, ``"tls://..."``; the client's TLS
        certificates come from the Dask configuration, see
        :func:`~dask_dppca.compute.cluster.tls_config`); its client is closed when the
        block ends.  Or a ``distributed.Client`` (for example one made with
        ``distributed.Client(address, security=distributed.Security(...))``).

    options : ReleaseOptions
        Where its releases run (bound once: every release on the target reads them).
    runs_kernel : bool, default True
        Whether the work runs the pair kernel: on this machine, its first run says that
        it compiles it first (:mod:`.first_compile`).

    Raises
    ------
    ValueError
        For an unknown scheduler value, a ``tls://`` address without client
        certificates in the Dask configuration, or an address that does not answer
        (or refuses the handshake) within ``CONNECT_TIMEOUT`` seconds.
    """
    check_scheduler(scheduler)
    if isinstance(scheduler, distributed.Client):
        yield _said_first(ClusterTarget(scheduler, options), runs_kernel)
        return
    if scheduler is None:
        yield _said_first(ClusterTarget(active_client() or embedded_client(), options), runs_kernel)
        return
    if scheduler in LOCAL_SCHEDULERS:
        # "processes": other processes, on this machine and its cache
        yield _said_first(LocalScheduler(scheduler, options), runs_kernel)
        return
    client = connect(scheduler)
    try:
        yield _said_first(ClusterTarget(client, options), runs_kernel)
    finally:
        client.close()


def _said_first(target: ComputeTarget, runs_kernel: bool) -> ComputeTarget:
    """``target``, once the first compile on this machine, if any, is said."""
    if runs_kernel:
        say_before_compiling(isinstance(target, LocalScheduler) or target.in_process)
    return target
