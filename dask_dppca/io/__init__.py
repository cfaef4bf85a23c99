"""Layer 3, inputs and outputs: where the records come from and where results go.

* :mod:`.records`: every supported input as :class:`.Records` (the entry point,
  :func:`.open_records`), checked on public metadata only; its blocks on demand.
* :mod:`.zarr_input`: Zarr stores, groups and arrays, read in tasks that refuse missing
  chunks (:class:`.MissingChunkError`) instead of inventing fill values; their reader
  (:func:`.chunk_reader`) for blocks read inside the graph's tasks.
* :mod:`.labelled`: xarray and dask DataFrame inputs, kept lazy.
* :mod:`.tables`: Parquet and CSV tables (a path or URL), read lazily by dask.dataframe,
  their feature columns chosen and checked by name.
* :mod:`.storage`: fsspec URLs, storage options, secret-free one-line errors.
* :mod:`.output`: result files on a local path or any fsspec URL (:func:`.write_json`).
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

#: Public name -> the submodule defining it (imported on first use: :mod:`dask_dppca.lazy`).
_EXPORTS = {
    "check_writable": ".output",
    "write_json": ".output",
    "Records": ".records",
    "is_lazy_input": ".records",
    "open_records": ".records",
    "CorruptChunkError": ".zarr_blocks",
    "MissingChunkError": ".zarr_blocks",
    "chunk_reader": ".zarr_input",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .output import check_writable, write_json
    from .records import Records, is_lazy_input, open_records
    from .zarr_blocks import CorruptChunkError, MissingChunkError
    from .zarr_input import chunk_reader

__all__ = [
    "CorruptChunkError",
    "MissingChunkError",
    "Records",
    "check_writable",
    "chunk_reader",
    "is_lazy_input",
    "open_records",
    "write_json",
]
