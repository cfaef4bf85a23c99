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
import os
import time
from typing import Any

import numpy as np
import panel as pn

from ..analysis.report import (
    further_stage_sections,
    privacy_table_html,
    render_report,
    score_map_figures,
    score_map_of,
    scree_figures,
)
from ..analysis.result import pve_topk
from ..analysis.stages import REGISTRY, optional_stages
from ..io.storage import display_location
from ..privacy.budget import BudgetExceededError, PrivacyBudget
from ..privacy.charges import PartsCharge
from ..privacy.parts import ApproxDPPart
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


def _text(widget: Any) -> str:
    return str(widget.value or "").strip()


def _number(widget: Any, name: str) -> float:
    if widget.value is None:
        raise ValueError(f"{name}: enter a number")
    return float(widget.value)


def first_k(result: Any, k: int) -> Any:
    """The release shown with its first ``k`` components (post-processing)."""
    k = max(1, min(int(k), result.directions.shape[0]))
    values = {m: list(v)[:k] for m, v in result.scree["values"].items()}
    scree = dict(result.scree, values=values)
    scree["pve_topk"] = pve_topk(values)
    if result.scree.get("pve_total") is not None:
        scree["pve_total"] = list(result.scree["pve_total"])[:k]
    return dataclasses.replace(result, directions=result.directions[:k], scree=scree)


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
        ("none" if f == 1 else f"{f} x {f} cells"): f
        for f in range(1, min(mx, my) + 1)
        if mx % f == 0 and my % f == 0
    }


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

        self._data_widgets(store)
        self._release_widgets()
        self._explore_widgets()
        self.open_button.on_click(self._open)
        self.release_button.on_click(self._release)
        self.reopen.on_click(self._reopen)
        self.resample.on_click(self._resample)
        for priced in (self.k, self.epsilon, self.delta, *self.shares.values()):
            priced.param.watch(lambda _: self._show_cost(), "value")
        for free in (self.show_k, self.kind, self.palette, self.groups, self.merge):
            free.param.watch(lambda _: self._render(), "value")
        self._refresh_budget()
        self._refresh_past()
        self._show_cost()
        if store:
            self._open()

    def _data_widgets(self, store: str | None) -> None:
        """The ledger line and the store's inputs."""
        w = pn.widgets
        self.remaining = pn.pane.HTML("", css_classes=["dp-remaining"], sizing_mode="stretch_width")
        self.store = w.TextInput(
            label="Store (path or URL)", value=store or "", css_classes=["dp-store"]
        )
        self.options = w.TextInput(
            label="Storage options (JSON, optional)", value="", css_classes=["dp-options"]
        )
        self.component = w.TextInput(
            label="Array in a Zarr group (optional)", value="", css_classes=["dp-component"]
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
        # One share per registered stage (an optional one at 0: not run unless given a share).
        self.shares = {
            info.name: w.FloatInput(
                label=f"share: {info.title}",
                value=0.0 if info.optional else info.default_share,
                start=0.0,
                width=125,
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
        self.progress = pn.indicators.Progress(
            active=False, visible=False, sizing_mode="stretch_width", css_classes=["dp-progress"]
        )
        self.status = pn.pane.HTML("", css_classes=["dp-status"])
        self.error = pn.pane.HTML("", css_classes=["dp-error"], sizing_mode="stretch_width")

    def _explore_widgets(self) -> None:
        """The free exploration of a release: what is shown, and how."""
        w = pn.widgets
        self.free_note = pn.pane.HTML(f"<p>{html.escape(FREE)}</p>", css_classes=["dp-free"])
        self.show_k = w.IntInput(
            label="k shown (of those released)", start=1, end=2, value=2, css_classes=["dp-show-k"]
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
        self.remaining.object = (
            f"<b>Ledger</b> {where}: total epsilon={b.epsilon:g}, delta={b.delta:g}; "
            f"{b.releases} releases, spent epsilon={b.spent_epsilon:.6g}. "
            f"<b>Remaining: one more release of epsilon &le; "
            f"<span class='dp-remaining-epsilon'>{b.remaining():.6g}</span> "
            f"at delta={b.delta:g}</b>"
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

    def _open(self, *_: Any) -> None:
        from ..io import open_records

        self.error.object = ""
        try:
            path = _text(self.store)
            if not path:
                raise ValueError("store: enter a path or URL")
            records = open_records(
                os.path.expanduser(path),
                _text(self.component) or None,
                storage_options=self._storage_options(),
            )
            n, d = records.shape
        except Exception as error:  # one clear line on the page, whatever went wrong
            self.records_meta = None
            self.release_button.disabled = True
            self.error.object = html.escape(one_line(error))
            return
        chunks = records.row_chunks
        self.records_meta = {"n": int(n), "d": int(d), "dataset": records.dataset}
        self.k.end = int(d)
        self.store_info.object = (
            f"<b>{html.escape(records.dataset)}</b>: "
            f"<span class='dp-n'>n = {int(n)}</span> records, "
            f"<span class='dp-d'>d = {int(d)}</span> features"
            + (f", {len(chunks)} row chunks" if chunks else "")
            + " (public metadata; nothing read yet)"
        )
        self.release_button.disabled = False
        self._show_cost()

    # -- the next release -------------------------------------------------------------------

    def _shares(self) -> dict[str, float]:
        return {name: float(widget.value or 0.0) for name, widget in self.shares.items()}

    def _show_cost(self) -> None:
        eps, dlt = self.epsilon.value, self.delta.value
        if not eps or not dlt or eps <= 0 or not 0 < dlt < 1:
            self.cost.object = "<b>Cost:</b> set epsilon > 0 and delta in (0, 1)."
            return
        try:
            self.budget.check(PartsCharge((ApproxDPPart(float(eps), float(dlt)),)))
            verdict = "<span style='color:#1a6b1a'>fits the ledger</span>"
        except BudgetExceededError:
            verdict = (
                "<span style='color:#b00020'>does NOT fit what remains: it will be refused "
                "and nothing charged</span>"
            )
        self.cost.object = (
            f"<b>Cost of this release:</b> <span class='dp-cost-value'>epsilon={eps:g}, "
            f"delta={dlt:g}</span> in total (all its parts composed exactly, split "
            f"{', '.join(f'{s}={v:g}' for s, v in self._shares().items())}); {verdict}. "
            "Checked exactly again when you press Release."
        )

    async def _release(self, *_: Any) -> None:
        if self._busy or self.records_meta is None:
            return
        self._busy = True
        self.release_button.disabled = True
        self.error.object = ""
        self.progress.visible = self.progress.active = True
        started = time.monotonic()
        what = f"k={self.k.value} of {html.escape(self.records_meta['dataset'])}"

        def tick() -> None:
            self.status.object = (
                f"Releasing {what}: reading the data and drawing the noise, "
                f"{time.monotonic() - started:.0f} s so far (the page stays usable)..."
            )

        tick()
        ticker = pn.state.add_periodic_callback(tick, period=1000) if pn.state.curdoc else None
        try:
            result = await asyncio.to_thread(self._run_release)
        except Exception as error:  # refused or failed: one line, the ledger re-read
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
            self.release_button.disabled = self.records_meta is None
            self._refresh_budget()
            self._show_cost()

    def _groups(self, store: str, component: str | None, mapped: bool) -> dict[str, Any]:
        """The ``groups`` and ``group_domain`` of :func:`~dask_dppca.analysis.run.analyze`, as
        the CLI's ``--groups`` / ``--group-domain`` take them (empty: no groups).
        """
        from ..analysis.stages.score_map import group_domain_from_text, resolve_groups

        name, domain = _text(self.group_labels), _text(self.group_domain)
        if not name and not domain:
            return {}
        if not name:
            raise ValueError("groups: a group domain was given without group labels")
        if not domain:
            raise ValueError("group domain: groups need their PUBLIC labels, e.g. a,b,c")
        if not mapped:
            raise ValueError("groups: need the score map (give it a share > 0)")
        _, labels = resolve_groups(store, os.path.expanduser(name), component)
        return {"groups": labels, "group_domain": group_domain_from_text(domain, labels)}

    def _run_release(self) -> Any:
        from ..analysis.run import analyze

        assert self.records_meta is not None
        shares = {s: v for s, v in self._shares().items() if v > 0}
        store = os.path.expanduser(_text(self.store))
        component = _text(self.component) or None
        groups = self._groups(store, component, "score_map" in shares)
        with self.budget:
            result = analyze(
                store,
                n_components=int(_number(self.k, "k")),
                epsilon=_number(self.epsilon, "epsilon"),
                delta=_number(self.delta, "delta"),
                split=shares,
                score_map="score_map" in shares,  # a share of 0: no score map
                stages=[info.name for info in optional_stages() if info.name in shares],
                scheduler=self.scheduler,
                component=component,
                storage_options=self._storage_options(),
                **groups,
            )
        # This analysis's rows (its stages' ids start with its id), not another page's.
        mine = f"{result.meta['analysis_id']}."
        rows = [r["id"] for r in self.budget.as_dict()["releases"] if r["fit_id"].startswith(mine)]
        result.meta["app"] = {
            "store": display_location(_text(self.store)),  # never a secret in a saved file
            "groups": display_location(_text(self.group_labels)) or None,
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
        self.show_k.end = k
        self.show_k.value = k
        mapped = score_map_of(result) is not None
        self.resample.visible = self.merge.visible = mapped
        self.groups.visible = mapped and len(score_map_of(result).groups) > 1
        self.merge.options = merge_choices(score_map_of(result))
        self.merge.value = 1
        self._render()

    def _render(self) -> None:
        result = self.current
        if result is None:
            self.plots.object = "<i>No release shown yet: release, or reopen a past one.</i>"
            return
        import matplotlib
        from cycler import cycler

        shown = first_k(result, self.show_k.value or 1)
        colours = PALETTES[self.palette.value]
        rc: Any = {} if colours is None else {"axes.prop_cycle": cycler(color=colours)}
        kind = KINDS[self.kind.value]
        with matplotlib.rc_context(rc):
            figs = [f for f in scree_figures(shown) if f[2] == f"{kind} plot"]
            score_map = merge_bins(score_map_of(result), self.merge.value or 1)
            if score_map is not None:
                figs += score_map_figures(
                    score_map, seed=self.seed, groups=bool(self.groups.value), colours=colours
                )
        meta = result.meta
        images = "".join(
            f"<figure style='margin:0'><img src='{src}' alt='{html.escape(alt)}' "
            f"style='max-width:100%'><figcaption>{html.escape(cap)}</figcaption></figure>"
            for src, cap, alt in figs
        )
        self.plots.object = (
            f"<p><b>Release {html.escape(str(meta.get('analysis_id', ''))[:8])}</b> of "
            f"{html.escape(str(meta.get('dataset')))}: k={meta.get('n_components')}, "
            f"total epsilon={meta.get('epsilon'):g}, delta={meta.get('delta'):g} "
            f"(composed {meta.get('composed_epsilon', 0):.6g}).</p>"
            f"<div style='display:flex;flex-wrap:wrap;gap:12px'>{images}</div>"
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
        )
        release = pn.Column(
            "### 2. Next release (spends privacy budget)",
            self.k,
            self.group_labels,
            self.group_domain,
            self.epsilon,
            self.delta,
            pn.Row(*self.shares.values()),
            self.cost,
            self.release_button,
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
