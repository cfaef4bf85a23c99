"""Tables as curators keep them: Parquet and CSV files, read lazily by dask.dataframe.

A path or fsspec URL whose name ends in ``.parquet`` / ``.pq`` (a file, a folder of
files, a glob) or ``.csv`` (optionally compressed: ``.csv.gz``, ``.csv.bz2``,
``.csv.xz``, ``.csv.zst``) is read as a table; any other path is a Zarr store.  The
table stays lazy (partitions read in the workers' tasks, larger than memory), and only
its schema is read here: the column names and dtypes, which are public (like a Zarr
array's shape and dtype).  A Parquet file states them in its footer; a CSV file states
only names, so its dtypes are the ones dask infers from the first block of the file
(the layout the curator wrote), and every feature column is then read as float64:

* an empty field or ``nan`` is a missing value, a non-finite record (it counts in n and
  adds 0, docs/robustness.md), never an error;
* a field that does not parse as a number stops the read before any release, as a
  damaged Zarr chunk does (nothing is released, no budget is charged).

The features are the ``columns`` chosen (default: every column but the labels); a chosen
column that is not numeric is refused by name before anything else is read.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

from ..validation import is_real_numeric_dtype
from .storage import describe_error, display_location, is_url, missing_backend

__all__ = [
    "FORMATS_READ",
    "TABLE_TYPES",
    "Table",
    "open_table",
    "parse_columns",
    "table_columns",
    "table_format",
    "table_row_counts",
]

#: Name endings that make a path a table, by format.
_SUFFIXES = {
    "parquet": (".parquet", ".pq"),
    "csv": (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst"),
}
#: The formats read, as an error names them.
FORMATS_READ = (
    "Zarr (a store folder or URL), Parquet (.parquet, .pq: a file, a folder of files or "
    "a glob) and CSV (.csv, also .csv.gz, .csv.bz2, .csv.xz, .csv.zst)"
)
_GLOB_CHARACTERS = frozenset("*?[")
#: A table's input type (as its records and a result file name it) -> its format.
TABLE_TYPES = {"Parquet table": "parquet", "CSV table": "csv"}


@dataclass(frozen=True)
class Table:
    """A table opened lazily: its feature columns, and the labels' column if asked for.

    Attributes
    ----------
    frame : dask.dataframe.DataFrame
        The feature columns, in the order chosen.
    labels : dask.dataframe.Series or None
        The labels' column (``label_column``), None without one.
    location : str
        The location as it may be shown (secrets masked; a local path absolute).
    kind : str
        ``"parquet"`` or ``"csv"``.
    """

    frame: Any
    labels: Any
    location: str
    kind: str = "parquet"

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The feature columns' names, in order."""
        return tuple(str(name) for name in self.frame.columns)

    @property
    def input_type(self) -> str:
        """``"Parquet table"`` or ``"CSV table"`` (:data:`TABLE_TYPES`)."""
        return next(name for name, kind in TABLE_TYPES.items() if kind == self.kind)


def table_format(location: Any) -> str | None:
    """``"parquet"`` or ``"csv"`` for a path or URL that names a table, else None."""
    if not isinstance(location, (str, os.PathLike)):
        return None
    text = os.fspath(location).split("::")[-1].rstrip("/").lower()
    for kind, suffixes in _SUFFIXES.items():
        if text.endswith(suffixes):
            return kind
    return None


def parse_columns(text: str | None, flag: str = "--columns") -> list[str] | None:
    """``"a, b,c"`` as ``["a", "b", "c"]`` (None for None); an empty list is refused."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"{flag}: expected comma-separated column names, got {text!r}")
    return names


def open_table(
    location: str | os.PathLike,
    columns: list[str] | None = None,
    label_column: str | None = None,
    storage_options: dict | None = None,
) -> Table:
    """Open a Parquet or CSV table lazily: its schema now, its rows in the tasks.

    Parameters
    ----------
    location : str or os.PathLike
        A path or fsspec URL (a glob, and a folder of Parquet files, too).
    columns : list of str, optional
        The feature columns, in order (default: every column but ``label_column``).
    label_column : str, optional
        The column holding one group label per record (kept apart from the features).
    storage_options : dict, optional
        fsspec options for a URL.

    Returns
    -------
    Table

    Raises
    ------
    ValueError
        If the table does not exist or cannot be read, a named column is not in it, the
        label column is among the features, or a feature column is not numeric (all
        such columns named).
    """
    kind, text, shown, schema = _schema(location, storage_options)
    names = [str(name) for name in schema.columns]
    features = _features(names, columns, label_column, shown)
    try:
        _check_numeric(schema, features, shown)
    except ValueError:
        # A CSV's dtypes are inferred from its first rows: with none, every column is text.
        if kind == "csv" and _csv_has_no_rows(text, storage_options):
            raise ValueError(
                f"X: {shown!r} has no rows (a header line only): nothing to analyse"
            ) from None
        raise
    if kind == "csv":  # the features as float64 from here on (see the module's note)
        dtypes = dict.fromkeys(features, "float64")
        if label_column is not None:
            dtypes[label_column] = "object"  # labels as text: a CSV field is text
        frame = _read(kind, text, storage_options, shown, dtypes)
    else:
        frame = schema
    wanted = features + ([label_column] if label_column is not None else [])
    frame = frame[wanted]
    labels = None if label_column is None else frame[label_column]
    # One dtype for the rows (a bool and a float column would otherwise give objects).
    cast = {name: "float64" for name, dtype in frame.dtypes.items() if name in features}
    return Table(frame[features].astype(cast), labels, shown, kind)


def table_columns(
    location: str | os.PathLike, storage_options: dict | None = None
) -> list[tuple[str, str, bool]]:
    """Every column of a table as ``(name, dtype, numeric)``, from its schema only (public
    metadata: a Parquet footer, a CSV's header and inferred dtypes); for a column picker.

    Raises
    ------
    ValueError
        As :func:`open_table` does for a table that is missing or cannot be read.
    """
    schema = _schema(location, storage_options)[3]
    return [
        (str(name), str(dtype), bool(is_real_numeric_dtype(dtype)))
        for name, dtype in schema.dtypes.items()
    ]


def _schema(location: str | os.PathLike, storage_options: dict | None) -> tuple[str, str, str, Any]:
    """``(kind, text, shown, frame)``: the table's format, its absolute path or URL, how
    messages show it, and its lazy frame (the schema read, no row), checked to exist.
    """
    kind = table_format(location)
    if kind is None:
        raise ValueError(f"X: {display_location(location)!r} is not a table; read: {FORMATS_READ}")
    text = os.fspath(location)
    if not is_url(text):
        text = os.path.abspath(os.path.expanduser(text))  # the workers share no cwd
    shown = display_location(text)
    if not is_url(text):
        if not (glob.glob(text) if _GLOB_CHARACTERS & set(text) else os.path.exists(text)):
            raise ValueError(f"X: {shown!r} does not exist")
    return kind, text, shown, _read(kind, text, storage_options, shown, None)


def table_row_counts(table: Table) -> tuple[int, ...]:
    """The rows of each partition of ``table`` as dask computes it, in this process.

    Counted in one pass that reads one column (a Parquet file's one column chunk, a CSV's
    lines parsed for one field), in the partitions dask computes (small Parquet files
    fused into one): the rows' number is public, like a Zarr array's shape, and no value
    is kept.  Parquet footers state the counts too, but dask's partitions of them are
    known only through its private modules, which this package does not use.  This is
    what ``dask-dppca plan`` needs of a table; a fit counts on its cluster instead.

    Parameters
    ----------
    table : Table
        As :func:`open_table` returns it.

    Returns
    -------
    tuple of int
        One count per partition of ``optimize()``'d ``table.frame``.
    """
    from .labelled import optimized_frame

    return _counted_lengths(optimized_frame(table.frame))


def _counted_lengths(frame: Any) -> tuple[int, ...]:
    """Each partition's rows, counted in this process (one column parsed, if that keeps
    the partitions as they are).
    """
    import dask

    from .labelled import optimized_frame

    narrow = optimized_frame(frame[list(frame.columns[:1])])
    if narrow.npartitions != frame.npartitions:
        narrow = frame
    counts = [dask.delayed(len, pure=True)(part) for part in narrow.to_delayed()]
    return tuple(int(n) for n in dask.compute(*counts, scheduler="threads"))


def _read(kind: str, location: str, storage_options: dict | None, shown: str, dtypes):
    """The lazy frame (schema read, not the rows); a failure as one line naming it."""
    try:
        import dask.dataframe as dd
    except ImportError:
        raise ValueError(
            f"X: reading the table {shown!r} needs dask.dataframe: pip install 'dask-dppca[tables]'"
        ) from None
    options = {"storage_options": storage_options} if storage_options else {}
    try:
        if kind == "parquet":
            return dd.read_parquet(location, **options)
        compressed = not location.lower().rstrip("/").endswith(".csv")
        extra: dict[str, Any] = {"blocksize": None} if compressed else {}
        if dtypes is not None:
            extra["dtype"] = dtypes
        return dd.read_csv(location, **_exact_floats(), **extra, **options)
    except FileNotFoundError:
        raise ValueError(f"X: {shown!r} does not exist") from None
    except ImportError as error:
        if is_url(location):  # the URL's fsspec backend: name the extra that installs it
            raise ValueError(missing_backend(location, "X", error)) from None
        raise ValueError(f"X: reading {shown!r} needs {describe_error(error)}") from None
    except Exception as error:
        if _is_empty_data(error):  # pandas' EmptyDataError: not even a header line
            raise ValueError(
                f"X: {shown!r} is empty: a CSV table needs a header line naming its "
                "columns, then one record per line"
            ) from None
        raise ValueError(
            f"X: cannot read {shown!r} as {'Parquet' if kind == 'parquet' else 'CSV'} "
            f"({describe_error(error, storage_options)})"
        ) from None


def _is_empty_data(error: BaseException) -> bool:
    """Whether ``error`` is pandas' EmptyDataError (a file with no columns to parse),
    told by its class, without importing pandas (dask.dataframe's dependency).
    """
    return any(
        cls.__name__ == "EmptyDataError" and cls.__module__.startswith("pandas")
        for cls in type(error).__mro__
    )


def _csv_has_no_rows(location: str, storage_options: dict | None) -> bool:
    """Whether the (first) CSV file of ``location`` holds a header line and no record
    (blank lines are no records, as for the reader).

    Read only when its columns were refused as not numeric: dask infers a CSV's dtypes
    from its first rows, so a header-only file has text columns only.
    """
    import io

    import fsspec

    try:
        files = fsspec.open_files(
            location, mode="rb", compression="infer", **(storage_options or {})
        )
        if not files:
            return False
        with files[0] as stream:
            lines = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")
            lines.readline()  # the header
            return not any(line.strip() for line in lines)
    except Exception:  # unreadable here: the numeric check's message stands
        return False


def _exact_floats() -> dict[str, str]:
    """Before pandas 3, ``float_precision="round_trip"``: each number parsed as Python's
    ``float()`` parses it (the default parser could differ in the last bit, and then from
    the same data in Zarr); pandas 3 parses exactly by default and deprecates the option.
    """
    from importlib.metadata import version  # pandas itself: dask.dataframe's dependency

    return {"float_precision": "round_trip"} if int(version("pandas").split(".")[0]) < 3 else {}


def _features(
    names: list[str], columns: list[str] | None, label_column: str | None, shown: str
) -> list[str]:
    """The feature columns: those chosen, checked against the table's names."""
    asked = list(columns or []) + ([label_column] if label_column is not None else [])
    missing = [name for name in asked if name not in names]
    if missing:
        raise ValueError(f"columns: {missing} not in {shown!r}; its columns are {_listed(names)}")
    if columns is None:
        features = [name for name in names if name != label_column]
    else:
        duplicated = sorted({name for name in columns if columns.count(name) > 1})
        if duplicated:
            raise ValueError(f"columns: {duplicated} chosen more than once")
        if label_column is not None and label_column in columns:
            raise ValueError(
                f"columns: the group labels' column {label_column!r} cannot also be a feature"
            )
        features = list(columns)
    if not features:
        raise ValueError(f"columns: {shown!r} has no column left for the features")
    return features


def _check_numeric(frame: Any, features: list[str], shown: str) -> None:
    """Refuse, by name, the chosen feature columns that are not real numbers."""
    bad = {
        name: str(dtype)
        for name, dtype in frame.dtypes.items()
        if name in features and not is_real_numeric_dtype(dtype)
    }
    if bad:
        listed = ", ".join(f"{name!r} ({dtype})" for name, dtype in bad.items())
        raise ValueError(
            f"columns: not numeric in {shown!r}: {listed}; choose numeric features "
            "with columns=[...] (--columns a,b,c)"
        )


def _listed(names: list[str], limit: int = 20) -> str:
    """Column names for a message, a long list cut."""
    shown = ", ".join(repr(name) for name in names[:limit])
    return f"{shown}, ... ({len(names)} in all)" if len(names) > limit else shown
