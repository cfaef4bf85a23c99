"""Every supported input as a row-chunked 2-D dask array, checked on public metadata only.

Inputs: numpy arrays (and array-likes), dask arrays, Zarr (a path or fsspec URL, a
``zarr.Array``, ``zarr.Group`` or store object), xarray DataArray / Dataset, dask
DataFrame / Series.  Only public metadata (shape, dtype, chunking, names) is inspected
here: data values are never read, so a bad value can never raise (the kernel treats it,
see kernel.py), and lazy inputs stay lazy (nothing is computed on the client).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..validation import is_real_numeric_dtype
from .labelled import from_dask_frame, from_xarray, is_dask_frame, is_xarray
from .storage import check_storage_options
from .zarr_input import is_zarr_input, open_zarr_input

__all__ = ["as_dask_array", "default_block_rows", "is_lazy_input"]

#: Bytes aimed at per row block when the input does not choose its own chunks.
_TARGET_BLOCK_BYTES = 32 * 2**20
_MIN_BLOCK_ROWS = 1024
_MAX_BLOCK_ROWS = 16384


def default_block_rows(n_features: int) -> int:
    """Rows per block for inputs without their own chunking (numpy, array-likes)."""
    rows = _TARGET_BLOCK_BYTES // (8 * max(n_features, 1))
    return int(min(_MAX_BLOCK_ROWS, max(_MIN_BLOCK_ROWS, rows)))


def is_lazy_input(data: Any) -> bool:
    """Whether ``data`` is read lazily (dask, Zarr, xarray, dask DataFrame), not in memory."""
    return (isinstance(data, da.Array) or is_zarr_input(data) or is_xarray(data)
            or is_dask_frame(data))


def as_dask_array(
    data: Any,
    component: str | None = None,
    *,
    storage_options: dict | None = None,
    allow_fill_values: bool = False,
    scheduler: Any = None,
) -> da.Array:
    """Wrap any supported input as a row-chunked 2-D dask array.

    Parameters
    ----------
    data : ndarray, dask.array.Array, zarr.Array, zarr.Group, str, os.PathLike, \
xarray.DataArray, xarray.Dataset, dask DataFrame or Series
        The records, one per row.  A string or path names a Zarr store: a local path or
        an fsspec URL (``s3://``, ``gs://``, ``az://``, chained ``simplecache::s3://``).
        A Zarr store object or an fsspec mapper is opened like a path.
    component : str, optional
        The array inside a Zarr group (a nested path such as ``"sub/X"`` too), or the
        variable of an xarray Dataset.
    storage_options : dict, optional
        fsspec options for a URL (credentials, ``client_kwargs``); they travel to the
        workers inside the task graph and are never printed.
    allow_fill_values : bool, default=False
        Read chunks missing from a Zarr store as the array's fill value.  By default a
        missing chunk stops the fit on the worker that reads it (:class:`MissingChunkError`):
        Zarr would otherwise return fill values where the workers cannot see the store.
    scheduler : optional
        Where a dask DataFrame's partition lengths are counted (see ``DPPCA``).

    Returns
    -------
    dask.array.Array
        Shape (n, d), columns in one chunk (rechunked if they were split).

    Raises
    ------
    ValueError
        If the input is not 2-D, has no columns, fewer than two rows, or a non-numeric
        dtype; if a store does not exist, cannot be read, or lacks ``component``; for
        unsupported inputs (scipy sparse matrices) and misplaced ``storage_options``.
    """
    storage_options = check_storage_options(storage_options, data)
    array = _to_dask(data, component, storage_options, allow_fill_values, scheduler)
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
    if not is_real_numeric_dtype(array.dtype):
        raise ValueError(f"X: needs a real numeric dtype, got {array.dtype}")
    if len(array.chunks[1]) != 1:
        array = array.rechunk({1: -1})
    return array


def _to_dask(data, component, storage_options, allow_fill_values, scheduler) -> da.Array:
    if isinstance(data, da.Array):
        return data
    if is_zarr_input(data):
        return open_zarr_input(data, component, storage_options, allow_fill_values)
    if is_xarray(data):
        return from_xarray(data, component, default_block_rows)
    if is_dask_frame(data):
        return from_dask_frame(data, scheduler)
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
