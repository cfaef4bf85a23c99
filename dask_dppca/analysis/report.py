"""A publishable, self-contained HTML report of one private analysis.

:func:`render_report` turns a :class:`~dask_dppca.analysis.result.PrivateAnalysis` (released
values and public parameters only) into ONE HTML file: the plots inline as base64 PNG,
the style inline (print-friendly), no script, no font or image fetched at view time.
It holds what a reviewer needs to re-derive every noise scale by hand: each part of the
split (mechanism, epsilon / delta or GDP mu, sensitivity, sigma or scale, where drawn)
with the formula that links them and its value recomputed from the other columns, the
composed total, the data set's public metadata (n, d, chunking, the data set's id), the
software version and the parameters; when a ledger is given, its rows for this analysis
and what remains.

Nothing non-private is shown unless the caller passes it (``reference=``), and then it
is drawn dashed and labelled NOT PRIVATE.  Rendering recomputes nothing and spends
nothing: it only reads the released values.
"""

from __future__ import annotations

import html
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..compute.cluster import where_drawn
from ..privacy.mechanisms.score_map import noisy_size_text
from ..privacy.notices import below_noise, notes_html
from ..version import installed_version
from .features import feature_names_for
from .figures import figure_html as _figure
from .figures import figure_png
from .figures import matplotlib_agg as _matplotlib
from .loadings import loadings_html

__all__ = [
    "NOT_PRIVATE",
    "figure_png",
    "loadings_html",
    "render_report",
    "write_report",
]

NOT_PRIVATE = "NOT PRIVATE"

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:62rem;
margin:1.5rem auto;padding:0 1rem;color:#1b1b1b;line-height:1.4}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;border-bottom:1px solid #ccc;
margin-top:1.8rem}table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
#privacy-table{font-size:.75rem;width:100%}
th,td{border:1px solid #bbb;padding:.2rem .45rem;text-align:left;vertical-align:top}
th{background:#f0f0f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:bold;background:#f7f7fa}.figs{display:flex;flex-wrap:wrap;gap:1rem}
.figs figure{margin:0}.figs img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:.8rem;color:#444;max-width:34rem}.note{font-size:.85rem;color:#333}
.warn{border:2px solid #b00;color:#b00;padding:.4rem .6rem;font-weight:bold}
.ok{color:#1a6b1a}.bad{color:#b00}code{font-size:.85rem}
@media print{body{max-width:none;margin:0}h2{break-after:avoid}figure,table,tr{break-inside:avoid}
.figs img{max-width:48%}}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(_num(v, digits) for v in value)
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def scree_figures(
    result: Any, reference: Sequence[float] | None = None, n_components: int | None = None
) -> list[tuple[str, str, str]]:
    """The scree and PVE figures as ``(data URL, caption, alt)`` (post-processing)."""
    plt = _matplotlib()
    out = []
    kinds = [("scree", "private scree values, every released method")]
    kinds.append(("pve_topk", "PVE over the top k (each method's values over their sum)"))
    if result.scree.get("pve_total") is not None:
        kinds.append(("pve_total", "PVE over all d (clipped values over the private trace)"))
    for kind, caption in kinds:
        _, ax = plt.subplots(figsize=(5, 3.4))
        result.plot_scree(kind=kind, ax=ax, reference=reference if kind == "scree" else None)
        if n_components is not None:
            ax.set_xlim(0.5, n_components + 0.5)
        out.append((figure_png(ax.figure), caption, f"{kind} plot"))
    return out


def score_map_of(result: Any) -> Any:
    """The result's score map as a
    :class:`~dask_dppca.privacy.mechanisms.score_map.ScoreMap`, or None.
    """
    from ..privacy.mechanisms.score_map import ScoreMap

    found = getattr(result, "score_map", None)
    if found is None or isinstance(found, ScoreMap):
        return found
    if isinstance(found, dict) and "histograms" in found:
        return ScoreMap.from_dict(found)
    return None


def _map_caption(score_map: Any) -> str:
    from .plots import noise_floor_sigmas

    hist = score_map.histogram()
    sigma, floor = hist.sigma, noise_floor_sigmas(score_map)
    noise = (
        f"Gaussian noise of sigma {sigma:.3g} is added to every cell's count, so a cell "
        f"holding no record shows a count of about +-{sigma:.2g}; cells under {floor:.2g} "
        f"sigma ({floor * sigma:.3g}) are drawn empty, a level that noise alone passes in "
        "about one cell per two maps (post-processing). Shades follow the square root of "
        "the count, so that the bulk's shoulders show."
        if sigma
        else "Cells are thresholded noisy counts (empty ones are not released)."
    )
    return (
        "Private score map: the noisy histogram of all records' scores on the private "
        f"frame ({score_map.bins[0]} x {score_map.bins[1]} cells). {noise} The records "
        "outside the frame (far tails, gross outliers) are one noisy count, written in "
        "the corner."
    )


def score_map_figures(
    score_map: Any, *, seed: int | None = None, groups: bool = True, colours: Any = None
) -> list[tuple[str, str, str]]:
    """The score-map figures: the pooled heat map, the group panels and the synthetic
    points, each in its own panel (post-processing of the release).

    ``groups=False`` draws the synthetic points in one colour and no group panels;
    ``colours`` (a palette) recolours the synthetic points.
    """
    from ..privacy.mechanisms.score_map import OTHER_GROUP
    from .plots import (
        group_size_sigma,
        noise_floor_sigmas,
        plot_group_panels,
        plot_score_map,
        plot_synthetic,
        shown_groups,
    )

    _matplotlib()
    rng = np.random.default_rng(seed)  # synthetic points: post-processing of the release
    floor = noise_floor_sigmas(score_map)
    out = [
        (
            figure_png(plot_score_map(score_map, floor_sigmas=floor)),
            _map_caption(score_map),
            "score map",
        )
    ]
    grouped = groups and len(score_map.groups) > 1
    shown = shown_groups(score_map) if grouped else []
    if grouped:
        sigma = group_size_sigma(score_map)
        released = score_map.released_group_sizes()
        size = noisy_size_text(released.get(OTHER_GROUP, 0.0))
        other = (
            f'The group "{OTHER_GROUP}" (labels outside the public domain) is drawn because '
            f"its noisy size ({size}) is not {below_noise(sigma)}"
            if OTHER_GROUP in shown
            else f'The group "{OTHER_GROUP}" (labels outside the public domain) is not drawn: '
            f"its noisy size ({size}) is {below_noise(sigma)}, so it may hold no record at all"
        )
        out.append(
            (
                figure_png(plot_group_panels(score_map, floor_sigmas=floor)),
                "The score map per group on the common frame and colour scale; each title "
                "gives the group's noisy size." + (f" {other}." if OTHER_GROUP in released else ""),
                "score map per group",
            )
        )
    out.append(
        (
            figure_png(plot_synthetic(score_map, rng=rng, by_group=grouped, colours=colours)),
            "Synthetic points drawn from the released histograms (post-processing, they "
            "re-sample the released counts: no record is shown): each point lies uniformly "
            f"in a cell drawn with its noisy count, cells under {floor:.2g} noise sigmas "
            "left out"
            + (
                "; colours by group in the order of the public domain, all groups drawn "
                "in one shuffled layer."
                if grouped
                else "."
            ),
            "synthetic points",
        )
    )
    return out


def _score_map_parameters(score_map: Any) -> list[tuple[str, Any]]:
    if score_map is None:
        return [("score map", "none")]
    from ..privacy.mechanisms.score_map import OTHER_GROUP

    a, b = score_map.axes
    frame = (score_map.privacy or {}).get("frame") or {}
    quantile = (frame.get("radius") or {}).get("target_quantile", frame.get("radius_quantile"))
    domain = [g for g in score_map.groups if g != OTHER_GROUP]
    return [
        ("score map axes", f"PC{a + 1} x PC{b + 1}"),
        ("score map bins", f"{score_map.bins[0]} x {score_map.bins[1]}"),
        (
            "score map frame rule",
            "centre: private median per axis; half-width: "
            f"{_num(frame.get('inflation', 1.5))} x the private "
            f"{_num(quantile, 4)} quantile of |score - centre|",
        ),
        (
            "group domain (public)",
            ", ".join(domain) + f' (other labels: "{OTHER_GROUP}")'
            if len(score_map.groups) > 1
            else "no groups",
        ),
    ]


def _derivation(row: dict[str, Any]) -> tuple[str, str]:
    """The formula linking a row's columns, and whether recomputing it gives its noise."""
    noise, sens = row.get("noise"), row.get("sensitivity")
    if noise is None:
        return "no noise scale in the release record (see docs/privacy.md)", ""
    if sens is None:
        return "-", ""
    sens_v = np.atleast_1d(np.asarray(sens, dtype=np.float64))
    noise_v = np.atleast_1d(np.asarray(noise, dtype=np.float64))
    if "mu" in row:
        entries = int(row.get("entries", 1))
        got = sens_v * math.sqrt(entries) / float(row["mu"])
        formula = (
            "sigma = sensitivity x sqrt(entries) / mu"
            if entries > 1
            else "sigma = sensitivity / mu"
        )
    elif row.get("epsilon") is not None:
        got = 2.0 * sens_v / float(row["epsilon"])
        formula = "scale = 2 x sensitivity / epsilon"
        if got.shape != noise_v.shape or not np.allclose(got, noise_v, rtol=1e-6):
            got = sens_v / float(row["epsilon"])
            formula = "scale = sensitivity / epsilon"
    else:
        return "see docs/privacy.md", ""
    if got.shape == noise_v.shape and np.allclose(got, noise_v, rtol=1e-6):
        return formula, f"{_num(got.tolist() if got.size > 1 else float(got[0]), 6)} (matches)"
    return "see docs/privacy.md", ""


_PRIVACY_COLUMNS = (
    "stage",
    "release",
    "mechanism",
    "guarantee",
    "count",
    "epsilon",
    "delta",
    "GDP mu",
    "sensitivity",
    "sigma or scale",
    "re-derived",
    "drawn on",
)


def privacy_rows(result: Any) -> list[dict[str, str]]:
    """The privacy table's rows as text cells (one per released statistic)."""
    out = []
    for row in result.privacy:
        formula, recomputed = _derivation(row)
        gaussian = "mu" in row
        out.append(
            {
                "stage": str(row.get("stage", "")),
                "release": str(row.get("release", "")),
                "mechanism": str(row.get("mechanism", "")),
                "guarantee": str(row.get("guarantee", "")),
                "count": str(row.get("count", 1)),
                "epsilon": _num(row.get("epsilon")) + (" (reported)" if gaussian else ""),
                "delta": _num(row.get("delta"))
                if row.get("delta") is not None
                else "0"
                if not gaussian
                else "-",
                "GDP mu": _num(row.get("mu")),
                "sensitivity": _num(row.get("sensitivity"))
                + (f" [{row['sensitivity_units']}]" if row.get("sensitivity_units") else ""),
                "sigma or scale": _num(row.get("noise")),
                "re-derived": f"{formula} = {recomputed}" if recomputed else formula,
                "drawn on": where_drawn(row.get("released_on")),
            }
        )
    return out


def privacy_table_html(result: Any) -> str:
    """The privacy table (every part, the composed total) as an HTML fragment."""
    cells = privacy_rows(result)
    head = "".join(f"<th>{_e(c)}</th>" for c in _PRIVACY_COLUMNS)
    body = []
    for row, cell in zip(result.privacy, cells):
        kind = "gaussian" if "mu" in row else "pure"
        data = (
            f'data-kind="{kind}" data-count="{int(row.get("count", 1))}" '
            f'data-mu="{row.get("mu", "")}" data-epsilon="{row.get("epsilon", "")}"'
        )
        body.append(
            f'<tr class="part" {data}>'
            + "".join(
                f'<td class="{"num" if c in ("count", "epsilon", "delta", "GDP mu") else ""}">'
                f"{_e(cell[c])}</td>"
                for c in _PRIVACY_COLUMNS
            )
            + "</tr>"
        )
    meta = result.meta
    total = (
        f'<tr class="total"><td colspan="5">total of the analysis (exact composition of all '
        f'parts)</td><td class="num" id="composed-epsilon">{_num(meta.get("composed_epsilon"))}'
        f'</td><td class="num" id="total-delta">{_num(meta.get("delta"))}</td>'
        f'<td colspan="{len(_PRIVACY_COLUMNS) - 7}">budget of the analysis: epsilon='
        f'<span id="total-epsilon">{_num(meta.get("epsilon"))}</span>, delta='
        f"{_num(meta.get('delta'))}</td></tr>"
    )
    return (
        f'<table id="privacy-table"><tr>{head}</tr>{"".join(body)}{total}</table>'
        '<p class="note">Gaussian parts are composed in Gaussian DP (mu adds in squares); '
        "the epsilon-DP parts (exponential mechanism, counts) and the Gaussian parts are "
        "composed exactly (docs/privacy.md); the composed epsilon is at the analysis's delta. "
        "The epsilon shown for a Gaussian part is the (epsilon, delta) the part alone "
        "satisfies, for reference: the parts do NOT add up in epsilon.</p>"
    )


def _kv(items: Sequence[tuple[str, Any]], table_id: str) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    return f'<table id="{table_id}">{rows}</table>'


def _chunking(meta: dict[str, Any]) -> str:
    chunks = meta.get("row_chunks")
    if not chunks:
        return "rows free to cut (in memory) or not recorded"
    sizes = sorted({int(c) for c in chunks})
    return f"{len(chunks)} row chunks of {', '.join(map(str, sizes[:4]))} rows" + (
        " ..." if len(sizes) > 4 else ""
    )


def ledger_rows(result: Any, budget: Any) -> list[dict[str, Any]]:
    """The ledger's rows charged by this analysis (matched by its ids), as dictionaries."""
    ids = {result.meta.get("analysis_id"), result.meta.get("directions_fit_id")} - {None, ""}
    return [
        row
        for row in budget.as_dict()["releases"]
        if row["fit_id"] in ids or any(i in row["label"] for i in ids)
    ]


def _ledger_cost(row: dict[str, Any]) -> str:
    parts = row.get("parts") or []
    if not parts:
        return (
            f"GDP mu={row['mu']:.6g} (epsilon={_num(row['epsilon'])}, delta={_num(row['delta'])})"
        )
    counts: dict[str, int] = {}
    for part in parts:
        if "mu" in part:
            text = f"GDP mu={part['mu']:.6g}"
        elif "delta" not in part:
            text = f"epsilon={part['epsilon']:.6g}"
        else:
            text = f"(epsilon={part['epsilon']:.6g}, delta={part['delta']:.3g})"
        counts[text] = counts.get(text, 0) + 1
    return " + ".join(f"{n} x {t}" if n > 1 else t for t, n in counts.items())


def _ledger_section(result: Any, budget: Any) -> str:
    if budget is None:
        return (
            "<p class='note'>No ledger was given to the report: the analysis's own table "
            "above is its whole cost.</p>"
        )
    rows = ledger_rows(result, budget)
    cols = ("id", "state", "reserved (UTC)", "cost", "dataset", "label")
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{_e(c)}</td>"
            for c in (
                r["id"],
                r["state"],
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["reserved_at"])),
                _ledger_cost(r),
                dataset_name(r["dataset"]),
                r["label"],
            )
        )
        + "</tr>"
        for r in rows
    )
    facts = [
        ("ledger", budget.ledger or "(in memory)"),
        ("ledger totals", f"epsilon={budget.epsilon:g}, delta={budget.delta:g}"),
        ("spent so far (all releases)", f"epsilon={budget.spent_epsilon:.6g}"),
        (
            "remaining",
            f"one more release of epsilon <= {budget.remaining():.6g} at delta={budget.delta:g}",
        ),
    ]
    head = "".join(f"<th>{c}</th>" for c in cols)
    table = f'<table id="ledger-rows"><tr>{head}</tr>{body}</table>' if rows else ""
    return _kv(facts, "ledger") + table


def render_report(
    result: Any,
    *,
    budget: Any = None,
    reference: Sequence[float] | None = None,
    title: str | None = None,
    seed: int | None = None,
    feature_names: Sequence[str] | None = None,
) -> str:
    """The report of ``result`` as one self-contained HTML document.

    Parameters
    ----------
    result : PrivateAnalysis
    budget : PrivacyBudget, optional
        The ledger the analysis was charged to: its rows for this analysis and what
        remains are shown.
    reference : sequence of float, optional
        Non-private scree values the USER supplies (never computed here): drawn dashed
        and labelled NOT PRIVATE, with a warning at the top of the report.
    title : str, optional
    seed : int, optional
        Seed of the synthetic points (post-processing of the released score map).
    feature_names : sequence of str, optional
        The d features' names for the loadings (default: the input's column names
        recorded in the analysis, else ``x0 .. x{d-1}``).

    Returns
    -------
    str
    """
    meta = result.meta
    score_map = score_map_of(result)
    title = title or f"Private PCA analysis of {dataset_name(meta.get('dataset'))}"
    sections = [
        f"<h1>{_e(title)}</h1>",
        f"<p class='note'>dask-dppca {_e(installed_version())} &middot; analysis "
        f"<code>{_e(meta.get('analysis_id', ''))}</code> &middot; report written "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every number below is a "
        "differentially private release or a public parameter.</p>",
        *(f"<p class='warn'>{_e(w)}</p>" for w in _warnings(meta, reference)),
        *_parameter_sections(result, score_map),
        *_scree_sections(result, reference),
        "<h2>Private directions (loadings)</h2>",
        loadings_html(result, feature_names),
    ]
    if score_map is not None:
        sections += [
            "<h2>Private score map</h2>",
            f"<pre class='note'>{_e(score_map.summary())}</pre>",
            '<div class="figs">'
            + "".join(_figure(*f) for f in score_map_figures(score_map, seed=seed))
            + "</div>",
        ]
    sections += further_stage_sections(result, feature_names)
    sections += [
        "<h2>Privacy: every part of the split</h2>",
        privacy_table_html(result),
        "<h2>Ledger</h2>",
        _ledger_section(result, budget),
        "<h2>How to read this</h2>",
        "<p class='note'>Each Gaussian part adds noise of standard deviation sigma to a "
        "statistic of l2 sensitivity 'sensitivity' (per entry when a vector's entries are "
        "scaled); the part is mu-Gaussian-DP with the mu shown. The exponential mechanism "
        "selects a quantile with Gumbel noise of the scale shown. The 're-derived' column "
        "re-derives each noise scale from the other columns. Sensitivity arguments: "
        "docs/privacy.md of dask-dppca.</p>",
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>"
    )


def dataset_name(dataset: str | None) -> str:
    """The data set as a report's title names it: a path's or URL's last part (the file or
    store name, never a folder of the machine that ran it), else the input's description.

    Examples
    --------
    >>> from dask_dppca.analysis.report import dataset_name
    >>> dataset_name("/home/curator/2026/survey.parquet")
    'survey.parquet'
    >>> dataset_name("s3://bucket/records.zarr/")
    'records.zarr'
    >>> dataset_name("numpy 300 x 4")
    'numpy 300 x 4'
    """
    if not dataset:
        return "a data set"
    text = str(dataset).rstrip("/")
    if "/" not in text:
        return text
    return text.rsplit("/", 1)[1] or text


def _warnings(meta: dict[str, Any], reference: Sequence[float] | None) -> list[str]:
    """What the top of the report must say: a NOT PRIVATE reference, seeded noise."""
    warnings = []
    if reference is not None:
        warnings.append(
            f"This report contains a {NOT_PRIVATE} reference (dashed, supplied by the user)."
        )
    if meta.get("private") is False:
        warnings.append(
            f"{NOT_PRIVATE}: the noise of this analysis was seeded (random_state), for tests "
            "and examples only."
        )
    return warnings


def _parameter_sections(result: Any, score_map: Any) -> list[str]:
    """The data set's public metadata and the analysis's parameters."""
    meta = result.meta
    k = result.directions.shape[0]
    shares = ", ".join(f"{s}={v:.4g}" for s, v in (meta.get("shares") or {}).items())
    return [
        "<h2>Data set (public metadata)</h2>",
        _kv(
            [
                ("data set", dataset_name(meta.get("dataset")) if meta.get("dataset") else "-"),
                ("records n", meta.get("n_samples")),
                ("features d", meta.get("n_features")),
                ("chunking", _chunking(meta)),
            ],
            "dataset",
        ),
        "<h2>Parameters</h2>",
        _kv(
            [
                ("components k", meta.get("n_components", k)),
                ("total epsilon", _num(meta.get("epsilon"))),
                ("total delta", _num(meta.get("delta"))),
                ("split (public shares)", shares),
                ("scale of the split", _num(meta.get("scale"))),
                ("scree methods", ", ".join(meta.get("methods", result.scree["values"]))),
                *_score_map_parameters(score_map),
                ("software", f"dask-dppca {installed_version()}"),
            ],
            "parameters",
        ),
    ]


def _scree_sections(result: Any, reference: Sequence[float] | None) -> list[str]:
    """The scree's figures, its table of values (and PVE) and the notices."""
    k = result.directions.shape[0]
    head = "".join(f"<th>PC{i + 1}</th>" for i in range(k))
    rows = "".join(
        f"<tr><th>{_e(m)}</th>" + "".join(f'<td class="num">{v:.5g}</td>' for v in vals) + "</tr>"
        for m, vals in result.scree["values"].items()
    )
    if result.scree.get("pve_total") is not None:
        rows += (
            "<tr><th>PVE over all d</th>"
            + "".join(f'<td class="num">{v:.3%}</td>' for v in result.scree["pve_total"])
            + "</tr>"
        )
    figures = scree_figures(result, reference)
    return [
        "<h2>Private scree</h2>",
        '<div class="figs">' + "".join(_figure(*f) for f in figures) + "</div>",
        f"<table id='scree'><tr><th>method</th>{head}</tr>{rows}</table>",
        notes_html(result),
    ]


def further_stage_sections(result: Any, feature_names: Sequence[str] | None = None) -> list[str]:
    """A section per further registered stage the analysis released (its own summary)."""
    from .stages import stage_class, stage_info

    names = feature_names_for(result, feature_names)
    sections = []
    for name, value in getattr(result, "stages", {}).items():
        sections += [
            f"<h2>Private {_e(stage_info(name).title)}</h2>",
            f"<pre class='note' id='stage-{_e(name)}'>"
            f"{_e(stage_class(name).summary(value, names))}</pre>",
        ]
    return sections


def write_report(result: Any, path: str | os.PathLike[str], **kwargs: Any) -> str:
    """Write :func:`render_report` to ``path``; its absolute path."""
    text = render_report(result, **kwargs)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return os.path.abspath(path)
