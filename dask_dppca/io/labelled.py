"""Labelled inputs: xarray DataArray / Dataset and dask DataFrame / Series, kept lazy.

Each becomes a row-chunked dask array from its own public API (``DataArray.chunk``,
``.data``, ``DataFrame.to_dask_array``), so nothing is computed or gathered on the
client.  A DataFrame's partition lengths (n is public, like a Zarr array's shape) are
counted where the fit computes, by one small task per partition, within the compute
target's bounded wait: the noise is calibrated from n before the fit, so a DataFrame
that is not persisted is read once for the lengths and once for the fit.

The modules are looked up in ``sys.modules``: an object can only be an xarray or dask
DataFrame object if its library is already imported, and the fit does not pay for
importing them otherwise.
"""

from __future__ import annotations

import sys
from typing import Any

import dask
import dask.array as da

from ..validation import is_real_numeric_dtype

__all__ = [
    "check_frame_dtypes",
    "frame_rows",
    "from_xarray",
    "is_dask_frame",
    "is_xarray",
    "optimized_frame",
]


def is_xarray(data: Any) -> bool:
    """An xarray DataArray or Dataset."""
    xr = sys.modules.get("xarray")
    return xr is not None and isinstance(data, (xr.DataArray, xr.Dataset))


def is_dask_frame(data: Any) -> bool:
    """A dask DataFrame or Series."""
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(data, (dd.DataFrame, dd.Series))


def from_xarray(data: Any, component: str | None) -> tuple[Any, bool]:
    """The rows of a DataArray (records x features), or of the Dataset variable
    ``component`` names, and whether they are in the input's own chunks.

    A DataArray chunked by Dask gives its dask array (its own chunks); one that is not
    (in memory, or a lazy backend array) gives one chunk, rows free to cut into the
    design's blocks.
    """
    import xarray as xr

    if isinstance(data, xr.Dataset):
        names = [str(name) for name in data.data_vars]
        if component is None:
            if len(names) != 1:
                raise ValueError(
                    "component: the xarray Dataset holds several variables; "
                    f"name the records with component=, one of {names}"
                )
            component = names[0]
        if component not in data.data_vars:
            raise ValueError(
                f"component: no variable {component!r} in the xarray Dataset; it holds {names}"
            )
        data = data[component]
    elif component is not None:
        raise ValueError(
            f"component: {component!r} names a variable of a Dataset; X is a DataArray"
        )
    if data.ndim != 2:
        raise ValueError(
            f"X: expected a 2-D DataArray (records x features), got dims {data.dims} with "
            f"shape {data.shape}"
        )
    if data.chunks is not None:
        return data.data, True
    # In memory or a lazy backend array: one chunk, cut later.
    records, features = data.dims
    return data.chunk({records: -1, features: -1}).data, False


def check_frame_dtypes(frame: Any) -> None:
    """Refuse a DataFrame (or Series) with a column that is not a real number."""
    import dask.dataframe as dd

    dtypes = (
        {frame.name: frame.dtype} if isinstance(frame, dd.Series) else dict(frame.dtypes.items())
    )
    bad = {
        str(name): str(dtype) for name, dtype in dtypes.items() if not is_real_numeric_dtype(dtype)
    }
    if bad:
        raise ValueError(f"X: the DataFrame's columns must be numeric; not numeric: {bad}")


def optimized_frame(frame: Any) -> Any:
    """``frame`` with its partitions as dask computes them (``optimize()``: small
    Parquet files fused into one partition), so that counted lengths match them.
    """
    optimize = getattr(frame, "optimize", None)
    return frame if optimize is None else optimize()


def frame_rows(frame: Any, target: Any) -> da.Array:
    """Rows of a dask DataFrame (or one column, a Series), partition lengths counted on
    ``target`` (``target.compute(collections, label)``, bounded), never on the client.
    """
    # The partitions as they are computed: dask may fuse a Parquet folder's small files
    # into fewer partitions than the frame states, and the lengths must be of those.
    frame = optimized_frame(frame)
    counts = [dask.delayed(len, pure=True)(part) for part in frame.to_delayed()]
    lengths = [int(length) for length in target.compute(counts, "counting the DataFrame's rows")]
    array = frame.to_dask_array(lengths=lengths)
    return array[:, None] if array.ndim == 1 else array
