"""The names of the d features: the input's column names (public metadata), else x0...

An analysis records them (``meta["feature_names"]``); the report's loadings and every
further stage's summary read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["feature_names_for", "input_feature_names"]


def input_feature_names(X: Any, estimator: Any = None) -> list[str] | None:
    """The input's column names (public metadata), or None when it has none.

    The directions estimator's ``feature_names_in_`` when it has them, else the column
    names of a (dask) DataFrame ``X`` (after the group column was dropped).
    """
    names = getattr(estimator, "feature_names_in_", None)
    if names is None:
        names = getattr(X, "columns", None)
    if names is None:
        return None
    return [str(v) for v in list(names)]


def feature_names_for(result: Any, feature_names: Sequence[str] | None = None) -> list[str]:
    """The names of the loadings' rows: ``feature_names``, else the input's column names
    recorded in the analysis, else ``x0 .. x{d-1}``.
    """
    d = int(result.directions.shape[1])
    names = feature_names if feature_names is not None else result.meta.get("feature_names")
    if names is None:
        return [f"x{j}" for j in range(d)]
    names = [str(v) for v in names]
    if len(names) != d:
        raise ValueError(f"feature_names: expected {d} names (one per feature), got {len(names)}")
    return names
