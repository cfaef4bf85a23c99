"""The exact, NON-PRIVATE K_hat: :func:`kendall_matrix` and the breakdown bound read off it.

The same path as a fit up to the exact sum (the same block planning, graph and kernel),
then no noise: its output is a deterministic function of the data and must never be
released.
"""

from __future__ import annotations

import math
from typing import Any

import dask
import numpy as np

from ..compute import check_scheduler, compute_target
from ..design import plan_blocks
from ..graph import kernel_sum_graph, lanes_total
from ..io import open_records
from ..kernel import SpatialSign, resolve_spatial_sign

__all__ = ["breakdown_bound", "kendall_matrix"]


def kendall_matrix(
    X: Any,
    spatial_sign: str | SpatialSign = "sphere",
    radius: float | None = None,
    *,
    scheduler: Any = "threads",
    component: str | None = None,
    design: Any = "complete",
    storage_options: dict[str, Any] | None = None,
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

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_normal((200, 3))
    >>> K = dd.kendall_matrix(X, scheduler="threads")  # NOT PRIVATE: research and tests only
    >>> K.shape, bool(np.isclose(np.trace(K), 1.0))  # the sphere's K has trace 1
    ((3, 3), True)
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
        lane_sums = kernel_sum_graph(
            records.blocks(plan.block_sizes),
            plan,
            g,
            target.n_threads,
            cluster=target.worker_tasks,
        )
        # The total is a key here (nothing private): the lanes' sums stay sealed on the workers.
        (total,) = target.compute(
            [dask.delayed(lanes_total, pure=True)(*lane_sums)], "kendall_matrix"
        )
    k_hat: np.ndarray = total / plan.n_pairs
    return k_hat


def breakdown_bound(
    X: Any,
    n_components: int,
    spatial_sign: str = "sphere",
    radius: float | None = None,
    *,
    scheduler: str = "synchronous",
) -> dict[str, float]:
    """Lower bound on the breakdown point of the (non-private) g-subspace of ``X``.

    Replacing k records changes a fraction ``p(k) = k (2n - k - 1) / (n (n - 1))`` of
    the pair terms, each by at most ``G^2`` in operator norm; by Weyl the top-m
    eigenspace of ``K_hat`` stays separated while ``G^2 p(k) < gap / 2``,
    ``gap = phi_m(K_hat) - phi_{m+1}(K_hat)`` (docs/method.md, section 6).

    NOT PRIVATE: computed from the exact ``K_hat`` of ``X``; a diagnostic for data you
    may look at (or synthetic data), not something to release.

    Returns
    -------
    dict
        ``k`` (largest number of replaced records certified safe, possibly 0),
        ``fraction`` (``k / n``), ``gap``, ``G``, ``n``, ``limit`` (the n -> inf limit of
        the fraction, ``1 - sqrt(1 - gap / (2 G^2))``).
    """
    g = resolve_spatial_sign(spatial_sign, radius)
    if not g.is_bounded:
        raise ValueError(f"spatial_sign: {g.name!r} is unbounded; the bound needs a finite G")
    k_hat = kendall_matrix(X, spatial_sign=spatial_sign, radius=radius, scheduler=scheduler)
    n, d = np.shape(X)
    m = int(n_components)
    if not 1 <= m < d:
        raise ValueError(f"n_components: must be in 1..{d - 1}, got {n_components!r}")
    ev = np.sort(np.linalg.eigvalsh(k_hat))[::-1]
    gap = float(ev[m - 1] - ev[m])
    G2 = g.bound**2
    target = gap / (2.0 * G2)  # need p(k) < target
    # p(k) = k (2n - k - 1) / (n (n - 1)) is increasing on 0 <= k <= n: solve p(k) = target.
    a = n * (n - 1) * target
    b = 2 * n - 1
    disc = b * b - 4 * a
    k = n if disc < 0 else int(math.floor((b - math.sqrt(disc)) / 2))
    k = max(0, min(k, n))
    while k > 0 and k * (2 * n - k - 1) / (n * (n - 1)) >= target:
        k -= 1
    while k < n and (k + 1) * (2 * n - k - 2) / (n * (n - 1)) < target:
        k += 1
    limit = 1.0 - math.sqrt(max(0.0, 1.0 - min(target, 1.0)))
    return {"k": int(k), "fraction": k / n, "gap": gap, "G": g.bound, "n": int(n), "limit": limit}
