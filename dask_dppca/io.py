"""Inputs: numpy arrays, dask arrays, ``zarr.Array`` objects and Zarr stores (path or URL).

Everything becomes a 2-D dask array with all columns in one chunk.  Only public
metadata (shape, dtype, chunking) is inspected here: data values are never read, so a
bad value can never raise (the kernel treats it, see kernel.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np

__all__ = ["as_dask_array", "default_block_rows"]

#: Bytes aimed at per row block when the input does not choose its own chunks.
_TARGET_BLOCK_BYTES = 32 * 2**20
_MIN_BLOCK_ROWS = 1024
_MAX_BLOCK_ROWS = 16384


def default_block_rows(n_features: int) -> int:
    """Rows per block for inputs without their own chunking (numpy, array-likes)."""
    rows = _TARGET_BLOCK_BYTES // (8 * max(n_features, 1))
    return int(min(_MAX_BLOCK_ROWS, max(_MIN_BLOCK_ROWS, rows)))


def as_dask_array(data: Any, component: str | None = None) -> da.Array:
    """Wrap any supported input as a row-chunked 2-D dask array.

    Parameters
    ----------
    data : ndarray, dask.array.Array, zarr.Array, str or os.PathLike
        The records, one per row.  A string or path names a Zarr store (local path or
        an fsspec URL the workers can reach); a store holding a group needs
        ``component``.
    component : str, optional
        Name of the array inside a Zarr group.

    Returns
    -------
    dask.array.Array
        Shape (n, d), columns in one chunk (rechunked if they were split).

    Raises
    ------
    ValueError
        If the input is not 2-D, has no columns, fewer than two rows, or a
        non-numeric dtype; if a Zarr path does not exist or lacks ``component``.
    """
    array = _to_dask(data, component)
    if array.ndim != 2:
        raise ValueError(
            f"X: expected a 2-D array (n records x d features), got {array.ndim} dimension(s) "
            f"with shape {array.shape}; Reshape your data, e.g. x.reshape(-1, 1) for one feature"
        )
    n, d = array.shape
    # The wording after the first clause is scikit-learn's, so that its conformance
    # checks (and users who know its messages) recognise the error.
    if d == 0:
        raise ValueError(f"X: has no columns (d = 0): 0 feature(s) (shape={array.shape}) while a "
                         "minimum of 1 is required.")
    if n < 2:
        raise ValueError(f"X: needs at least 2 records to form a pair, got n = {n} (n_samples = {n})")
    if np.issubdtype(array.dtype, np.complexfloating):
        raise ValueError(f"X: needs a real numeric dtype, got {array.dtype} (Complex data not supported)")
    # timedelta64 passes np.number (it subclasses signedinteger) but is not a measurement
    # on a real scale we may treat as coordinates; datetime64 is refused too.
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_) or array.dtype.kind in "mM":
        raise ValueError(f"X: needs a real numeric dtype, got {array.dtype}")
    if len(array.chunks[1]) != 1:
        array = array.rechunk({1: -1})
    return array


def _to_dask(data: Any, component: str | None) -> da.Array:
    if isinstance(data, da.Array):
        return data
    if isinstance(data, (str, os.PathLike)):
        return _open_zarr(os.fspath(data), component)
    zarr_array = _zarr_array_type()
    if zarr_array is not None and isinstance(data, zarr_array):
        return da.from_zarr(data)
    if _is_sparse(data):
        raise ValueError(
            f"X: sparse input is not supported (got {type(data).__name__}); pass a dense array, "
            "e.g. X.toarray(): every pairwise difference is dense anyway"
        )
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as error:  # ragged nested lists, unconvertible objects
        raise ValueError(
            f"X: cannot be read as a 2-D numeric array ({type(data).__name__}: {error})"
        ) from None
    if array.dtype == object:
        # Numbers held as Python objects (a pandas frame of mixed ints and floats, say)
        # are numbers; anything float() refuses is a type error, as in numpy.
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError) as error:
            raise TypeError(f"X: holds values that are not real numbers ({error})") from None
    if array.ndim == 2:
        return da.from_array(array, chunks=(default_block_rows(array.shape[1]), -1))
    return da.from_array(array)


def _is_sparse(data: Any) -> bool:
    """scipy.sparse matrices and arrays (checked without importing scipy.sparse first)."""
    import scipy.sparse

    return scipy.sparse.issparse(data)


def _open_zarr(location: str, component: str | None) -> da.Array:
    import zarr

    is_url = "://" in location
    if not is_url and not Path(location).exists():
        raise ValueError(f"X: Zarr store {location!r} does not exist")
    try:
        node = zarr.open(location, mode="r")
    except Exception as error:  # zarr raises several types for an unreadable store
        raise ValueError(f"X: cannot open {location!r} as a Zarr store ({error})") from None
    if isinstance(node, zarr.Array):
        if component is not None:
            raise ValueError(f"component: {location!r} holds a single array, not a group")
        return da.from_zarr(node)
    names = sorted(name for name, _ in node.arrays())
    if component is None:
        if len(names) == 1:
            return da.from_zarr(node[names[0]])
        raise ValueError(
            f"component: {location!r} is a Zarr group; name one of its arrays {names}"
        )
    if component not in names:
        raise ValueError(f"component: no array {component!r} in {location!r}; it holds {names}")
    return da.from_zarr(node[component])


def _zarr_array_type():
    try:
        import zarr
    except ImportError:  # pragma: no cover - zarr is a dependency
        return None
    return zarr.Array
