"""The loadings section of the report: the released directions as a table and a heat
map, and with the scale stage the same directions in the original units
(post-processing of released values).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np

from .features import feature_names_for
from .figures import figure_html as _figure
from .figures import figure_png
from .figures import matplotlib_agg as _matplotlib

__all__ = ["MAX_LOADINGS_ROWS", "loadings_figure", "loadings_html"]


def _e(value: Any) -> str:
    return html.escape(str(value))


#: At most this many features in the loadings table and plot (the largest first beyond).
MAX_LOADINGS_ROWS = 60


def _loading_rows(directions: np.ndarray) -> tuple[list[int], bool]:
    d = directions.shape[1]
    if d <= MAX_LOADINGS_ROWS:
        return list(range(d)), False
    strongest = np.argsort(-np.abs(directions).max(axis=0), kind="stable")[:MAX_LOADINGS_ROWS]
    return sorted(int(j) for j in strongest), True


def loadings_figure(result: Any, names: Sequence[str]) -> tuple[str, str, str]:
    """The loadings as a heat map (features x components) with their values written."""
    plt = _matplotlib()
    v = np.asarray(result.directions, dtype=np.float64)
    rows, cut = _loading_rows(v)
    k = v.shape[0]
    image = v[:, rows].T
    figure, ax = plt.subplots(figsize=(1.2 + 0.75 * k, 0.9 + 0.26 * len(rows)))
    mesh = ax.imshow(image, cmap="RdBu_r", vmin=-1.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(k), [f"PC{i + 1}" for i in range(k)])
    ax.set_yticks(range(len(rows)), [names[j] for j in rows], fontsize=8)
    if len(rows) * k <= 400:
        for (i, j), value in np.ndenumerate(image):
            colour = "white" if abs(value) > 0.6 else "black"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    figure.colorbar(mesh, ax=ax, label="loading")
    ax.set_title("private loadings (released directions)")
    caption = (
        "Each column is a released direction (unit length; its sign is arbitrary): the "
        "weight of each feature in it. Red: positive, blue: negative; the noise of the "
        "release is in every value (the privacy table gives its scale)."
        + (f" Only the {len(rows)} features with the largest loadings are drawn." if cut else "")
    )
    return figure_png(figure), caption, "loadings plot"


def loadings_html(result: Any, feature_names: Sequence[str] | None = None) -> str:
    """The loadings section: a table (features x components) and its plot."""
    names = feature_names_for(result, feature_names)
    v = np.asarray(result.directions, dtype=np.float64)
    rows, cut = _loading_rows(v)
    where = (
        "the input's column names"
        if feature_names is None and result.meta.get("feature_names") is not None
        else "as given"
        if feature_names is not None
        else "x0 .. x{d-1}: the input had no column names (--feature-names names them)"
    )
    note = (
        f"<p class='note'>The released directions (loadings), one column per component, "
        f"one row per feature (names: {_e(where)}). A direction's sign is arbitrary: "
        "flipping a whole column describes the same component."
        + (
            f" Only the {len(rows)} features with the largest loadings are listed; "
            "analysis.json holds them all."
            if cut
            else ""
        )
        + "</p>"
    )
    return (
        note
        + '<div class="figs">'
        + _figure(*loadings_figure(result, names))
        + "</div>"
        + _loadings_table(v, names, rows, "loadings")
        + _original_units_html(result, names, rows)
    )


def _loadings_table(v: np.ndarray, names: Sequence[str], rows: list[int], table_id: str) -> str:
    head = "<th>feature</th>" + "".join(f"<th>PC{i + 1}</th>" for i in range(v.shape[0]))
    body = "".join(
        f"<tr><th>{_e(names[j])}</th>"
        + "".join(
            f'<td class="num" data-value="{float(v[i, j])!r}">{v[i, j]:.4f}</td>'
            for i in range(v.shape[0])
        )
        + "</tr>"
        for j in rows
    )
    return f"<table id='{table_id}'><tr>{head}</tr>{body}</table>"


def _original_units_html(result: Any, names: Sequence[str], rows: list[int]) -> str:
    """With the scale stage: what the scaled coordinates are, and the same directions in
    the original units (post-processing of the released centre and scale).
    """
    scaling = getattr(result, "stages", {}).get("scale")
    if not scaling:
        return ""
    return (
        "<p class='note'>The columns were scaled first by their released centre and scale "
        "(section 'Private scale'): the loadings above are in the scaled coordinates "
        "(x - centre) / scale, unit vectors there. Below, the same linear forms of the "
        "original columns (loading / scale, each component renormalised): how much one "
        "unit of each column moves the score.</p>"
        + _loadings_table(result.original_loadings(), names, rows, "loadings-original")
    )
