"""The values the ``scheduler`` parameter takes, checked without importing Dask.

An estimator validates its parameters before anything heavy is imported (a bad
parameter is refused in milliseconds, not after Dask, distributed, Zarr and fsspec load:
``tests/estimator/test_validation_first.py``), so this check imports nothing: a
``distributed.Client`` can only be one if distributed is imported already.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["LOCAL_SCHEDULERS", "check_scheduler"]

#: Dask's in-process schedulers, accepted by name.
LOCAL_SCHEDULERS = {
    "synchronous": "synchronous",
    "sync": "synchronous",
    "single-threaded": "synchronous",
    "threads": "threads",
    "threading": "threads",
    "processes": "processes",
}


def check_scheduler(scheduler: Any) -> None:
    """Raise ValueError unless ``scheduler`` is a value
    :func:`~dask_dppca.compute.target.compute_target` takes.

    Checks the value only: nothing is started, imported or contacted.
    """
    if scheduler is None or _is_client(scheduler):
        return
    if isinstance(scheduler, str) and (scheduler in LOCAL_SCHEDULERS or _is_address(scheduler)):
        return
    raise ValueError(
        f"scheduler: unknown value {scheduler!r}; expected None (embedded LocalCluster), "
        f"one of {sorted(set(LOCAL_SCHEDULERS))}, an address such as 'tcp://host:8786', "
        "or a distributed.Client"
    )


def _is_client(value: Any) -> bool:
    """A ``distributed.Client`` (only possible once distributed is imported)."""
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(value, distributed.Client)


def _is_address(value: str) -> bool:
    return "://" in value or ":" in value
