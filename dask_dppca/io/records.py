"""Every supported input as :class:`Records`: public metadata now, row blocks on demand.

Inputs: numpy arrays (and array-likes), dask arrays, Zarr (a path or fsspec URL, a
``zarr.Array``, ``zarr.Group`` or store object), xarray DataArray / Dataset, dask
DataFrame / Series; a Parquet or CSV path is a table (:mod:`.tables`).  An input's kind
is told once, from its type (and a path's name), by the first of ``_INPUT_KINDS`` that
matches; that kind's opener does the rest.  Only public metadata (shape, dtype,
chunking, names) is inspected here: data values are never read, so a bad value can
never raise (the kernel treats it, see dask_dppca.kernel), and lazy inputs stay lazy
(nothing is computed on the client).  How the rows are cut into blocks is the design's
decision (:func:`dask_dppca.design.plan_blocks`); :meth:`Records.blocks` then gives the
data in those blocks.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import dask.array as da
import numpy as np

from ..validation import is_real_numeric_dtype
from .labelled import frame_rows, from_xarray, is_dask_frame, is_xarray
from .storage import check_storage_options, display_location
from .tables import Table, open_table, table_format
from .zarr_input import is_zarr_input, open_zarr_input, read_in_blocks

__all__ = [
    "Records",
    "RowCounter",
    "check_unmasked",
    "is_lazy_input",
    "open_records",
    "records_of_table",
    "scale_rows",
]


def is_lazy_input(data: Any) -> bool:
    """Whether ``data`` is read lazily (dask, Zarr, a table, xarray, dask DataFrame), not
    in memory.
    """
    return _input_kind(data).lazy


class RowCounter(Protocol):
    """What :meth:`Records.counted` needs of a compute target: a bounded ``compute``."""

    def compute(self, collections: list, label: str) -> list:
        """Compute Dask collections, bounded, and return their values."""


@dataclass(frozen=True)
class Records:
    """The records of one input: public metadata, and the rows as Dask blocks on demand.

    Attributes
    ----------
    source : dask.array.Array or ndarray
        The rows: a lazy dask array in the input's own chunks, or a numpy array in
        memory (rows free to cut).
    location : str or None
        A store's location as it may be shown (a URL's user and password masked) and
        its array name; None for other inputs.
    input_type : str
        The input's type name.
    frame : object, optional
        A dask DataFrame or Series whose partition lengths are not counted yet.
    own_chunks : bool
        Whether the source's row chunks are the input's own (a dask array, a Zarr
        store); False for rows in memory or an xarray DataArray not chunked by Dask,
        which the design is free to cut.
    resident : dask.array.Array, optional
        The rows already cut into a plan's blocks and kept on the compute target
        (:meth:`with_resident`); :meth:`blocks` gives them for those block sizes.
    feature_names : tuple of str, optional
        The columns' names of a table or DataFrame input (public, like its dtypes).
    affine : (ndarray, ndarray), optional
        A released ``(centre, scale)`` per column (:meth:`scaled`): every read then gives
        ``(x - centre) / scale``, block by block (no second copy of the data).
    """

    source: Any
    location: str | None
    input_type: str
    frame: Any = None
    own_chunks: bool = True
    resident: Any = None
    feature_names: tuple[str, ...] | None = None
    affine: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def dataset(self) -> str:
        """What a ledger records as the data set: the location, or the input's type and
        (public) shape.  Never computed from the values.
        """
        if self.location is not None:
            return self.location
        return f"{self.input_type} {' x '.join(str(int(s)) if s == s else '?' for s in self.shape)}"

    @property
    def shape(self) -> tuple[int, int]:
        """(n, d); n is NaN for a DataFrame until :meth:`counted`."""
        return tuple(self.source.shape)

    @property
    def dtype(self) -> np.dtype:
        """The input's dtype (blocks are computed in float64)."""
        return self.source.dtype

    @property
    def row_chunks(self) -> tuple[int, ...] | None:
        """The input's own row chunks, or None when the rows are free to cut."""
        if self.in_memory or not self.own_chunks:
            return None
        return tuple(self.source.chunks[0])

    @property
    def array(self) -> da.Array:
        """The rows as a dask array in the input's own chunks (one chunk if in memory)."""
        if self.in_memory:
            return self._read(_in_memory(self.source, self.source.shape))
        return self._read(self.source)

    def scaled(self, centre: Any, scale: Any) -> Records:
        """These records read as ``(x - centre) / scale`` (released values, one per column).

        Every later read (:attr:`array`, :meth:`blocks`, rows kept on the workers
        included) applies it inside its block's task, in float64: a NaN stays NaN and an
        overflow gives +-inf, which the kernel treats as it treats any non-finite value.

        Parameters
        ----------
        centre, scale : array_like, shape (d,)
            Finite; ``scale > 0`` (a :class:`~dask_dppca.privacy.mechanisms.scale.RobustScaling`'s).
        """
        c = np.asarray(centre, dtype=np.float64).reshape(-1)
        s = np.asarray(scale, dtype=np.float64).reshape(-1)
        d = self.shape[1]
        if c.shape != (d,) or s.shape != (d,):
            raise ValueError(f"centre, scale: expected {d} values each, got {c.size}, {s.size}")
        if not (np.all(np.isfinite(c)) and np.all(np.isfinite(s)) and np.all(s > 0)):
            raise ValueError("centre, scale: must be finite, with every scale > 0")
        return replace(self, affine=(c, s))

    def _read(self, rows: da.Array) -> da.Array:
        """``rows`` as later stages read them: scaled when :attr:`affine` is set."""
        if self.affine is None:
            return rows
        centre, scale = self.affine
        scaled: da.Array = da.map_blocks(scale_rows, rows, centre, scale, dtype=np.float64)
        return scaled

    def counted(self, target: RowCounter) -> Records:
        """These records with a DataFrame's partition lengths counted on ``target``.

        n is public (like a Zarr array's shape) but a dask DataFrame does not know it;
        the lengths are counted where the fit computes, by one small task per partition,
        within the target's bounded wait.  Other inputs are returned as they are.
        """
        if self.frame is None:
            return self
        return replace(self, source=frame_rows(self.frame, target), frame=None)

    @property
    def in_memory(self) -> bool:
        """Whether the rows are a numpy array in this process (not read lazily)."""
        return isinstance(self.source, np.ndarray)

    def with_resident(self, blocks: da.Array) -> Records:
        """These records with ``blocks`` (their rows in a plan's blocks, e.g. persisted
        on the compute target) given by :meth:`blocks` for those block sizes: every pass
        of an analysis then reads the same blocks, the fit's included.
        """
        if tuple(blocks.shape) != tuple(self.shape) or len(blocks.chunks[1]) != 1:
            raise ValueError(
                f"blocks: expected shape {self.shape} with all columns in one chunk, got "
                f"{blocks.shape} in {len(blocks.chunks[1])} column chunks"
            )
        return replace(self, resident=blocks)

    def kept_on(self, target: Any, block_sizes: tuple[int, ...]) -> Records:
        """Rows in memory kept where ``target`` computes, cut into ``block_sizes``.

        Persisted from a graph that holds them (``target.persist``), not scattered: a
        worker lost mid-fit takes scattered data with it for good, while persisted blocks
        are computed again from their graph elsewhere (tests/system/test_drawn_once.py
        kills workers mid-fit).  The graph is sent once; the compute target keeps Dask's
        "Sending large graph" warning for it quiet.  Lazy records, and records already
        kept in these blocks, are returned as they are.
        """
        sizes = tuple(int(size) for size in block_sizes)
        if not self.in_memory or (
            self.resident is not None and tuple(self.resident.chunks[0]) == sizes
        ):
            return self
        # The rows as stored: a scaling is applied on every read of them.
        return self.with_resident(target.persist(replace(self, affine=None).blocks(sizes)))

    def blocks(self, block_sizes: tuple[int, ...]) -> da.Array:
        """The rows with one chunk per block of ``block_sizes`` and all columns in one."""
        return self._read(self._stored_blocks(tuple(block_sizes)))

    def _stored_blocks(self, block_sizes: tuple[int, ...]) -> da.Array:
        if self.resident is not None and tuple(self.resident.chunks[0]) == block_sizes:
            return self.resident
        if self.in_memory:
            return _in_memory(self.source, (block_sizes, -1))
        data = self.source
        if tuple(data.chunks[0]) == block_sizes and len(data.chunks[1]) == 1:
            return data
        # A Zarr store read in the blocks, one read per block; other inputs by a rechunk.
        merged = read_in_blocks(data, block_sizes)
        return merged if merged is not None else data.rechunk({0: block_sizes, 1: -1})


def scale_rows(block: np.ndarray, centre: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(block - centre) / scale`` in float64 (NaN stays NaN; an overflow is +-inf)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(block, dtype=np.float64) - centre) / scale


def open_records(
    data: Any,
    component: str | None = None,
    *,
    storage_options: dict | None = None,
    allow_fill_values: bool = False,
) -> Records:
    """Open any supported input as :class:`Records`, reading public metadata only.

    Parameters
    ----------
    data : ndarray, dask.array.Array, zarr.Array, zarr.Group, str, os.PathLike, \
xarray.DataArray, xarray.Dataset, dask DataFrame or Series
        The records, one per row.  A string or path names a Zarr store: a local path or
        an fsspec URL (``s3://``, ``gs://``, ``az://``, chained ``simplecache::s3://``);
        one ending in ``.parquet``, ``.pq`` or ``.csv`` names a table, all of whose
        columns are the features (:func:`~.tables.open_table` chooses some).
        A Zarr store object or an fsspec mapper is opened like a path.
    component : str, optional
        The array inside a Zarr group (a nested path such as ``"sub/X"`` too), or the
        variable of an xarray Dataset.
    storage_options : dict, optional
        fsspec options for a URL (credentials, ``client_kwargs``); they travel to the
        workers inside the task graph and are never printed.
    allow_fill_values : bool, default=False
        Read chunks missing from a Zarr store as the array's fill value.  By default a
        missing chunk stops the fit on the worker that reads it (:class:`.MissingChunkError`):
        Zarr would otherwise return fill values where the workers cannot see the store.

    Returns
    -------
    Records
        Shape (n, d).  A dask DataFrame's n is counted later, on the compute target
        (:meth:`Records.counted`).  Records opened before (``data`` a :class:`Records`)
        are returned as they are.

    Raises
    ------
    ValueError
        If the input is not 2-D, has no columns, fewer than two rows, or a non-numeric
        dtype; if a store does not exist, cannot be read, or lacks ``component``; for
        unsupported inputs (scipy sparse matrices) and misplaced ``storage_options``.
    """
    if isinstance(data, Records):  # opened once by the caller (an analysis): as they are
        if component is not None or storage_options:
            raise ValueError("component, storage_options: records are opened already")
        return data
    request = _Request(component, check_storage_options(storage_options, data), allow_fill_values)
    check_unmasked(data)
    return _input_kind(data).open(data, request)


@dataclass(frozen=True)
class _Request:
    """What :func:`open_records` was asked besides the input (see its parameters)."""

    component: str | None
    storage_options: dict | None
    allow_fill_values: bool


@dataclass(frozen=True)
class _InputKind:
    """One kind of input: how it is recognised, whether it is read lazily, how it opens.

    :func:`_input_kind` tells the kind of an input once; its ``open`` then does all that
    kind needs (``open(data, request)``: the :class:`Records`, public metadata only).
    """

    name: str
    matches: Callable[[Any], bool]
    open: Callable[[Any, _Request], Records]
    lazy: bool


def _records(
    data: Any,
    array: Any,
    *,
    location: str | None = None,
    frame: Any = None,
    own_chunks: bool = True,
    feature_names: tuple[str, ...] | None = None,
) -> Records:
    """The records of ``data`` whose rows are ``array``, once its shape and dtype pass."""
    _check_rows(array)
    if isinstance(array, da.Array) and len(array.chunks[1]) != 1:
        array = array.rechunk({1: -1})
    return Records(
        array,
        location,
        type(data).__name__,
        frame=frame,
        own_chunks=own_chunks,
        feature_names=feature_names,
    )


def _check_rows(array: Any) -> None:
    """Refuse rows that are not 2-D, have no column, fewer than two rows or a dtype that
    is not a real number (public metadata only).
    """
    if array.ndim != 2:
        raise ValueError(
            f"X: expected a 2-D array (n records x d features), got {array.ndim} dimension(s) "
            f"with shape {array.shape}; Reshape your data, e.g. x.reshape(-1, 1) for one feature"
        )
    n, d = array.shape
    # The wording after the first clause is scikit-learn's, so that its conformance
    # checks (and users who know its messages) recognise the error.
    if d == 0:
        raise ValueError(
            f"X: has no columns (d = 0): 0 feature(s) (shape={array.shape}) while a "
            "minimum of 1 is required."
        )
    if n == n and n < 2:  # NaN: a DataFrame's rows, counted later
        raise ValueError(
            f"X: needs at least 2 records to form a pair, got n = {n} (n_samples = {n})"
        )
    if np.issubdtype(array.dtype, np.complexfloating):
        raise ValueError(
            f"X: needs a real numeric dtype, got {array.dtype} (Complex data not supported)"
        )
    if not is_real_numeric_dtype(array.dtype):
        raise ValueError(f"X: needs a real numeric dtype, got {array.dtype}")


def _open_table(data: Any, request: _Request) -> Records:
    """A Parquet or CSV path: all its columns are the features."""
    if request.component is not None:
        raise ValueError(
            f"component: {request.component!r} names an array in a Zarr group; X is a table "
            "(choose its features with columns, --columns)"
        )
    return records_of_table(open_table(data, storage_options=request.storage_options))


def _open_dask_array(data: da.Array, request: _Request) -> Records:
    """A dask array: its own chunks, once its n is known."""
    if any(math.isnan(size) for size in data.shape):
        raise ValueError(
            f"X: a dask array with unknown chunk sizes (shape {data.shape}); n is "
            "public and must be known before the fit: call X.compute_chunk_sizes() "
            "first (or pass lengths=... to to_dask_array)"
        )
    return _records(data, data)


def _open_zarr(data: Any, request: _Request) -> Records:
    """A Zarr store, group or array, read in tasks that check every chunk exists."""
    array = open_zarr_input(
        data, request.component, request.storage_options, request.allow_fill_values
    )
    return _records(data, array, location=_location(data, request.component))


def _open_xarray(data: Any, request: _Request) -> Records:
    """An xarray DataArray or a Dataset's variable; rows free to cut unless Dask-chunked."""
    array, own_chunks = from_xarray(data, request.component)
    return _records(data, array, own_chunks=own_chunks)


def _open_dask_frame(data: Any, request: _Request) -> Records:
    """A dask DataFrame or Series: its n is counted later (:meth:`Records.counted`)."""
    names = tuple(str(name) for name in data.columns) if hasattr(data, "columns") else None
    return _records(data, _frame_placeholder(data), frame=data, feature_names=names)


def _refuse_sparse(data: Any, request: _Request) -> Records:
    """Scipy sparse input: refused."""
    raise ValueError(
        f"X: sparse input is not supported (got {type(data).__name__}); pass a dense array, "
        "e.g. X.toarray(): every pairwise difference is dense anyway"
    )


def _open_in_memory(data: Any, request: _Request) -> Records:
    """Anything else: read as a numpy array in this process (rows free to cut)."""
    return _records(data, _as_array(data))


def records_of_table(table: Table, *, counted: bool = False) -> Records:
    """The records of a table opened by :func:`~.tables.open_table` (its features).

    Parameters
    ----------
    table : Table
    counted : bool, default False
        Count the rows here (:func:`~.tables.table_row_counts`: one pass over one
        column), for a plan; by default a fit counts them on its cluster
        (:meth:`Records.counted`).
    """
    kind = table.input_type
    if counted:
        from .labelled import optimized_frame
        from .tables import table_row_counts

        lengths = table_row_counts(table)
        array = optimized_frame(table.frame).to_dask_array(lengths=list(lengths))
        return Records(array, table.location, kind, feature_names=table.feature_names)
    return Records(
        _frame_placeholder(table.frame),
        table.location,
        kind,
        frame=table.frame,
        feature_names=table.feature_names,
    )


def _in_memory(rows: np.ndarray, chunks: Any) -> da.Array:
    """Rows in memory as a dask array under a random name, not a digest of the rows:
    Dask's default name hashes the whole array (~1 ms a 1.5 MB array, a tenth of a
    one-thread fit's overhead around the kernel at 6000 x 32) and would put a digest of
    the records into every key the dashboard, the logs and the scheduler's events show.
    """
    return da.from_array(rows, chunks=chunks, name=False)


def check_unmasked(data: Any) -> None:
    """Refuse a numpy masked array (or a dask array of masked chunks): every conversion
    would drop its mask without a word, and the masked values would count as data.
    """
    if isinstance(data, np.ma.MaskedArray) or isinstance(
        getattr(data, "_meta", None), np.ma.MaskedArray
    ):
        raise ValueError(
            f"X: a masked array ({type(data).__name__} with a mask) is not accepted: its "
            "mask would be ignored; pass X.filled(np.nan) to treat masked entries as "
            "missing (a row with one is a non-finite record: it counts in n and adds 0, "
            "docs/robustness.md), or X.data to use the values under the mask"
        )


def _as_array(data: Any) -> np.ndarray:
    """Rows in memory (or an array-like) as a numpy array, its declared dtype checked."""
    _refuse_object_dtype(data)
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as error:  # ragged nested lists, unconvertible objects
        raise ValueError(
            f"X: cannot be read as a 2-D numeric array ({type(data).__name__}: {error})"
        ) from None
    if array.dtype == object:
        # A list (or other sequence) whose values numpy could not give one numeric dtype:
        # Python ints beyond float64's range, say.  Converted value by value, a number out
        # of range to +-inf (a non-finite record, docs/robustness.md) rather than an
        # OverflowError that a neighbouring data set would not raise.
        array = np.asarray(np.frompyfunc(_as_float, 1, 1)(array), dtype=np.float64)
    return array


def _refuse_object_dtype(data: Any) -> None:
    """Refuse an array or frame whose declared dtype is ``object``, before reading a value.

    Its values are arbitrary Python objects: converting them one by one fails or not
    depending on the values (``10**400`` overflows float64), so whether the fit runs
    would depend on the data.  The dtype is public metadata: refused whatever it holds.
    """
    dtypes = getattr(data, "dtypes", None)  # a pandas DataFrame: one dtype per column
    declared = list(dtypes) if dtypes is not None and np.ndim(dtypes) == 1 else []
    if hasattr(data, "dtype"):
        declared.append(data.dtype)
    if any(np.dtype(dtype) == object for dtype in declared if _is_numpy_dtype(dtype)):
        raise ValueError(
            f"X: an array of dtype object is refused ({type(data).__name__}); convert it to "
            "a numeric dtype first, e.g. np.asarray(X, dtype=float): object values are "
            "converted one by one, and one that does not convert would stop this fit "
            "and not a neighbouring one"
        )


def _is_numpy_dtype(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:  # a pandas extension dtype
        return False
    return True


def _as_float(value: Any) -> float:
    """``float(value)`` for a number, +-inf beyond float64's range, NaN for None (as
    numpy's ``astype(float)``); a TypeError otherwise.
    """
    if value is None:
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError) as error:
        raise TypeError(f"X: holds values that are not real numbers ({error})") from None


def _frame_placeholder(frame: Any) -> da.Array:
    """A DataFrame's rows with unknown partition lengths (metadata only, dtypes checked)."""
    from .labelled import check_frame_dtypes

    check_frame_dtypes(frame)
    array = frame.to_dask_array()
    return array[:, None] if array.ndim == 1 else array


def _location(data: Any, component: str | None) -> str | None:
    """A store's location as it may be shown, and its array name; None for other inputs."""
    if not isinstance(data, (str, os.PathLike)):
        return None
    name = display_location(data)
    return f"{name}#{component}" if component else name


def _is_sparse(data: Any) -> bool:
    """scipy.sparse matrices and arrays (only if scipy.sparse is imported: an object can
    only be one then, and telling a kind does not import it).
    """
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(data))


def _is_table(data: Any) -> bool:
    return table_format(data) is not None


def _any(data: Any) -> bool:
    return True


#: Every kind of input, in the order they are told apart (a table's path before a Zarr
#: store's: both are paths; anything else is read into memory).
_INPUT_KINDS = (
    _InputKind("table", _is_table, _open_table, lazy=True),
    _InputKind("dask array", lambda data: isinstance(data, da.Array), _open_dask_array, lazy=True),
    _InputKind("zarr", is_zarr_input, _open_zarr, lazy=True),
    _InputKind("xarray", is_xarray, _open_xarray, lazy=True),
    _InputKind("dask dataframe", is_dask_frame, _open_dask_frame, lazy=True),
    _InputKind("sparse", _is_sparse, _refuse_sparse, lazy=False),
    _InputKind("in memory", _any, _open_in_memory, lazy=False),
)


def _input_kind(data: Any) -> _InputKind:
    """The kind of ``data`` (:data:`_INPUT_KINDS`): told from its type and, for a path,
    its name; never from its values.
    """
    return next(kind for kind in _INPUT_KINDS if kind.matches(data))
