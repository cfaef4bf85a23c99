"""The app's data section: a store or a table opened as ``dask-dppca analyze`` opens it.

A table (Parquet, CSV) is read through :func:`~dask_dppca.cli.inputs.open_location`, the
commands' one way to read an input: its numeric columns offered as features (a column
picker), any column as the groups; a Zarr store with its array name.  Opening reads
public metadata only; every failure is one line on the page.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable
from typing import Any

import panel as pn

from .shown import NO_GROUPS, one_line, text_of

__all__ = ["StoreInputs"]


class StoreInputs:
    """The page's data inputs and their opening (a part of :class:`~.page.AppPage`)."""

    error: Any
    k: Any
    records_meta: dict[str, Any] | None
    _syncing: bool
    _schema_of: str | None
    _asked_columns: str | None
    _text_columns: list[str]
    _show_cost: Callable[[], None]  # the page's own (AppPage._show_cost)

    def _data_widgets(self, store: str | None, component: str | None) -> None:
        """The ledger line and the store's inputs."""
        w = pn.widgets
        self.remaining = pn.pane.HTML("", css_classes=["dp-remaining"], sizing_mode="stretch_width")
        self.store = w.TextInput(
            label="Store (path or URL: Zarr, Parquet .parquet/.pq, CSV .csv)",
            value=store or "",
            css_classes=["dp-store"],
        )
        self.options = w.TextInput(
            label="Storage options (JSON, optional)", value="", css_classes=["dp-options"]
        )
        self.component = w.TextInput(
            label="Array in a Zarr group (optional)",
            value=component or "",
            css_classes=["dp-component"],
        )
        self.columns_title = pn.pane.HTML(
            "<b>Feature columns</b> (numeric; a text column can only hold groups)",
            css_classes=["dp-columns-title"],
            visible=False,
        )
        self.columns = w.CheckBoxGroup(
            options=[], value=[], inline=True, css_classes=["dp-columns"], visible=False
        )
        self.group_column = w.Select(
            label="Groups: a column of the table (its labels)",
            options=[NO_GROUPS],
            value=NO_GROUPS,
            css_classes=["dp-group-column"],
            visible=False,
        )
        self.group_labels = w.TextInput(
            label="Groups (optional): a label array of the store's Zarr group, or its path",
            value="",
            css_classes=["dp-group-labels"],
        )
        self.group_domain = w.TextInput(
            label="Group domain: the PUBLIC labels, comma-separated (others count as 'other')",
            value="",
            css_classes=["dp-group-domain"],
        )
        self.open_button = w.Button(label="Open store", color="primary", css_classes=["dp-open"])
        self.store_info = pn.pane.HTML("<i>No store open.</i>", css_classes=["dp-store-info"])

    def _storage_options(self) -> dict | None:
        text = text_of(self.options)
        if not text:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"storage options: not JSON ({error.msg})") from None
        if not isinstance(value, dict):
            raise ValueError("storage options: expected a JSON object")
        return value

    def _is_table(self) -> bool:
        from ..io.tables import table_format

        return table_format(text_of(self.store)) is not None

    def _group_column(self) -> str | None:
        value = self.group_column.value
        return None if not self._is_table() or value in (None, NO_GROUPS) else str(value)

    def _open_input(self) -> tuple[Any, Any]:
        """``(records, labels)`` as ``dask-dppca analyze`` reads them (one way to read a
        table: :func:`~dask_dppca.cli.inputs.open_location`); metadata only.
        """
        from ..cli.inputs import open_location

        path = text_of(self.store)
        if not path:
            raise ValueError("store: enter a path or URL")
        table = self._is_table()
        return open_location(
            path,
            component=None if table else (text_of(self.component) or None),
            columns=list(self.columns.value) if table else None,
            storage_options=self._storage_options(),
            label_column=self._group_column(),
        )

    def _load_schema(self) -> None:
        """A table's columns into the picker (numeric ones as features; every one may hold
        the groups), the first time this table is opened.
        """
        from ..io.tables import parse_columns, table_columns

        path = text_of(self.store)
        if self._schema_of == path:
            return
        columns = table_columns(os.path.expanduser(path), self._storage_options())
        numeric = [name for name, _, ok in columns if ok]
        asked = parse_columns(self._asked_columns) if self._asked_columns else None
        self._asked_columns = None
        if asked is not None:
            unknown = [name for name in asked if name not in numeric]
            if unknown:
                raise ValueError(
                    f"columns: {unknown} are not numeric columns of the table; its numeric "
                    f"columns are {numeric}"
                )
        self._syncing = True
        try:
            self.columns.options = numeric
            self.columns.value = asked if asked is not None else numeric
            self.group_column.options = [NO_GROUPS] + [name for name, _, _ in columns]
            self.group_column.value = NO_GROUPS
        finally:
            self._syncing = False
        self._schema_of = path
        self._text_columns = [f"{name} ({dtype})" for name, dtype, ok in columns if not ok]

    def _open(self, *_: Any) -> None:
        self.error.object = ""
        try:
            table = self._is_table()
            if table:
                self._load_schema()
            else:
                self._schema_of = None
            for widget in (self.columns_title, self.columns, self.group_column):
                widget.visible = table
            self.group_labels.visible = self.component.visible = not table
            self._open_records()
        except Exception as error:  # one clear line on the page, whatever went wrong
            self._not_open(error)

    def _reopen_table(self) -> None:
        """The picker changed: the table again with its new features (metadata only)."""
        if self._syncing or self._schema_of is None:
            return
        self.error.object = ""
        if self.group_column.value in self.columns.value:  # a group column is no feature
            self._syncing = True
            try:
                self.columns.value = [c for c in self.columns.value if c != self.group_column.value]
            finally:
                self._syncing = False
        try:
            self._open_records()
        except Exception as error:
            self._not_open(error)

    def _not_open(self, error: BaseException) -> None:
        self.records_meta = None
        line = html.escape(one_line(error))
        self.error.object = line
        self.store_info.object = f"<span class='dp-error'>Not opened: {line}</span>"
        self._show_cost()

    def _open_records(self) -> None:
        records, _ = self._open_input()
        n, d = records.shape
        known = n == n  # a lazy table's rows are counted on the cluster, at the release
        chunks = records.row_chunks if known else None
        names = records.feature_names
        self.records_meta = {
            "n": int(n) if known else None,
            "d": int(d),
            "dataset": records.dataset,
            "feature_names": list(names) if names else None,
        }
        self.k.end = int(d)
        rows = (
            f"<span class='dp-n'>n = {int(n)}</span> records"
            if known
            else "<span class='dp-n'>n: counted on the cluster at the release</span> (a "
            "table's rows are not read to open it)"
        )
        text_columns = getattr(self, "_text_columns", []) if self._is_table() else []
        self.store_info.object = (
            f"<b>{html.escape(records.dataset)}</b>: {rows}, "
            f"<span class='dp-d'>d = {int(d)}</span> features"
            + (f" ({html.escape(', '.join(names))})" if names else "")
            + (f", {len(chunks)} row chunks" if chunks else "")
            + (
                f"; text columns (groups only): {html.escape(', '.join(text_columns))}"
                if text_columns
                else ""
            )
            + " (public metadata; nothing read yet)"
        )
        self._show_cost()
