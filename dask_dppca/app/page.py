"""The app's page (Panel): open a store, release under the ledger, explore for free.

One :class:`AppPage` per visitor; the ledger (a file, shared by every page and every
process) is the one source of what was spent and what remains, read again after every
release.  A release runs :func:`~dask_dppca.analysis.run.analyze` in a worker thread (the
page stays responsive, one release at a time per page) inside the ledger's budget, so
the library's own checks refuse anything that does not fit before any data is read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import math
import os
import time
from typing import Any

import numpy as np
import panel as pn

from ..analysis.loadings import loadings_html
from ..analysis.report import (
    further_stage_sections,
    privacy_table_html,
    render_report,
    score_map_figures,
    score_map_of,
    scree_figures,
)
from ..analysis.result import pve_topk
from ..analysis.run import check_charge, planned_split
from ..analysis.stages import REGISTRY, optional_stages
from ..io.storage import display_location
from ..privacy.budget import BudgetExceededError, PrivacyBudget
from ..privacy.notices import notes_html
from .releases import ReleaseStore, releases_folder

__all__ = ["AppPage"]

#: Line colours of the scree plots (post-processing).
PALETTES = {
    "default": None,
    "colour-blind safe": ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"],
    "greys (print)": ["#000000", "#555555", "#888888", "#bbbbbb", "#333333", "#777777"],
}
KINDS = {"scree values": "scree", "PVE (top k)": "pve_topk", "PVE (all d)": "pve_total"}
FREE = (
    "Post-processing of the stored release: choosing k, PVE or scree values, colours, "
    "synthetic points, groups and merged bins re-render what was released and spend NO "
    "privacy budget."
)
_TABLE_CSS = """
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #bbb;padding:2px 5px;text-align:left;vertical-align:top}
th{background:#f0f0f4}tr.total td{font-weight:bold;background:#f7f7fa}
"""
_CSS = """
.dp-remaining{font-size:1.05rem}
.dp-error{color:#b00020;font-weight:bold}
.dp-free{color:#1a6b1a}
"""


def one_line(error: BaseException) -> str:
    """An error as one clear line (its first line, prefixed by a short kind)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, BudgetExceededError):
        return f"Refused, nothing charged: {text}"
    if isinstance(error, ValueError):
        return f"Check the inputs: {text}"
    return f"{type(error).__name__}: {text}"


def refusal_line(error: BaseException, budget: PrivacyBudget, epsilon: float, delta: float) -> str:
    """A ledger refusal in the ledger's terms first (what this analysis costs, what the
    ledger has room for), the check's own detail after.
    """
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    room = budget.remaining()
    return (
        f"Refused, nothing charged: this analysis costs epsilon={epsilon:g} at delta={delta:g} "
        f"(all its parts composed exactly), but the ledger (total epsilon={budget.epsilon:g}, "
        f"delta={budget.delta:g}) has room for one more release of at most "
        f"epsilon={room:.6g} at delta={budget.delta:g}. Lower epsilon to at most that, or "
        f"raise delta. (Ledger check: {detail})"
    )


def _text(widget: Any) -> str:
    return str(widget.value or "").strip()


def _number(widget: Any, name: str) -> float:
    if widget.value is None:
        raise ValueError(f"{name}: enter a number")
    value = float(widget.value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: enter a number (the field is empty or not a number)")
    return value


def bounded_pve(values: Any) -> tuple[list[float] | None, str | None]:
    """PVE over all d as shares a reader can believe (post-processing of released values).

    The released shares are clipped scree values over a private trace, both noisy: a
    share can exceed 1 and their sum can too.  Each is clipped to [0, 1]; when they then
    add up to more than 1 they are rescaled to sum to 1.  Returns the shares and a note
    saying what was changed (None when nothing was).
    """
    if values is None:
        return None, None
    raw = np.asarray(list(values), dtype=np.float64)
    shares = np.clip(np.nan_to_num(raw, nan=0.0), 0.0, 1.0)
    total = float(shares.sum())
    note = None
    if total > 1.0:
        shares = shares / total
        note = (
            f"The released shares summed to {float(np.nansum(raw)):.2f} of the private trace "
            "(both are noisy: the trace came out below the top components' values); shown "
            "clipped to [0, 1] and rescaled to sum to 1."
        )
    elif not np.array_equal(shares, raw):
        note = "Shares outside [0, 1] (noise) are shown clipped to [0, 1]."
    return shares.tolist(), note


def first_k(result: Any, k: int) -> Any:
    """The release shown with its first ``k`` components (post-processing; the PVE over
    all d bounded first, over every released component: :func:`bounded_pve`).
    """
    k = max(1, min(int(k), result.directions.shape[0]))
    values = {m: list(v)[:k] for m, v in result.scree["values"].items()}
    scree = dict(result.scree, values=values)
    scree["pve_topk"] = pve_topk(values)
    if result.scree.get("pve_total") is not None:
        scree["pve_total"] = (bounded_pve(result.scree["pve_total"])[0] or [])[:k]
    return dataclasses.replace(result, directions=result.directions[:k], scree=scree)


def analyses_of(budget: PrivacyBudget) -> list[tuple[str, list[dict[str, Any]]]]:
    """The ledger's rows that count as spent, grouped by analysis (one press of Release
    is one analysis of several parts: rows whose fit ids share the analysis id).
    """
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in budget.as_dict()["releases"]:
        if row.get("state") not in ("reserved", "committed"):
            continue
        key = str(row.get("fit_id") or row.get("id")).split(".")[0] or str(row.get("id"))
        grouped.setdefault(key, []).append(row)
    return list(grouped.items())


def merge_bins(score_map: Any, factor: int) -> Any:
    """The score map with ``factor x factor`` blocks of cells merged (post-processing).

    Each merged cell's noisy count is the sum of its cells' (the out-of-frame cell and
    the group sizes are kept); an additive histogram's per-entry sigma becomes
    ``factor`` times its own (a sum of ``factor**2`` independent noises).  ``factor``
    must divide both bin counts.
    """
    from ..privacy.histogram import NoisyHistogram

    factor = int(factor)
    if factor == 1 or score_map is None:
        return score_map
    merged = {}
    for name, hist in score_map.histograms.items():
        mx, my = hist.bins
        if mx % factor or my % factor:
            raise ValueError(f"merge: {factor} does not divide the bins {mx} x {my}")
        groups = hist.counts.shape[0]
        cells = hist.counts[:, : mx * my].reshape(
            groups, my // factor, factor, mx // factor, factor
        )
        counts = np.concatenate(
            [cells.sum(axis=(2, 4)).reshape(groups, -1), hist.counts[:, -1:]], axis=1
        )
        sigma = None if hist.sigma is None else hist.sigma * factor
        merged[name] = NoisyHistogram(counts, (mx // factor, my // factor), hist.method, sigma)
    return dataclasses.replace(score_map, histograms=merged)


def merge_choices(score_map: Any) -> dict[str, int]:
    """The merge factors that divide every histogram's bins, labelled for a menu."""
    if score_map is None:
        return {"none": 1}
    mx, my = score_map.bins
    return {
        (
            f"none ({mx} x {my} map)"
            if f == 1
            else f"{f} x {f} cells into one ({mx // f} x {my // f} map)"
        ): f
        for f in range(1, min(mx, my) + 1)
        if mx % f == 0 and my % f == 0
    }


#: Why the page offers the scale stage (shown beside the choice).
SCALE_WHY = (
    "robust: first release a private centre (median) and scale (quantile range) per "
    "column, at the scale share, and analyse the scaled columns. Choose it for a table "
    "whose columns are in different units (age in years, income in currency, hours): "
    "without it PC1 follows the column with the largest numbers (income alone, say), "
    "not a pattern across columns. none: the columns as they are (one unit, e.g. "
    "pixels or sensors)."
)
NO_GROUPS = "(no groups)"


class AppPage:
    """One visitor's page.

    Parameters
    ----------
    ledger : str, optional
        The ledger file charged by every release (releases kept beside it).
    store : str, optional
        A store to open at once.
    scheduler : optional
        As for :func:`~dask_dppca.analysis.run.analyze` (default: the embedded cluster).
    epsilon, delta : float
        Totals of the in-memory budget used when no ledger is given.
    budget, releases : optional
        Without a ledger: the in-memory budget and release store to share (one per
        server, so that a reload of the page cannot start a fresh budget).
    columns : str, optional
        A table's feature columns, comma-separated (as ``--columns``).
    component : str, optional
        The array in a Zarr group (as ``--component``).
    """

    def __init__(
        self,
        ledger: str | None = None,
        store: str | None = None,
        *,
        scheduler: Any = None,
        epsilon: float = 3.0,
        delta: float = 1e-5,
        budget: PrivacyBudget | None = None,
        releases: ReleaseStore | None = None,
        columns: str | None = None,
        component: str | None = None,
    ) -> None:
        pn.extension(raw_css=[_CSS], notifications=False)
        self.scheduler = scheduler
        if ledger is not None:
            self.budget = PrivacyBudget.open(ledger)
            self.releases = ReleaseStore(releases_folder(ledger))
        else:  # shared by every page of one server (serve): a reload cannot reset it
            self.budget = budget if budget is not None else PrivacyBudget(epsilon, delta)
            self.releases = releases if releases is not None else ReleaseStore(None)
        self.session: list[str] = []
        self.current: Any = None
        self.records_meta: dict[str, Any] | None = None
        self.seed = 0
        self._busy = False
        self._syncing = False
        self._schema_of: str | None = None  # the table whose columns the picker lists
        self._asked_columns = columns

        self._data_widgets(store, component)
        self._release_widgets()
        self._explore_widgets()
        self.open_button.on_click(self._open)
        self.release_button.on_click(self._release)
        self.reopen.on_click(self._reopen)
        self.resample.on_click(self._resample)
        for priced in (self.k, self.epsilon, self.delta, self.scale, *self.shares.values()):
            priced.param.watch(lambda _: self._show_cost(), "value")
        for picked in (self.columns, self.group_column):
            picked.param.watch(lambda _: self._reopen_table(), "value")
        for grouping in (self.group_labels, self.group_domain):
            grouping.param.watch(lambda _: self._show_cost(), "value")
        for free in (self.show_k, self.kind, self.palette, self.groups, self.merge):
            free.param.watch(lambda _: self._render(), "value")
        self._refresh_budget()
        self._refresh_past()
        self._show_cost()
        if store:
            self._open()

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

    def _release_widgets(self) -> None:
        """The next release's parameters: k, the total, a share per stage, the button."""
        w = pn.widgets
        self.k = w.IntInput(label="k (components)", value=2, start=1, css_classes=["dp-k"])
        self.epsilon = w.FloatInput(
            label="epsilon of this release (total)",
            value=1.0,
            start=0.0,
            css_classes=["dp-epsilon"],
        )
        self.delta = w.FloatInput(
            label="delta of this release (total)", value=1e-6, start=0.0, css_classes=["dp-delta"]
        )
        self.scale = w.RadioButtonGroup(
            options=["none", "robust"], value="none", css_classes=["dp-scale"]
        )
        self.scale_why = pn.pane.HTML(
            f"<small>{html.escape(SCALE_WHY)}</small>", css_classes=["dp-scale-why"]
        )
        # One share per registered stage (an optional one at 0: not run unless given a share;
        # the scale stage's runs with scale = robust).
        self.shares = {
            info.name: w.FloatInput(
                label=f"share: {info.title}",
                value=0.0 if info.optional and info.name != "scale" else info.default_share,
                start=0.0,
                width=120,
                css_classes=[f"dp-share-{info.name.split('_')[-1]}"],  # dp-share-map, ...
            )
            for info in REGISTRY
        }
        self.cost = pn.pane.HTML("", css_classes=["dp-cost"], sizing_mode="stretch_width")
        self.release_button = w.Button(
            label="Release (spends the budget above)",
            color="danger",
            css_classes=["dp-release"],
            disabled=True,
        )
        self.release_why = pn.pane.HTML("", css_classes=["dp-release-why"])
        self.progress = pn.indicators.Progress(
            active=False, visible=False, sizing_mode="stretch_width", css_classes=["dp-progress"]
        )
        self.status = pn.pane.HTML("", css_classes=["dp-status"])
        self.error = pn.pane.HTML("", css_classes=["dp-error"], sizing_mode="stretch_width")

    def _explore_widgets(self) -> None:
        """The free exploration of a release: what is shown, and how."""
        w = pn.widgets
        self.free_note = pn.pane.HTML(f"<p>{html.escape(FREE)}</p>", css_classes=["dp-free"])
        self.show_k = w.Select(
            label="k shown (of those released)",
            options=[1, 2],
            value=2,
            width=160,
            css_classes=["dp-show-k"],
        )
        self.kind = w.RadioButtonGroup(
            options=list(KINDS), value="scree values", css_classes=["dp-kind"]
        )
        self.palette = w.Select(
            label="colours", options=list(PALETTES), value="default", css_classes=["dp-palette"]
        )
        self.resample = w.Button(label="Re-sample synthetic points", css_classes=["dp-resample"])
        self.groups = w.Checkbox(
            label="groups (of the released map)", value=True, css_classes=["dp-groups"]
        )
        self.merge = w.Select(
            label="merge bins", options={"none": 1}, value=1, css_classes=["dp-merge"]
        )
        self.resample.visible = self.groups.visible = self.merge.visible = False  # with a map
        self.plots = pn.pane.HTML("", css_classes=["dp-plots"], sizing_mode="stretch_width")
        self.directions = pn.pane.HTML(
            "",
            css_classes=["dp-directions"],
            sizing_mode="stretch_width",
            stylesheets=[_TABLE_CSS],
        )
        self.table = pn.pane.HTML(
            "", css_classes=["dp-table"], sizing_mode="stretch_width", stylesheets=[_TABLE_CSS]
        )
        self.download = w.FileDownload(
            callback=self._report_file,
            filename="report.html",
            label="Download the HTML report",
            css_classes=["dp-download"],
        )
        self.past = w.Select(
            label="Past releases (this ledger)", options={}, css_classes=["dp-past"]
        )
        self.reopen = w.Button(label="Reopen (free)", css_classes=["dp-reopen"])

    # -- the ledger -----------------------------------------------------------------------

    def _refresh_budget(self) -> None:
        b = self.budget
        where = html.escape(b.ledger or "in memory (this app process only)")
        analyses = analyses_of(b)
        parts = "".join(
            f"<li>analysis {html.escape(key[:8])}: {len(rows)} ledger rows ("
            + html.escape(
                ", ".join(
                    str(r.get("label") or r.get("id")).replace(f"analysis {key} ", "") for r in rows
                )
            )
            + ")</li>"
            for key, rows in analyses
        )
        self.remaining.object = (
            f"<b>Ledger</b> {where}: total epsilon={b.epsilon:g}, delta={b.delta:g}; "
            f"<span class='dp-analyses'>{len(analyses)} "
            f"{'analysis' if len(analyses) == 1 else 'analyses'}</span>, spent "
            f"epsilon={b.spent_epsilon:.6g}. "
            f"<b>Remaining: one more release of epsilon &le; "
            f"<span class='dp-remaining-epsilon'>{b.remaining():.6g}</span> "
            f"at delta={b.delta:g}</b>"
            + (
                f"<details><summary>their parts ({b.releases} ledger rows)</summary>"
                f"<ul>{parts}</ul></details>"
                if analyses
                else ""
            )
        )

    def _refresh_past(self) -> None:
        labels = {}
        for key in self.releases.keys():
            try:
                labels[self.releases.label(key)] = key
            except (OSError, ValueError, KeyError):  # a file another app is writing
                continue
        self.past.options = labels

    # -- the store ------------------------------------------------------------------------

    def _storage_options(self) -> dict | None:
        text = _text(self.options)
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

        return table_format(_text(self.store)) is not None

    def _group_column(self) -> str | None:
        value = self.group_column.value
        return None if not self._is_table() or value in (None, NO_GROUPS) else str(value)

    def _open_input(self) -> tuple[Any, Any]:
        """``(records, labels)`` as ``dask-dppca analyze`` reads them (one way to read a
        table: :func:`~dask_dppca.cli.inputs.open_location`); metadata only.
        """
        from ..cli.inputs import open_location

        path = _text(self.store)
        if not path:
            raise ValueError("store: enter a path or URL")
        table = self._is_table()
        return open_location(
            path,
            component=None if table else (_text(self.component) or None),
            columns=list(self.columns.value) if table else None,
            storage_options=self._storage_options(),
            label_column=self._group_column(),
        )

    def _load_schema(self) -> None:
        """A table's columns into the picker (numeric ones as features; every one may hold
        the groups), the first time this table is opened.
        """
        from ..io.tables import parse_columns, table_columns

        path = _text(self.store)
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

    # -- the next release -------------------------------------------------------------------

    def _shares(self) -> dict[str, float]:
        """Each stage's share as typed (a stage left at 0 does not run); the scale stage's
        only with scale = robust.  Refuses an empty or negative field.
        """
        out = {}
        for name, widget in self.shares.items():
            if name == "scale" and self.scale.value != "robust":
                continue
            value = _number(widget, f"share: {name}")
            if value < 0:
                raise ValueError(f"share: {name}: must be >= 0, got {value:g}")
            out[name] = value
        if out.get("directions", 0) <= 0:
            raise ValueError("share: directions: must be > 0 (the directions always run)")
        if self.scale.value == "robust" and out.get("scale", 0) <= 0:
            raise ValueError("share: scale: must be > 0 with scale = robust")
        return out

    def release_parameters(self) -> dict[str, Any]:
        """The next release's public parameters, checked (ValueError naming a bad field):
        what the cost line prices (:func:`~dask_dppca.analysis.run.planned_split`) and
        what the release passes to :func:`~dask_dppca.analysis.run.analyze`, the same.
        """
        if self.records_meta is None:
            raise ValueError("store: open a store first")
        k = _number(self.k, "k")
        d = self.records_meta["d"]
        if k != int(k) or not 1 <= k <= d:
            raise ValueError(f"k: a whole number in 1..{d} (d = {d})")
        eps = _number(self.epsilon, "epsilon")
        dlt = _number(self.delta, "delta")
        if eps <= 0:
            raise ValueError("epsilon: must be > 0")
        if not 0 < dlt < 1:
            raise ValueError("delta: must be in (0, 1)")
        shares = {s: v for s, v in self._shares().items() if v > 0}
        mapped = "score_map" in shares
        if mapped and int(k) < 2:
            raise ValueError("k: the score map needs k >= 2 (or a score map share of 0)")
        grouped = bool(self._group_column() or _text(self.group_labels) or _text(self.group_domain))
        if grouped and not mapped:
            raise ValueError("groups: need the score map (give it a share > 0)")
        if grouped and not _text(self.group_domain):
            raise ValueError("group domain: groups need their PUBLIC labels, e.g. a,b,c")
        return {
            "n_components": int(k),
            "epsilon": eps,
            "delta": dlt,
            "split": shares,
            "score_map": mapped,
            "grouped": grouped,
            "stages": [
                info.name
                for info in optional_stages()
                if info.name in shares and info.name != "scale"
            ],
            "scale": self.scale.value,
        }

    def planned(self) -> Any:
        """The split of the next release, exactly as the release will make it."""
        parameters = self.release_parameters()
        assert self.records_meta is not None
        return planned_split(
            parameters.pop("n_components"),
            self.records_meta["d"],
            **{key: parameters[key] for key in parameters},
        )

    def _show_cost(self) -> None:
        try:
            divided = self.planned()
        except ValueError as error:
            self.cost.object = "<b>Cost:</b> not computed."
            self.release_why.object = (
                f"<span class='dp-error'>Release disabled: {html.escape(str(error))}</span>"
            )
            self.release_button.disabled = True
            return
        try:
            check_charge(self.budget, divided)  # the very check the release makes first
            fits = True
        except BudgetExceededError:
            fits = False
        verdict = (
            "<span class='dp-fits' style='color:#1a6b1a'>fits what remains</span>"
            if fits
            else "<span class='dp-fits' style='color:#b00020'>does NOT fit what remains: it "
            "will be refused and nothing charged</span>"
        )
        shares = ", ".join(f"{s}={v:g}" for s, v in divided.shares.items())
        self.cost.object = (
            f"<b>Cost of this analysis:</b> <span class='dp-cost-value'>epsilon="
            f"{divided.epsilon:g}, delta={divided.delta:g}</span> in total ("
            f"{len(divided.all_parts)} parts composed exactly; split {html.escape(shares)}); "
            f"the ledger has room for epsilon &le; {self.budget.remaining():.6g} at "
            f"delta={self.budget.delta:g}: {verdict}. The same check runs again when you "
            "press Release."
        )
        self.release_why.object = ""
        self.release_button.disabled = self._busy

    async def _release(self, *_: Any) -> None:
        if self._busy or self.records_meta is None:
            return
        try:
            parameters = self.release_parameters()
        except ValueError as error:
            self.error.object = html.escape(one_line(error))
            return
        self._busy = True
        self.release_button.disabled = True
        self.error.object = ""
        self.progress.visible = self.progress.active = True
        started = time.monotonic()
        what = f"k={parameters['n_components']} of {html.escape(self.records_meta['dataset'])}"

        def tick() -> None:
            self.status.object = (
                f"Releasing {what}: reading the data and drawing the noise, "
                f"{time.monotonic() - started:.0f} s so far (the page stays usable)..."
            )

        tick()
        ticker = pn.state.add_periodic_callback(tick, period=1000) if pn.state.curdoc else None
        try:
            result = await asyncio.to_thread(self._run_release, parameters)
        except BudgetExceededError as error:  # refused: in the ledger's terms first
            self.error.object = html.escape(
                refusal_line(error, self.budget, parameters["epsilon"], parameters["delta"])
            )
            self.status.object = ""
        except Exception as error:  # failed: one line, the ledger re-read
            self.error.object = html.escape(one_line(error))
            self.status.object = ""
        else:
            self._refresh_budget()
            key = self.releases.add(result)
            self.session.append(key)
            self._refresh_past()
            self._show(result)
            self.status.object = (
                f"Released in {time.monotonic() - started:.1f} s: "
                f"<span class='dp-released'>{html.escape(key)}</span>"
            )
        finally:
            if ticker is not None:
                ticker.stop()
            self.progress.visible = self.progress.active = False
            self._busy = False
            self._refresh_budget()
            self._show_cost()

    def _groups(self, labels: Any, store: str, component: str | None) -> dict[str, Any]:
        """The ``groups`` and ``group_domain`` of :func:`~dask_dppca.analysis.run.analyze`, as
        the CLI's ``--groups`` / ``--group-domain`` take them (empty: no groups): a table's
        column, else a Zarr label array.
        """
        from ..analysis.stages.score_map import group_domain_from_text, resolve_groups

        domain = _text(self.group_domain)
        if labels is None:
            name = _text(self.group_labels)
            if not name:
                return {}
            _, labels = resolve_groups(store, os.path.expanduser(name), component)
        return {"groups": labels, "group_domain": group_domain_from_text(domain, labels)}

    def _run_release(self, parameters: dict[str, Any] | None = None) -> Any:
        from ..analysis.run import analyze

        assert self.records_meta is not None
        parameters = parameters if parameters is not None else self.release_parameters()
        records, labels = self._open_input()  # as analyze reads them (metadata only)
        store = os.path.expanduser(_text(self.store))
        component = _text(self.component) or None
        groups = self._groups(labels, store, component) if parameters["grouped"] else {}
        with self.budget:
            result = analyze(
                records,
                n_components=parameters["n_components"],
                epsilon=parameters["epsilon"],
                delta=parameters["delta"],
                split=parameters["split"],
                score_map=parameters["score_map"],  # a share of 0: no score map
                stages=parameters["stages"],
                scale=parameters["scale"],
                scheduler=self.scheduler,
                **groups,
            )
        # This analysis's rows (its stages' ids start with its id), not another page's.
        mine = f"{result.meta['analysis_id']}."
        rows = [r["id"] for r in self.budget.as_dict()["releases"] if r["fit_id"].startswith(mine)]
        result.meta["app"] = {
            "store": display_location(_text(self.store)),  # never a secret in a saved file
            "groups": self._group_column() or display_location(_text(self.group_labels)) or None,
            "group_domain": _text(self.group_domain) or None,
            "ledger": self.budget.ledger,
            "ledger_rows": rows,
            "released_at": time.time(),
        }
        return result

    # -- post-processing: free ----------------------------------------------------------

    def _reopen(self, *_: Any) -> None:
        if not self.past.value:
            return
        try:
            self._show(self.releases.load(self.past.value))
        except Exception as error:
            self.error.object = html.escape(one_line(error))

    def _resample(self, *_: Any) -> None:
        self.seed += 1
        self._render()

    def _show(self, result: Any) -> None:
        self.current = result
        k = result.directions.shape[0]
        self._syncing = True
        try:
            self.show_k.options = list(range(1, k + 1))
            self.show_k.value = k
            mapped = score_map_of(result) is not None
            self.resample.visible = self.merge.visible = mapped
            self.groups.visible = mapped and len(score_map_of(result).groups) > 1
            self.merge.options = merge_choices(score_map_of(result))
            self.merge.value = 1
        finally:
            self._syncing = False
        self._render()

    def _render(self) -> None:
        if self._syncing:
            return
        result = self.current
        if result is None:
            self.plots.object = "<i>No release shown yet: release, or reopen a past one.</i>"
            self.directions.object = ""
            return
        import matplotlib
        from cycler import cycler

        shown = first_k(result, self.show_k.value or 1)
        colours = PALETTES[self.palette.value]
        rc: Any = {} if colours is None else {"axes.prop_cycle": cycler(color=colours)}
        kind = KINDS[self.kind.value]
        pve_note = bounded_pve(result.scree.get("pve_total"))[1] if kind == "pve_total" else None
        with matplotlib.rc_context(rc):
            figs = [f for f in scree_figures(shown) if f[2] == f"{kind} plot"]
            if pve_note is not None:
                figs = [(src, f"{cap}. {pve_note}", alt) for src, cap, alt in figs]
            score_map = merge_bins(score_map_of(result), self.merge.value or 1)
            if score_map is not None:
                figs += score_map_figures(
                    score_map, seed=self.seed, groups=bool(self.groups.value), colours=colours
                )
        meta = result.meta
        images = "".join(
            f"<figure style='margin:0;max-width:520px'><img src='{src}' "
            f"alt='{html.escape(alt)}' style='max-width:100%'>"
            f"<figcaption>{html.escape(cap)}</figcaption></figure>"
            for src, cap, alt in figs
        )
        self.plots.object = (
            f"<p><b>Release {html.escape(str(meta.get('analysis_id', ''))[:8])}</b> of "
            f"{html.escape(str(meta.get('dataset')))}: k={meta.get('n_components')}, "
            f"total epsilon={meta.get('epsilon'):g}, delta={meta.get('delta'):g} "
            f"(composed {meta.get('composed_epsilon', 0):.6g}), scale: "
            f"{html.escape(str(meta.get('scaling', 'none')))}.</p>"
            f"<div style='display:flex;flex-wrap:wrap;gap:12px'>{images}</div>"
        )
        self.directions.object = (
            "<div class='dp-notices'>" + notes_html(result) + "</div>" + loadings_html(shown)
        )
        self.table.object = privacy_table_html(result) + "".join(further_stage_sections(result))

    def _report_file(self) -> Any:
        import io

        if self.current is None:
            return io.StringIO("no release shown")
        return io.StringIO(render_report(self.current, budget=self.budget))

    # -- layout -----------------------------------------------------------------------------

    def view(self) -> Any:
        """The page (a Panel template-free layout: it also renders inline in Jupyter)."""
        data = pn.Column(
            "### 1. Data",
            self.store,
            self.options,
            self.component,
            self.open_button,
            self.store_info,
            self.columns_title,
            self.columns,
            self.group_column,
        )
        release = pn.Column(
            "### 2. Next release (spends privacy budget)",
            self.k,
            self.group_labels,
            self.group_domain,
            self.epsilon,
            self.delta,
            "**Scale stage** (per-column centre and scale first)",
            self.scale,
            self.scale_why,
            pn.GridBox(*self.shares.values(), ncols=3, width=400),
            self.cost,
            self.release_button,
            self.release_why,
            self.progress,
            self.status,
        )
        past = pn.Column("### Past releases", self.past, self.reopen)
        explore = pn.Column(
            "### 3. Explore the release (free)",
            self.free_note,
            pn.Row(self.show_k, self.palette),
            self.kind,
            pn.Row(self.resample, self.groups, self.merge),
            self.plots,
            "#### Directions (loadings) and what is noise",
            self.directions,
            "#### Privacy: every part of the release",
            self.table,
            self.download,
            sizing_mode="stretch_width",
        )
        self._render()
        return pn.Column(
            "## dask-dppca: differentially private PCA",
            self.remaining,
            self.error,
            pn.Row(
                pn.Column(data, release, past, width=420),
                explore,
                sizing_mode="stretch_width",
            ),
            sizing_mode="stretch_width",
        )
