"""What a plan is for, from the planner's arguments: the cluster (a scheduler's, or the
workers, threads and memory limit stated), the machine model and the spectrum of the
records (stated, or a PUBLIC pilot's).  Public inputs only: nothing here reads the
records.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..compute.shape import ClusterShape, cluster_shape
from ..validation import integer_at_least
from .machine import MachineModel, load_machine_model

__all__ = [
    "memory_limit_bytes",
    "pilot_spectrum",
    "planned_cluster",
    "planned_machine",
    "planned_spectrum",
]


def planned_cluster(
    scheduler: Any,
    workers: int | None,
    threads: int | None,
    memory_limit: int | str | None,
) -> ClusterShape:
    """The cluster to plan for: ``workers`` of ``threads`` each (and ``memory_limit``),
    else the target ``scheduler`` names (:func:`dask_dppca.compute.shape.cluster_shape`).

    Parameters
    ----------
    scheduler : None, str or distributed.Client
        The estimator's ``scheduler`` parameter (used when nothing else is given).
    workers, threads : int or None
        The cluster's workers and threads per worker, given together.
    memory_limit : int, str or None
        Each worker's memory limit (bytes, or a size such as ``"4GiB"``).

    Returns
    -------
    ClusterShape

    Raises
    ------
    ValueError
        When only one of ``workers`` and ``threads`` is given, or for a memory limit
        that is not a size.
    """
    if workers is None and threads is None and memory_limit is None:
        return cluster_shape(scheduler)
    if workers is None or threads is None:
        raise ValueError("workers: give workers and threads together (and memory_limit)")
    return ClusterShape(workers, threads, memory_limit_bytes(memory_limit))


def planned_machine(machine: MachineModel | str | os.PathLike[str] | None) -> MachineModel:
    """The machine model to plan with: ``machine`` itself, or the model saved in the file
    it names, else the saved one or the built-in default
    (:func:`dask_dppca.planning.machine.load_machine_model`).

    Parameters
    ----------
    machine : MachineModel, str, os.PathLike or None
        A model, or the file holding one.

    Returns
    -------
    MachineModel
    """
    return machine if isinstance(machine, MachineModel) else load_machine_model(machine)


def memory_limit_bytes(value: int | str | None) -> int | None:
    """A worker's memory limit in bytes from an int or a size ("4GiB"); None: unlimited.

    Parameters
    ----------
    value : int, str or None
        Bytes, or a size Dask parses (``dask.utils.parse_bytes``).

    Returns
    -------
    int or None

    Raises
    ------
    ValueError
        Naming ``memory_limit``, for a value that is not a positive size.
    """
    if value is None:
        return None
    if isinstance(value, str):
        from dask.utils import parse_bytes

        try:
            value = parse_bytes(value)
        except (ValueError, TypeError):
            raise ValueError(
                f"memory_limit: expected bytes or a size such as '4GiB', got {value!r}"
            ) from None
    return integer_at_least("memory_limit", value, 1)


def planned_spectrum(spectrum: ArrayLike | None, pilot: Any, d: int) -> ArrayLike | None:
    """The spectrum the utility model is given: ``spectrum`` as stated, or a public
    ``pilot``'s (:func:`pilot_spectrum`), or None (no accuracy predicted).

    Parameters
    ----------
    spectrum : array_like or None
        Eigenvalues of the records' scatter matrix, stated from public knowledge.
    pilot : array_like or None
        A PUBLIC pilot data set (n_pilot x d).  Never the private data.
    d : int
        The records' width.

    Returns
    -------
    array_like or None

    Raises
    ------
    ValueError
        Naming ``pilot``, when both are given or the pilot is not a usable (n, d) array.
    """
    if pilot is None:
        return spectrum
    if spectrum is not None:
        raise ValueError("pilot: give a spectrum or a public pilot, not both")
    return pilot_spectrum(pilot, d)


def pilot_spectrum(pilot: Any, d: int) -> NDArray[np.float64]:
    """The covariance eigenvalues of a public pilot data set, largest first (floored
    at a millionth of the largest, so that the model's spectrum is positive).

    Parameters
    ----------
    pilot : array_like, shape (n_pilot, d)
        PUBLIC records (rows with a NaN or an infinity are left out).
    d : int
        The width the pilot must have.

    Returns
    -------
    ndarray, shape (d,)

    Raises
    ------
    ValueError
        Naming ``pilot``, for another shape or fewer than 2 finite rows.
    """
    rows = np.asarray(pilot, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != d or rows.shape[0] < 2:
        raise ValueError(f"pilot: expected a public (n_pilot, {d}) array, got shape {rows.shape}")
    rows = rows[np.all(np.isfinite(rows), axis=1)]
    if rows.shape[0] < 2:
        raise ValueError("pilot: needs at least 2 finite rows")
    values = np.sort(np.linalg.eigvalsh(np.cov(rows, rowvar=False)))[::-1]
    top = float(values[0]) if values[0] > 0 else 1.0
    return np.maximum(values, top * 1e-6)
