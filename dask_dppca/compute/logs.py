"""One error, said once: in-process workers' log lines about a fit's own failed tasks.

When a task of a fit fails (a missing chunk, a corrupt one), the fit raises that error
to the caller as one line (docs/robustness.md).  A worker running in this process (the
embedded cluster, a notebook's ``LocalCluster(processes=False)``) would first log the
same failure through ``distributed.worker``: a seven-line "Compute Failed" block with a
traceback, and, as the cluster closes, "Async instruction ... ended with
CancelledError" for the fit's tasks still queued.  :func:`quiet_own_task_failures`
drops exactly those records, for task keys of dask-dppca (``dppca-...``) only; every
other record of distributed, and everything a worker in another process logs, is left
as it is.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["OwnTaskFailureFilter", "quiet_own_task_failures"]

#: Every task key of a fit starts with this (read, pairs, sums, release).
KEY_PREFIX = "dppca-"
#: The distributed loggers that report a failed or cancelled task.
LOGGERS = ("distributed.worker", "distributed.worker.state_machine")

_installed = threading.Lock()
_filter: OwnTaskFailureFilter | None = None


class OwnTaskFailureFilter(logging.Filter):
    """Drops distributed's report of a dask-dppca task that failed or was cancelled."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a "Compute Failed" or cancelled-instruction record of our keys."""
        message = record.msg if isinstance(record.msg, str) else ""
        if message.startswith("Compute Failed") and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            return not _is_own_key(args[0])
        if message.startswith("Async instruction for") and "CancelledError" in message:
            return (
                f"execute('{KEY_PREFIX}" not in message and f"execute(('{KEY_PREFIX}" not in message
            )
        return True


def _is_own_key(key: object) -> bool:
    if isinstance(key, tuple) and key:
        key = key[0]
    return isinstance(key, str) and key.startswith(KEY_PREFIX)


def quiet_own_task_failures() -> None:
    """Install the filter on distributed's worker loggers (once per process)."""
    global _filter
    with _installed:
        if _filter is not None:
            return
        _filter = OwnTaskFailureFilter()
        for name in LOGGERS:
            logging.getLogger(name).addFilter(_filter)
