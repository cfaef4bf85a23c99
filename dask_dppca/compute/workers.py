"""What a fit sets up where it computes: BLAS on one thread, who may open sealed sums, and
the resource each worker offers the kernel's worker-wide tasks.

Dask runs one task per core, so threaded BLAS only oversubscribes; OpenBLAS also rounds
differently with different thread counts, and a fixed count is what makes the exact sum
bitwise identical on any number of workers.

* Worker processes of a cluster: :class:`WorkerSetup`, a worker plugin registered by
  every compute on a cluster, pins BLAS (and OpenMP) to one thread for good and marks
  the process as allowed to open sealed partial sums (:mod:`dask_dppca.graph.sealed`).
  Permanent on purpose: toggling the limit per task leaves OpenBLAS's idle threads
  spinning on the core the next task needs.  Dask's nanny already sets
  ``OPENBLAS_NUM_THREADS=1``; this covers workers started without it.
  It also raises glibc's mmap threshold, which the nanny's ``MALLOC_TRIM_THRESHOLD_``
  freezes at 128 KiB (:mod:`dask_dppca.compute.allocator`: twice the wall time without).
* Computes in this process (local schedulers, the embedded in-process cluster):
  :func:`single_threaded_blas` around the whole compute, then restored, since pinning
  for good would leave the user's own numpy single-threaded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from threadpoolctl import ThreadpoolController, threadpool_limits

from ..graph.sealed import allow_unsealing
from ..graph.worker_tasks import WORKER_TASK_RESOURCE
from .allocator import keep_scratch_on_the_heap
from .cluster import in_this_process
from .failures import UNDER_FOOTPRINT, WorkerDiedError

__all__ = ["PLUGIN_NAME", "WorkerSetup", "prepare_workers", "single_threaded_blas"]

PLUGIN_NAME = "dask-dppca-worker-setup"

_pools: dict[str, ThreadpoolController] = {}


@contextmanager
def _limited() -> Iterator[None]:
    # The thread pools are found once per process (threadpoolctl scans the loaded
    # libraries, about a millisecond: the fixed cost of a small kendall_matrix).
    if "controller" not in _pools:
        _pools["controller"] = ThreadpoolController()
    with _pools["controller"].limit(limits=1):
        yield


def single_threaded_blas(in_process: bool) -> Any:
    """BLAS and OpenMP on one thread for the block when the compute runs in this process."""
    return _limited() if in_process else nullcontext()


class WorkerSetup(WorkerPlugin):
    """Pins BLAS to one thread, keeps scratch arrays on the heap and allows sealed sums,
    in worker processes of a cluster.

    Workers inside the client's own process (``inproc://`` addresses) are left alone:
    they share the user's process, whose BLAS :func:`single_threaded_blas` limits per
    compute, and they exchange objects without pickling.
    """

    async def setup(self, worker) -> None:
        """Run by each worker when it starts (or when the plugin is registered).

        Every worker, in this process or not, declares one
        :data:`~dask_dppca.graph.worker_tasks.WORKER_TASK_RESOURCE`: the kernel's
        worker-wide tasks need one each, so one runs a worker at a time.
        """
        if worker.state.total_resources.get(WORKER_TASK_RESOURCE) != 1:
            await worker.set_resources(**{WORKER_TASK_RESOURCE: 1})
        if in_this_process(worker.address):
            return
        threadpool_limits(limits=1)
        keep_scratch_on_the_heap()
        allow_unsealing()


def prepare_workers(client: Any, attempts: int = 5) -> None:
    """Register :class:`WorkerSetup` on the cluster (its present and future workers).

    A worker killed an instant earlier can make the broadcast fail before the
    scheduler notices the loss; the scheduler keeps the plugin, so registering again
    once the dead worker is gone is safe.
    """
    for attempt in range(attempts):
        try:
            client.register_plugin(WorkerSetup(), name=PLUGIN_NAME)
            return
        except OSError as error:  # CommClosedError: a worker died during the broadcast
            if attempt == attempts - 1:
                # Dying at every try before any task ran: most often killed at rest.
                raise WorkerDiedError(
                    f"workers died {attempts} times while the fit set them up, before any "
                    f"of its tasks ran: {UNDER_FOOTPRINT} is the usual cause; raise "
                    "--memory-limit (or the cluster's worker memory) and fit again; "
                    f"nothing was read or released ({type(error).__name__}: {error})"
                ) from error
            time.sleep(0.5 * (attempt + 1))
