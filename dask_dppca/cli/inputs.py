"""The input of ``fit`` and ``analyze``: a Zarr store or a table, opened before any cluster.

Opening reads public metadata only (a store's shape and dtype, a table's columns and
dtypes), so a missing path or a text column among ``--columns`` fails in one line before
the split table prints and before a cluster starts; the opened records are then what the
fit reads (no second opening).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

#: What STORE may be, for the commands' help.
STORE_HELP = (
    "the records, one per row: a Zarr store holding an n x d array, or a Parquet (.parquet, "
    ".pq) or CSV (.csv) table; a local path or fsspec URL such as s3://bucket/data.zarr"
)


#: ``--storage-option``'s help for a command whose only URL is STORE.
STORE_OPTION_HELP = (
    "fsspec option for a STORE URL, repeatable (as for 'fit'); nested keys with dots"
)

#: ``--component``, for the commands' help.
COMPONENT_HELP = "array inside a Zarr group (nested paths: sub/X)"


def add_storage_arguments(
    parser: argparse.ArgumentParser, option_help: str, json_help: str
) -> None:
    """``--storage-option KEY=VALUE`` (repeatable) and ``--storage-options-json FILE``,
    with each command's own help (read by :func:`storage_options`).
    """
    parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", help=option_help
    )
    parser.add_argument("--storage-options-json", metavar="FILE", help=json_help)


def add_input_arguments(parser: argparse.ArgumentParser, option_help: str, stops: str) -> None:
    """STORE and the flags that say how to read it, alike for ``fit``, ``analyze`` and
    ``plan`` (each reads its input with :func:`open_input`): ``--component``,
    ``--columns``, the storage options (``option_help``: what they apply to) and
    ``--allow-fill-values`` (``stops``: what a missing chunk stops).
    """
    parser.add_argument("store", help=STORE_HELP)
    parser.add_argument("--component", help=COMPONENT_HELP)
    add_columns_argument(parser)
    add_storage_arguments(
        parser, option_help, "JSON object of fsspec options (--storage-option entries override it)"
    )
    parser.add_argument(
        "--allow-fill-values",
        action="store_true",
        help="read chunks missing from the store as its fill value (a store "
        f"written sparsely on purpose); by default a missing chunk stops {stops}",
    )


def input_storage_options(args: argparse.Namespace) -> dict:
    """The fsspec options of STORE (``--storage-option``, ``--storage-options-json``);
    refused for a local path, which takes none.
    """
    from ..io.storage import is_url

    options = storage_options(args.storage_options_json, args.storage_option)
    if options and not is_url(input_location(args.store)):
        raise ValueError(
            "--storage-option: fsspec options apply to a STORE URL (s3://, gs://, ...)"
        )
    return options


def storage_options(json_file: str | None, entries: list[str]) -> dict:
    """Fsspec options from ``--storage-options-json FILE`` and ``--storage-option K=V``.

    ``a.b=v`` sets ``{"a": {"b": v}}``; entries override the file's values.  Values are
    never echoed in errors (they may be secrets).
    """
    options: dict = {}
    if json_file is not None:
        try:
            with open(json_file) as stream:
                options = json.load(stream)
        except (OSError, ValueError) as error:
            raise ValueError(
                f"--storage-options-json: cannot read {json_file!r} "
                f"({type(error).__name__}: {error})"
            ) from None
        if not isinstance(options, dict):
            raise ValueError(
                f"--storage-options-json: {json_file!r} must hold a JSON object, "
                f"got {type(options).__name__}"
            )
    for entry in entries:
        key, sep, text = entry.partition("=")
        names = key.strip().split(".")
        if not sep or not all(names):
            raise ValueError(
                "--storage-option: expected KEY=VALUE with a non-empty KEY "
                "(nested: client_kwargs.endpoint_url=URL)"
            )
        level = options
        for depth, name in enumerate(names[:-1]):
            level = level.setdefault(name, {})
            if not isinstance(level, dict):
                raise ValueError(
                    f"--storage-option: {'.'.join(names[: depth + 1])!r} is "
                    "already set to a value, not a group of options"
                )
        level[names[-1]] = _option_value(text)
    return options


def _option_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def shares(entries: list[str]) -> dict[str, float] | None:
    """The stages' public shares that ``--split STAGE=SHARE`` entries give (None: none).

    Parameters
    ----------
    entries : list of str
        The ``--split`` entries, each ``STAGE=SHARE`` (a later one for the same stage wins).

    Returns
    -------
    dict or None
        Share by stage name, as given (the analysis renormalises them); None when
        ``entries`` is empty (the default split).

    Raises
    ------
    ValueError
        If an entry is not ``STAGE=SHARE`` with a number for SHARE.
    """
    if not entries:
        return None
    split: dict[str, float] = {}
    for entry in entries:
        stage, sep, value = entry.partition("=")
        try:
            split[stage.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(f"--split: expected STAGE=SHARE, got {entry!r}")
    return split


def add_stage_arguments(parser: Any, group_of: Any = None) -> None:
    """``--scale robust|none`` and one ``--NAME`` flag per other optional registered stage
    (``analyze``, and ``plan --analysis`` to plan the same run); ``group_of(name)``, when
    given, is the help's group of the stage ``name`` (else ``parser``).
    """
    from ..analysis.stages import SCALINGS, optional_stages

    def group(name: str) -> Any:
        found = None if group_of is None else group_of(name)
        return parser if found is None else found

    group("scale").add_argument(
        "--scale",
        choices=SCALINGS,
        default="none",
        help="robust: first release a private centre (median) and scale (quantile range) "
        "per column and analyse the scaled columns, for a table whose columns are in "
        "different units; none (default): the data as they are (a notice says when one "
        "column carries a whole direction)",
    )
    for info in optional_stages():
        if info.name != "scale":  # its own --scale robust|none above
            group(info.name).add_argument(
                f"--{info.name.replace('_', '-')}",
                action="store_true",
                help=f"also release {info.help}",
            )


def chosen_stages(args: argparse.Namespace) -> list[str]:
    """The optional stages the flags of :func:`add_stage_arguments` ask for (not the scale:
    ``args.scale``).
    """
    from ..analysis.stages import optional_stages

    return [
        info.name for info in optional_stages() if info.name != "scale" and getattr(args, info.name)
    ]


def add_columns_argument(parser: argparse.ArgumentParser) -> None:
    """``--columns A,B,C``: the features of a table."""
    parser.add_argument(
        "--columns",
        metavar="A,B,C",
        help="the feature columns of a Parquet or CSV table, comma-separated (default: all "
        "its columns but --groups); each must be numeric",
    )


def input_location(store: str) -> str:
    """STORE as given, ``~`` expanded for a local path (never inside a URL)."""
    from ..io.storage import is_url

    return store if is_url(store) else os.path.expanduser(store)


def open_input(
    args: argparse.Namespace,
    storage_options: dict | None = None,
    label_column: str | None = None,
    count_rows: bool = False,
) -> tuple[Any, Any]:
    """``(records, labels)`` of STORE: labels from ``label_column`` of a table, else None.

    Parameters
    ----------
    args : argparse.Namespace
        ``store``, ``component``, ``columns`` and (``fit``) ``allow_fill_values``.
    storage_options : dict, optional
        fsspec options for a URL.
    label_column : str, optional
        The column of a table holding the group labels (``analyze --groups COLUMN``).
    count_rows : bool, default False
        Count a table's rows here (``plan``: one pass over one column); by default the
        fit counts them on its cluster.
    """
    from ..io.tables import parse_columns

    return open_location(
        args.store,
        component=args.component,
        columns=parse_columns(getattr(args, "columns", None)),
        storage_options=storage_options,
        label_column=label_column,
        count_rows=count_rows,
        allow_fill_values=getattr(args, "allow_fill_values", False),
    )


def open_location(
    store: str,
    *,
    component: str | None = None,
    columns: list[str] | None = None,
    storage_options: dict | None = None,
    label_column: str | None = None,
    count_rows: bool = False,
    allow_fill_values: bool = False,
) -> tuple[Any, Any]:
    """``(records, labels)`` of ``store``: the one way the commands and the app read an
    input (a table through :func:`~dask_dppca.io.tables.open_table`, else a Zarr store).

    Parameters are those of :func:`open_input`, given one by one (``columns`` as a
    list).  Labels come from ``label_column`` of a table, else None.
    """
    from ..io import open_records
    from ..io.records import records_of_table
    from ..io.tables import open_table, table_format

    location = input_location(store)
    if table_format(location) is not None:
        if component is not None:
            raise ValueError("--component: names an array in a Zarr group; STORE is a table")
        table = open_table(location, columns, label_column, storage_options)
        return records_of_table(table, counted=count_rows), table.labels
    if columns is not None:
        raise ValueError(
            "--columns: chooses the features of a Parquet or CSV table; STORE is read as a "
            "Zarr store"
        )
    records = open_records(
        location,
        component,
        storage_options=storage_options,
        allow_fill_values=allow_fill_values,
    )
    return records, None
