"""Where a fitted release came from (``DPPCA.provenance_``, the header of a result
file): the library version, the fit's start and duration, and the input (its location
with secrets masked, or its type) and shape.  Public metadata only: never a data value,
never a storage option.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from ..io import Records
from ..io.storage import display_location, is_url
from ..version import installed_version

__all__ = ["fit_provenance", "input_description", "library_version"]


def library_version() -> str:
    """The installed dask-dppca version (``dask_dppca.__version__``)."""
    return installed_version()


def fit_provenance(
    X: Any,
    component: str | None,
    input_type: str,
    shape: tuple[int, int],
    started: datetime,
    seconds: float,
) -> dict[str, Any]:
    """A fit's ``provenance_``: the library version, its start and duration, the input.

    Parameters
    ----------
    X
        The input as given to ``fit`` (a path or URL, an array, opened records, ...).
    component : str or None
        The array inside a Zarr group, or the xarray Dataset variable.
    input_type : str
        The input's type, as the opened records name it.
    shape : (int, int)
        The records' shape.
    started : datetime
        When the fit started (UTC).
    seconds : float
        How long it took.

    Returns
    -------
    dict
        ``library_version``, ``fitted_at`` (ISO 8601, to the second), ``fit_seconds``
        (to the millisecond) and ``input`` (:func:`input_description`).
    """
    return {
        "library_version": library_version(),
        "fitted_at": started.isoformat(timespec="seconds"),
        "fit_seconds": round(seconds, 3),
        "input": input_description(X, component, input_type, shape),
    }


def input_description(
    X: Any, component: str | None, input_type: str, shape: tuple[int, int]
) -> dict[str, Any]:
    """The input as a result file records it: a store's location (absolute for a local
    path, secrets masked) or the input's type, and its shape.  Never a value.

    Parameters
    ----------
    X
        The input as given to ``fit``.
    component : str or None
        The array inside a Zarr group, or the xarray Dataset variable.
    input_type : str
        The input's type, as the opened records name it.
    shape : (int, int)
        The records' shape.

    Returns
    -------
    dict
        ``location`` (None for an input that is not a store), ``component``, ``type``
        and ``shape``.
    """
    location = X.location if isinstance(X, Records) else None  # opened by the caller
    if isinstance(X, (str, os.PathLike)):
        text = os.fspath(X)
        location = display_location(
            text if is_url(text) else os.path.abspath(os.path.expanduser(text))
        )
    return {
        "location": location,
        "component": component,
        "type": input_type,
        "shape": [int(shape[0]), int(shape[1])],
    }
