"""Layer 2, inputs and outputs: where the records come from and where results go.

* :mod:`.arrays`: every supported input as a row-chunked dask array (the entry point,
  :func:`as_dask_array`), checked on public metadata only.
* :mod:`.zarr_input`: Zarr stores, groups and arrays, read in tasks that refuse missing
  chunks (:class:`MissingChunkError`) instead of inventing fill values; their reader
  (:func:`chunk_reader`) for blocks read inside the graph's tasks.
* :mod:`.labelled`: xarray and dask DataFrame inputs, kept lazy.
* :mod:`.storage`: fsspec URLs, storage options, secret-free one-line errors.
* :mod:`.output`: result files on a local path or any fsspec URL (:func:`write_json`).
"""

from .arrays import as_dask_array, default_block_rows, is_lazy_input
from .output import check_writable, write_json
from .zarr_input import MissingChunkError, chunk_reader

__all__ = ["MissingChunkError", "as_dask_array", "check_writable", "chunk_reader",
           "default_block_rows", "is_lazy_input", "write_json"]
