"""Plots a person can explore on the app's page: pan, zoom and a hover that reads each
released value (Bokeh, which Panel itself renders with).

Post-processing of a release only: every number drawn or shown in a hover is a released
value (the scree values, a cell's noisy count as released, the noise's sigma from the
privacy record) or a public one (the frame's cells).  The static figures of the report
stay as they are; these sit beside them on the page.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TOOLS", "score_map_explorer", "scree_explorer"]

#: The tools of every explorable plot beside its hover: pan, zoom (wheel and box), and
#: back to the whole plot.
TOOLS = ("pan", "wheel_zoom", "box_zoom", "reset")


def scree_explorer(values: dict[str, list[float]], title: str) -> Any:
    """The released scree values of each method, one line each; a hover gives the
    component, the method and its value.

    Parameters
    ----------
    values : dict of str to list of float
        ``result.scree["values"]`` (or the PVE's), already cut to the components shown.
    title : str
    """
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.palettes import Category10_10
    from bokeh.plotting import figure

    hover = HoverTool(
        tooltips=[("component", "@component"), ("method", "@method"), ("value", "@value")]
    )
    plot = figure(
        title=title,
        width=460,
        height=300,
        tools=[*TOOLS, hover],
        x_axis_label="component",
        y_axis_label="released value",
    )
    for colour, (method, released) in zip(Category10_10, values.items()):
        source = ColumnDataSource(
            {
                "component": list(range(1, len(released) + 1)),
                "value": [float(v) for v in released],
                "method": [method] * len(released),
            }
        )
        plot.line("component", "value", source=source, color=colour, legend_label=method)
        plot.scatter("component", "value", source=source, color=colour, size=7)
    plot.xaxis.ticker = list(range(1, 1 + max((len(v) for v in values.values()), default=1)))
    plot.legend.click_policy = "hide"  # a click on a method hides its line
    return plot


def score_map_explorer(score_map: Any, method: str | None = None) -> Any:
    """The released histogram (all groups pooled) on the private frame, one rectangle a
    cell; a hover gives the cell's range on both axes, its noisy count as released
    (summed over the groups, not clipped) and the noise's sigma of a group's cell.

    Parameters
    ----------
    score_map : ScoreMap
        The released score map (merged bins allowed: a release's post-processing).
    method : str, optional
        ``"additive"`` or ``"sparse"`` (the first released by default).
    """
    from bokeh.models import ColumnDataSource, HoverTool, LinearColorMapper
    from bokeh.palettes import Purples256
    from bokeh.plotting import figure

    hist = score_map.histogram(method)
    mx, my = hist.bins
    released = np.asarray(hist.counts)[:, : mx * my].sum(axis=0).reshape(my, mx)
    x_edges, y_edges = score_map.frame.edges(score_map.bins)
    columns, rows = np.meshgrid(np.arange(mx), np.arange(my))
    ix, iy = columns.ravel(), rows.ravel()
    # A square-root shade, as the report's heat map: the bulk's shoulders show.
    shade = np.sqrt(np.clip(released[iy, ix], 0.0, None))
    source = ColumnDataSource(
        {
            "left": x_edges[ix],
            "right": x_edges[ix + 1],
            "bottom": y_edges[iy],
            "top": y_edges[iy + 1],
            "count": released[iy, ix],
            "shade": shade,
        }
    )
    a, b = score_map.axes
    sigma = "-" if hist.sigma is None else f"{hist.sigma:.3g}"
    hover = HoverTool(
        tooltips=[
            (f"PC{a + 1}", "@left{0.000} to @right{0.000}"),
            (f"PC{b + 1}", "@bottom{0.000} to @top{0.000}"),
            ("noisy count", "@count{0.0}"),
            ("noise sigma (a group's cell)", sigma),
        ]
    )
    plot = figure(
        title=f"private score map ({hist.method}): zoom, pan, hover",
        width=460,
        height=400,
        tools=[*TOOLS, hover],
        x_axis_label=f"PC{a + 1}",
        y_axis_label=f"PC{b + 1}",
        match_aspect=False,
    )
    top = float(shade.max()) if shade.size else 1.0
    mapper = LinearColorMapper(
        palette=list(reversed(Purples256)), low=0.0, high=top if top > 0 else 1.0
    )
    plot.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        source=source,
        fill_color={"field": "shade", "transform": mapper},
        line_color=None,
    )
    return plot
