"""The released analysis, :class:`PrivateAnalysis`: what every stage released, and tables.

Everything it holds is released or public: plotting, choosing k, saving and loading
cost nothing and recompute nothing.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..compute.cluster import where_drawn
from ..io.output import write_bytes, write_json
from ..privacy.mechanisms.accounting import BudgetSplit
from ..privacy.mechanisms.scale import original_loadings
from ..privacy.mechanisms.score_map import ScoreMap
from ..privacy.notices import release_notices, scree_default
from .stages.score_map import plot_scores, resample_synthetic

__all__ = [
    "PrivateAnalysis",
    "privacy_table_text",
    "pve_topk",
    "released_analysis",
    "split_rows",
]

_FORMAT = "dask-dppca private analysis 1"

#: The scree figures' titles, one per kind of ``plot_scree`` (each says what it shows).
SCREE_TITLES = {
    "scree": "private scree values",
    "pve_topk": "private PVE of the top {k} directions",
    "pve_total": "private PVE of the top {k} over all {d} features",
}


@dataclass
class PrivateAnalysis:
    """The released analysis: directions, scree values and the privacy table.

    Everything here is released or public: plotting, choosing k, saving and loading
    cost nothing and recompute nothing.

    Attributes
    ----------
    directions : ndarray, shape (k, d)
        The private principal directions (rows), largest first.
    kendall_eigenvalues : ndarray, shape (d,)
        Eigenvalues of the noisy Kendall matrix (released with the directions).
    scree : dict
        ``scree["values"][method]``: the k released scree values per method;
        ``scree["pve_total"]``: clipped values over the private trace (PVE over all d);
        ``scree["pve_topk"][method]``: each method's values over their own sum (PVE over
        the top k only); ``scree["trace"]``: the private trace; ``scree["default"]``: the
        method to read (:data:`~dask_dppca.privacy.notices.SCREE_DEFAULT_ORDER`, why:
        :func:`~dask_dppca.privacy.notices.scree_default_note`); ``scree["quantiles"]``:
        the released pair quantiles (per component, then the trace's).
    privacy : list of dict
        The split table: one row per release (stage, release, mechanism, guarantee,
        epsilon/delta or mu, sensitivity, sigma or scale, where drawn).
    score_map : ScoreMap or None
        The private score map (:class:`~dask_dppca.privacy.mechanisms.score_map.ScoreMap`), when
        one was released.
    meta : dict
        Totals, shares, n, d, the composed epsilon, the analysis id, the spatial sign
        (and radius) and ``directions_estimate``: what the directions estimate.
    notices : list of str
        Plain sentences on what in the release is pure noise
        (:func:`~dask_dppca.privacy.notices.release_notices`, from released values only).
    stages : dict
        What each further registered stage released (:mod:`dask_dppca.analysis.stages`),
        by stage name: e.g. ``stages["median"]``, JSON-ready.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_t(3, size=(2000, 4))  # any rows
    >>> result = dd.analyze(X, n_components=2, score_map=False, scheduler="threads")
    >>> path = os.path.join(tempfile.mkdtemp(), "analysis.json")
    >>> _ = result.save(path)
    >>> again = dd.PrivateAnalysis.load(path)  # re-plotting it costs no budget
    >>> bool((again.directions == result.directions).all())
    True
    >>> "directions" in result.privacy_table()
    True
    """

    directions: np.ndarray
    kendall_eigenvalues: np.ndarray
    scree: dict[str, Any]
    privacy: list[dict[str, Any]]
    score_map: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    stages: dict[str, Any] = field(default_factory=dict)

    def original_loadings(self) -> np.ndarray:
        """The directions in the original units of the columns (post-processing, free).

        With the scale stage (``scale="robust"``) the directions are unit vectors in the
        scaled coordinates ``(x - centre) / scale``; the same linear forms of the
        original columns have the coefficients ``v / scale``, returned renormalised per
        direction.  Without it, the directions themselves.

        Returns
        -------
        ndarray, shape (k, d)
        """
        scaling = self.stages.get("scale")
        if not scaling:
            return np.array(self.directions, dtype=np.float64)
        return original_loadings(self.directions, scaling["scale"])

    # -- plots -------------------------------------------------------------------------

    def plot_scree(
        self,
        methods: Sequence[str] | None = None,
        *,
        kind: str = "scree",
        reference: Sequence[float] | None = None,
        ax: Any = None,
    ) -> Any:
        """A matplotlib scree (or PVE) plot of the released values: private only by default.

        Parameters
        ----------
        methods : sequence of str, optional
            Which released methods to draw (default: all).
        kind : {"scree", "pve_topk", "pve_total"}
            Scree values, PVE over the top k, or PVE over all d (clipped only).
        reference : sequence of float, optional
            A non-private reference the USER supplies (never computed here); drawn
            dashed and labelled NOT PRIVATE.
        ax : matplotlib Axes, optional

        Returns
        -------
        matplotlib.axes.Axes
        """
        import matplotlib.pyplot as plt

        if kind not in ("scree", "pve_topk", "pve_total"):
            raise ValueError(f"kind: expected 'scree', 'pve_topk' or 'pve_total', got {kind!r}")
        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.5))
        chosen = list(self.scree["values"]) if methods is None else list(methods)
        k = self.directions.shape[0]
        x = np.arange(1, k + 1)
        default = self.scree.get("default")
        if kind == "pve_total":
            series = {"clipped": self.scree.get("pve_total")}
        else:
            source = self.scree["values"] if kind == "scree" else self.scree["pve_topk"]
            series = {m: source[m] for m in chosen}
        for name, values in series.items():
            if values is not None:
                ax.plot(x, values, **_scree_style(name, name == default))
        if reference is not None:
            ax.plot(
                x[: len(reference)],
                np.asarray(reference)[:k],
                linestyle="--",
                color="black",
                marker="x",
                label="reference: NOT PRIVATE",
            )
        ax.set_xticks(x)
        ax.set_xlabel("component")
        ax.set_ylabel(
            {"scree": "scree value", "pve_topk": "PVE (top k)", "pve_total": "PVE (all d)"}[kind]
        )
        eps, dlt = self.meta.get("epsilon"), self.meta.get("delta")
        what = SCREE_TITLES[kind].format(k=k, d=self.meta.get("n_features", "d"))
        ax.set_title(f"{what}, total epsilon={eps:g}, delta={dlt:g}")
        # An explicit place: "best" searches the data, and matplotlib warns when slow.
        ax.legend(frameon=False, loc="upper right")  # decreasing values leave it free
        return ax

    def plot_scores(self, **kwargs: Any) -> Any:
        """The private score map (per group when it has groups); a non-private reference
        only when passed, labelled NOT PRIVATE.  Free: see
        :func:`~dask_dppca.analysis.stages.score_map.plot_scores` for the options.
        """
        return plot_scores(self.score_map, **kwargs)

    def resample_synthetic(self, size: int | None = None, **kwargs: Any) -> dict[str, Any]:
        """Synthetic points per group from the released map (post-processing, free).

        See :func:`~dask_dppca.analysis.stages.score_map.resample_synthetic`.
        """
        return resample_synthetic(self.score_map, size, **kwargs)

    # -- records -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (lossless for :meth:`from_dict`)."""
        return {
            "format": _FORMAT,
            "directions": self.directions.tolist(),
            "kendall_eigenvalues": self.kendall_eigenvalues.tolist(),
            "scree": _jsonable(self.scree),
            "privacy": _jsonable(self.privacy),
            "score_map": _jsonable(getattr(self.score_map, "to_dict", lambda: self.score_map)()),
            "meta": _jsonable(self.meta),
            "notices": list(self.notices),
            # Only when a further stage ran: a record of the three stages stays as it was.
            **({"stages": _jsonable(self.stages)} if self.stages else {}),
        }

    def to_json(self, **kwargs: Any) -> str:
        """The analysis as JSON text."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> PrivateAnalysis:
        """The analysis a :meth:`to_dict` record describes."""
        if record.get("format") != _FORMAT:
            raise ValueError(f"record: not a {_FORMAT!r} record")
        scree = dict(record["scree"])
        if "default" not in scree and scree.get("values"):  # saved before defaults existed
            scree["default"] = scree_default(list(scree["values"]))
        result = cls(
            directions=np.asarray(record["directions"], dtype=np.float64),
            kendall_eigenvalues=np.asarray(record["kendall_eigenvalues"], dtype=np.float64),
            scree=scree,
            privacy=list(record["privacy"]),
            score_map=_score_map_of(record.get("score_map")),
            meta=dict(record["meta"]),
            stages=dict(record.get("stages") or {}),
        )
        notices = record.get("notices")
        # A record from before the notices: derived from its released values (free).
        result.notices = list(notices) if notices is not None else release_notices(result)
        return result

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        storage_options: dict[str, Any] | None = None,
    ) -> str:
        """Write the analysis to a JSON file (a local path or an fsspec URL), whole.

        A local file is written beside its target and moved into place (a full disk
        leaves the old file, never half a new one); a new one gets mode 0600, like a
        fit's result (:func:`~dask_dppca.io.output.write_json`).

        Parameters
        ----------
        path : str or os.PathLike
            A local path (``file://`` and ``~`` too) or an fsspec URL.
        overwrite : bool, default True
            Whether an existing file may be replaced (False: the result is kept beside
            it and the error names both).
        storage_options : dict, optional
            fsspec options for a URL.

        Returns
        -------
        str
            Where it went, as it may be shown (secrets masked).
        """
        return write_json(path, self.to_dict(), storage_options, name="path", overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PrivateAnalysis:
        """Read an analysis written by :meth:`save` (nothing is recomputed)."""
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            return cls.from_dict(json.load(handle))

    def to_html(self, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> str:
        """The publishable, self-contained HTML report (:mod:`dask_dppca.analysis.report`).

        Parameters
        ----------
        path : str or os.PathLike, optional
            Write the report there (one file: plots inline, no network at view time).
        **kwargs
            ``budget`` (the ledger charged: its rows and what remains), ``reference``
            (non-private scree values YOU supply, labelled NOT PRIVATE), ``title``.

        Returns
        -------
        str
            The HTML text.
        """
        from .report import render_report

        text = render_report(self, **kwargs)
        if path is not None:  # whole, mode 0600 when new: as save()
            write_bytes(path, text.encode("utf-8"), name="path", overwrite=True)
        return text

    def privacy_table(self) -> str:
        """The split table as plain text."""
        return privacy_table_text(self.privacy)

    def _repr_html_(self) -> str:
        k = self.directions.shape[0]
        head = "".join(f"<th>PC{i + 1}</th>" for i in range(k))
        rows = "".join(
            f"<tr><th>{html.escape(m)}</th>"
            + "".join(f"<td>{v:.4g}</td>" for v in values)
            + "</tr>"
            for m, values in self.scree["values"].items()
        )
        cols = ["stage", "release", "guarantee", "parameter", "sensitivity", "noise", "drawn on"]
        prows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
            for r in _display_rows(self.privacy)
        )
        meta = self.meta
        summary = (
            f"<pre>{html.escape(self.score_map.summary())}</pre>"
            if isinstance(self.score_map, ScoreMap)
            else ""
        )
        return (
            f"<div><b>Private PCA analysis</b> (n={meta.get('n_samples')}, "
            f"d={meta.get('n_features')}, total epsilon={meta.get('epsilon')}, "
            f"delta={meta.get('delta')}; composed epsilon {meta.get('composed_epsilon', 0):.6g})"
            f"<table><tr><th>scree</th>{head}</tr>{rows}</table>{summary}"
            f"<table><tr>{''.join(f'<th>{c}</th>' for c in cols)}</tr>{prows}</table></div>"
        )

    def __repr__(self) -> str:
        k, d = self.directions.shape
        return (
            f"PrivateAnalysis(k={k}, d={d}, methods={list(self.scree['values'])}, "
            f"epsilon={self.meta.get('epsilon')}, delta={self.meta.get('delta')})"
        )


#: Each scree method's line and marker: distinct, so no line hides another (the clipped
#: and Huber values often coincide).
_SCREE_STYLES = {
    "clipped": ("-", "o", "C0"),
    "huber": ("--", "s", "C1"),
    "winsorized": (":", "^", "C2"),
    "robust": ("-.", "D", "C3"),
}


def _scree_style(method: str, default: bool) -> dict[str, Any]:
    """The plot style of a method's line: the default drawn thick and on top."""
    line, marker, colour = _SCREE_STYLES.get(method, ("-", "o", None))
    label = f"{method} (private)" + (", default: read this" if default else "")
    return {
        "linestyle": line,
        "marker": marker,
        "color": colour,
        "linewidth": 2.8 if default else 1.3,
        "markersize": 7 if default else 5,
        "markerfacecolor": colour if default else "none",
        "zorder": 3 if default else 2,
        "label": label,
    }


def _score_map_of(record: Any) -> Any:
    if isinstance(record, Mapping) and "frame" in record and "histograms" in record:
        return ScoreMap.from_dict(dict(record))
    return record


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def _display_rows(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    out = []
    for r in rows:
        if "mu" in r:
            param = f"mu={r['mu']:.4g}"
        elif "delta" in r and r.get("delta") is not None:
            param = f"epsilon={r['epsilon']:.4g}, delta={r['delta']:.3g}"
        else:
            param = f"epsilon={r.get('epsilon', 0):.4g}"
        if r.get("count", 1) > 1:
            param += f" (x{r['count']})"
        out.append(
            {
                "stage": r["stage"],
                "release": r["release"],
                "guarantee": r["guarantee"],
                "parameter": param,
                "sensitivity": _short(r.get("sensitivity")),
                "noise": _short(r.get("noise")),
                "drawn on": where_drawn(r.get("released_on")),
            }
        )
    return out


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"{v:.3g}" for v in value[:3]) + (", ..." if len(value) > 3 else "")
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def privacy_table_text(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """The privacy table's ``rows`` as aligned plain text (``columns``: which, in order)."""
    shown = _display_rows(rows)
    if not shown:
        return ""
    cols = list(shown[0]) if columns is None else list(columns)
    widths = {c: max(len(c), *(len(r[c]) for r in shown)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in shown]
    return "\n".join(lines)


def pve_topk(values: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """Each method's values over the sum of its non-negative ones: the PVE over the top k
    (post-processing of released values; all zeros when none is positive).
    """
    out = {}
    for method, released in values.items():
        kept = np.maximum(np.asarray(released, dtype=np.float64), 0)
        total = float(kept.sum())
        out[method] = [float(v) for v in (kept / total if total > 0 else kept * 0.0)]
    return out


def split_rows(split: BudgetSplit) -> list[dict[str, Any]]:
    """The split's table rows (stage, release, guarantee, parameters), before any release."""
    return [dict(row) for row in split.table()]


#: The stages whose releases fill :class:`PrivateAnalysis`'s own fields (by the stage's
#: name); every other stage's release is in ``result.stages``.
RESULT_FIELDS = ("directions", "scree", "score_map")


def released_analysis(outputs: Mapping[str, Any], meta: dict[str, Any]) -> PrivateAnalysis:
    """The analysis of the stage outputs released so far (one has the directions).

    ``outputs`` maps each stage's name to its :class:`~dask_dppca.analysis.stage.StageOutput`.
    """
    released = next(output for output in outputs.values() if output.directions is not None)
    estimator = released.value  # the directions' fit (public attributes only)
    scree = outputs["scree"].value if "scree" in outputs else None
    scree = scree or {"values": {}, "design": None}
    scree["pve_topk"] = pve_topk(scree["values"])
    meta["directions_fit_id"] = estimator.privacy_.get("fit_id")
    map_output = outputs.get("score_map")
    result = PrivateAnalysis(
        directions=np.asarray(released.directions, dtype=np.float64),
        kendall_eigenvalues=np.asarray(estimator.eigenvalues_, dtype=np.float64),
        scree=scree,
        privacy=[row for output in outputs.values() for row in output.rows],
        score_map=None if map_output is None else map_output.value,
        meta=meta,
        stages={
            name: output.value for name, output in outputs.items() if name not in RESULT_FIELDS
        },
    )
    result.notices = release_notices(result)  # post-processing of the released values
    return result
