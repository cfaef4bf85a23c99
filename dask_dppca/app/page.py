"""The app's page (Panel): open a store, release under the ledger, explore for free.

One :class:`AppPage` per visitor; the ledger (a file, shared by every page and every
process) is the one source of what was spent and what remains, read again after every
release.  A release runs :func:`~dask_dppca.analysis.run.analyze` in a worker thread (the
page stays responsive, one release at a time per page) inside the ledger's budget, so
the library's own checks refuse anything that does not fit before any data is read.
"""

from __future__ import annotations

import asyncio
import html
import os
import time
from typing import Any

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
from ..analysis.run import check_charge, planned_split
from ..analysis.stages import REGISTRY, optional_stages
from ..io.storage import display_location
from ..privacy.budget.privacy_budget import BudgetExceededError, PrivacyBudget
from ..privacy.notices import notes_html
from .releases import ReleaseStore, releases_folder
from .shown import (  # noqa: F401  (re-exported: the page's helpers)
    FREE,
    KINDS,
    NO_GROUPS,
    PAGE_CSS,
    PALETTES,
    SCALE_WHY,
    TABLE_CSS,
    analyses_of,
    bounded_pve,
    first_k,
    merge_bins,
    merge_choices,
    number_of,
    one_line,
    refusal_line,
    text_of,
)
from .store import StoreInputs

__all__ = ["AppPage", "bounded_pve", "first_k", "merge_bins", "merge_choices", "one_line"]


class AppPage(StoreInputs):
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
        pn.extension(raw_css=[PAGE_CSS], notifications=False)
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
        # The scree values and the score map to pan, zoom and hover (app/explore.py).
        self.explorable = pn.Row(css_classes=["dp-explorable"], sizing_mode="stretch_width")
        self.directions = pn.pane.HTML(
            "",
            css_classes=["dp-directions"],
            sizing_mode="stretch_width",
            stylesheets=[TABLE_CSS],
        )
        self.table = pn.pane.HTML(
            "", css_classes=["dp-table"], sizing_mode="stretch_width", stylesheets=[TABLE_CSS]
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

    # -- the next release -------------------------------------------------------------------

    def _shares(self) -> dict[str, float]:
        """Each stage's share as typed (a stage left at 0 does not run); the scale stage's
        only with scale = robust.  Refuses an empty or negative field.
        """
        out = {}
        for name, widget in self.shares.items():
            if name == "scale" and self.scale.value != "robust":
                continue
            value = number_of(widget, f"share: {name}")
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
        k = number_of(self.k, "k")
        d = self.records_meta["d"]
        if k != int(k) or not 1 <= k <= d:
            raise ValueError(f"k: a whole number in 1..{d} (d = {d})")
        eps = number_of(self.epsilon, "epsilon")
        dlt = number_of(self.delta, "delta")
        if eps <= 0:
            raise ValueError("epsilon: must be > 0")
        if not 0 < dlt < 1:
            raise ValueError("delta: must be in (0, 1)")
        shares = {s: v for s, v in self._shares().items() if v > 0}
        mapped = "score_map" in shares
        if mapped and int(k) < 2:
            raise ValueError("k: the score map needs k >= 2 (or a score map share of 0)")
        grouped = bool(
            self._group_column() or text_of(self.group_labels) or text_of(self.group_domain)
        )
        if grouped and not mapped:
            raise ValueError("groups: need the score map (give it a share > 0)")
        if grouped and not text_of(self.group_domain):
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
        return planned_split(parameters.pop("n_components"), self.records_meta["d"], **parameters)

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

        domain = text_of(self.group_domain)
        if labels is None:
            name = text_of(self.group_labels)
            if not name:
                return {}
            _, labels = resolve_groups(store, os.path.expanduser(name), component)
        return {"groups": labels, "group_domain": group_domain_from_text(domain, labels)}

    def _run_release(self, parameters: dict[str, Any] | None = None) -> Any:
        from ..analysis.options import Compute, shell_stages
        from ..analysis.run import analyze

        assert self.records_meta is not None
        parameters = parameters if parameters is not None else self.release_parameters()
        records, labels = self._open_input()  # as analyze reads them (metadata only)
        store = os.path.expanduser(text_of(self.store))
        component = text_of(self.component) or None
        groups = self._groups(labels, store, component) if parameters["grouped"] else {}
        flat = {"score_map": parameters["score_map"]}  # a share of 0: no score map
        flat.update({"group_domain": groups["group_domain"]} if groups else {})
        with self.budget:
            result = analyze(
                records,
                n_components=parameters["n_components"],
                epsilon=parameters["epsilon"],
                delta=parameters["delta"],
                split=parameters["split"],
                stages=shell_stages(parameters["stages"], flat),
                groups=groups.get("groups"),
                scale=parameters["scale"],
                compute=Compute(scheduler=self.scheduler),
            )
        # This analysis's rows (its stages' ids start with its id), not another page's.
        mine = f"{result.meta['analysis_id']}."
        rows = [r["id"] for r in self.budget.as_dict()["releases"] if r["fit_id"].startswith(mine)]
        result.meta["app"] = {
            "store": display_location(text_of(self.store)),  # never a secret in a saved file
            "groups": self._group_column() or display_location(text_of(self.group_labels)) or None,
            "group_domain": text_of(self.group_domain) or None,
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
            self.explorable.objects = []
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
        self.explorable.objects = self._explorable(shown, score_map)
        self.directions.object = (
            "<div class='dp-notices'>" + notes_html(result) + "</div>" + loadings_html(shown)
        )
        self.table.object = privacy_table_html(result) + "".join(further_stage_sections(result))

    @staticmethod
    def _explorable(shown: Any, score_map: Any) -> list[Any]:
        """The scree values and the pooled score map as plots to pan, zoom and hover
        (post-processing: the release's own values).
        """
        from .explore import score_map_explorer, scree_explorer

        values = {m: list(v) for m, v in shown.scree["values"].items()}
        panes = [pn.pane.Bokeh(scree_explorer(values, "private scree values: hover, zoom"))]
        if score_map is not None:
            panes.append(pn.pane.Bokeh(score_map_explorer(score_map)))
        return panes

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
            "#### To explore: pan, zoom, and hover over a value",
            self.explorable,
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
