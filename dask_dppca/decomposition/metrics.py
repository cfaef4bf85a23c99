"""Metrics: the sin Theta distance between subspaces (docs/method.md, section 6)."""

from __future__ import annotations

import numpy as np

__all__ = ["sin_theta"]


def sin_theta(V1: np.ndarray, V2: np.ndarray, form: str = "operator") -> float:
    """Sin Theta distance between the column spaces of two orthonormal bases.

    Parameters
    ----------
    V1, V2 : ndarray, shape (d, m)
        Orthonormal columns (pass ``est.components_.T`` for an estimator's rows).
    form : {"operator", "frobenius"}
        ``"operator"``: ``sqrt(1 - rho_m^2)``, rho_m the smallest singular value of
        ``V1^T V2`` (Cai & Zhang 2018).  ``"frobenius"``: ``sqrt(m - ||V1^T V2||_F^2)``.

    Returns
    -------
    float
        In ``[0, 1]`` (operator) or ``[0, sqrt(m)]`` (Frobenius).

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> basis = np.eye(4)[:, :2]
    >>> dd.sin_theta(basis, basis)
    0.0
    >>> round(dd.sin_theta(basis, np.eye(4)[:, 2:]), 12)  # orthogonal subspaces
    1.0
    """
    V1 = np.asarray(V1, dtype=np.float64)
    V2 = np.asarray(V2, dtype=np.float64)
    if V1.ndim == 1:
        V1 = V1[:, None]
    if V2.ndim == 1:
        V2 = V2[:, None]
    if V1.shape != V2.shape:
        raise ValueError(f"V2: shape {V2.shape} differs from V1's {V1.shape}; both must be (d, m)")
    if V1.shape[1] > V1.shape[0]:
        raise ValueError(f"V1: has more columns than rows {V1.shape}; pass a (d, m) basis")
    overlap = V1.T @ V2
    if form == "operator":
        rho = np.linalg.svd(overlap, compute_uv=False).min()
        return float(np.sqrt(max(0.0, 1.0 - min(rho, 1.0) ** 2)))
    if form == "frobenius":
        return float(np.sqrt(max(0.0, V1.shape[1] - np.sum(overlap**2))))
    raise ValueError(f"form: unknown value {form!r}; expected 'operator' or 'frobenius'")
