"""Loading a result file into a fitted estimator (above both the estimator and the
result files' module, which never import each other in a circle).
"""

from __future__ import annotations

import os
from typing import Any

from .estimator import DPPCA

__all__ = ["load_result"]


def load_result(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> DPPCA:
    """A fitted :class:`~dask_dppca.decomposition.estimator.DPPCA` from a result file.

    Parameters
    ----------
    path : str or os.PathLike
        A result file written by :meth:`~dask_dppca.decomposition.estimator.DPPCA.save` or
        ``dask-dppca fit --output``: a local path (``~`` expanded) or an fsspec URL.
    storage_options : dict, optional
        fsspec options for a URL.

    Returns
    -------
    DPPCA
        With ``components_``, ``eigenvalues_``, ``kendall_eigenvalue_ratio_``,
        ``privacy_``, ``provenance_``, ``n_features_in_``, ``n_samples_`` (and
        ``feature_names_in_`` if the fit had column names) and the parameters of the fit.
        A custom spatial sign is recorded by its name only: pass it again to refit.

    Raises
    ------
    ValueError
        Naming the file: not a result file, a newer format than this version reads, or
        entries that do not fit together.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_normal((600, 3))
    >>> est = dd.DPPCA(2, epsilon=1.0, delta=1e-6, scheduler="threads").fit(X)
    >>> path = os.path.join(tempfile.mkdtemp(), "fit.json")
    >>> _ = est.save(path)
    >>> bool((dd.load_result(path).components_ == est.components_).all())
    True
    """
    return DPPCA.load(path, storage_options=storage_options)
