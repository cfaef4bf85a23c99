"""Layer 5, compute: the only package that knows a Dask compute target.

* :mod:`.target`: :class:`.ComputeTarget` (a local scheduler or a cluster), resolved from
  the ``scheduler`` parameter by :func:`.compute_target`.
* :mod:`.cluster`: the embedded LocalCluster, scheduler addresses, TLS.
* :mod:`.waits`: bounded waits (:class:`.ClusterStalledError`).
* :mod:`.failures`: a dead worker (its memory limit) or a lost scheduler in one line
  (:class:`.WorkerDiedError`, :class:`.SchedulerLostError`).
* :mod:`.progress`: progress bars (text in a terminal, a widget in Jupyter).
* :mod:`.workers`: BLAS on one thread, and the worker plugin that allows sealed sums.
* :mod:`.trusted`: running a :class:`~.ReleaseMechanism` once, on the trusted worker,
  and any other noisy statistic by the same path (:func:`.release_statistic`): where it
  may run, drawn at most once, the ledger charged where the noise is drawn, and the
  private score map's statistics.
* :mod:`.budget_config`: the Dask configuration's default ledger and "required" flag.

The modules of :mod:`.trusted` had paths one level up before (``compute.release``, ...):
those still import, with a DeprecationWarning, for one release.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports, moved_modules

#: Public name -> the submodule defining it (imported on first use: :mod:`dask_dppca.lazy`).
_EXPORTS = {
    "TRUSTED_RESOURCE": ".cluster",
    "check_scheduler": ".schedulers",
    "close_embedded_cluster": ".cluster",
    "tls_config": ".cluster",
    "SchedulerLostError": ".failures",
    "WorkerDiedError": ".failures",
    "UntrustedReleaseWarning": ".trusted.placement",
    "release_statistic": ".trusted.release",
    "ClusterTarget": ".target",
    "ComputeTarget": ".target",
    "LocalScheduler": ".target",
    "compute_target": ".target",
    "STALL_TIMEOUT_KEY": ".waits",
    "ClusterStalledError": ".waits",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
moved_modules(
    __name__,
    {
        name: f"trusted.{name}"
        for name in ("placement", "release", "score_map", "site_ledger", "tickets", "trust")
    },
    removed_in="0.3",
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .cluster import TRUSTED_RESOURCE, close_embedded_cluster, tls_config
    from .failures import SchedulerLostError, WorkerDiedError
    from .schedulers import check_scheduler
    from .target import ClusterTarget, ComputeTarget, LocalScheduler, compute_target
    from .trusted.placement import UntrustedReleaseWarning
    from .trusted.release import release_statistic
    from .waits import STALL_TIMEOUT_KEY, ClusterStalledError

__all__ = [
    "STALL_TIMEOUT_KEY",
    "TRUSTED_RESOURCE",
    "ClusterStalledError",
    "ClusterTarget",
    "ComputeTarget",
    "LocalScheduler",
    "SchedulerLostError",
    "UntrustedReleaseWarning",
    "WorkerDiedError",
    "check_scheduler",
    "close_embedded_cluster",
    "compute_target",
    "release_statistic",
    "tls_config",
]
