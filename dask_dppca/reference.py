"""The exact, NON-PRIVATE K_hat: :func:`kendall_matrix`, for research, tests and references.

The same path as a fit up to the exact sum (the same block planning, graph and kernel),
then no noise: its output is a deterministic function of the data and must never be
released.
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np

from .compute import check_scheduler, compute_target
from .design import plan_blocks
from .graph import kernel_sum_graph, lanes_total
from .io import open_records
from .kernel import SpatialSign, resolve_spatial_sign

__all__ = ["kendall_matrix"]


def kendall_matrix(
    X: Any,
    spatial_sign: str | SpatialSign = "sphere",
    radius: float | None = None,
    *,
    scheduler: Any = "threads",
    component: str | None = None,
    design: Any = "complete",
    storage_options: dict | None = None,
    allow_fill_values: bool = False,
) -> np.ndarray:
    """The exact, NON-PRIVATE ``K_hat = mean over pairs i<j of g(t_ij) g(t_ij)^T``.

    For research, tests and non-private references: its output is a deterministic
    function of the data and must not be released.  The identity spatial sign gives
    the sample covariance.

    Parameters
    ----------
    X : ndarray, dask.array.Array, Zarr (path, URL, Array, Group), xarray or dask DataFrame
        Records as rows (see :func:`~.open_records`).
    spatial_sign : {"sphere", "winsor", "identity"} or SpatialSign, default="sphere"
    radius : float, optional
        Winsorization radius.
    scheduler : str or distributed.Client, default="threads"
        Where to compute (see :class:`~.DPPCA`).
    component : str, optional
        Array inside a Zarr group, or an xarray Dataset variable.
    design : {"complete", "auto"} or RegularDesign, default="complete"
        Which pairs are averaged.
    storage_options : dict, optional
        fsspec options for a URL (see :meth:`~.DPPCA.fit`).
    allow_fill_values : bool, default=False
        Read missing Zarr chunks as the fill value (see :meth:`~.DPPCA.fit`).

    Returns
    -------
    ndarray, shape (d, d)
    """
    g = resolve_spatial_sign(spatial_sign, radius)
    check_scheduler(scheduler)
    records = open_records(
        X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
    )
    with compute_target(scheduler) as target:
        records = records.counted(target)
        n, d = records.shape
        _, plan = plan_blocks(n, d, records.row_chunks, design, target.n_threads)
        lane_sums = kernel_sum_graph(records.blocks(plan.block_sizes), plan, g, target.n_threads)
        # The total is a key here (nothing private): the lanes' sums stay sealed on the workers.
        (total,) = target.compute(
            [dask.delayed(lanes_total, pure=True)(*lane_sums)], "kendall_matrix"
        )
    return total / plan.n_pairs
