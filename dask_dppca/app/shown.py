"""What the app shows of a release, and its lines: post-processing of released values
and public parameters only (nothing here reads data or spends budget).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..analysis.result import pve_topk
from ..privacy.budget.privacy_budget import BudgetExceededError, PrivacyBudget

__all__ = [
    "analyses_of",
    "bounded_pve",
    "first_k",
    "merge_bins",
    "merge_choices",
    "one_line",
    "refusal_line",
]

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
TABLE_CSS = """
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #bbb;padding:2px 5px;text-align:left;vertical-align:top}
th{background:#f0f0f4}tr.total td{font-weight:bold;background:#f7f7fa}
"""
PAGE_CSS = """
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


def text_of(widget: Any) -> str:
    """A text widget's value, stripped ("" when empty)."""
    return str(widget.value or "").strip()


def number_of(widget: Any, name: str) -> float:
    """A number widget's value; ValueError naming the field when empty or not a number."""
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
    from ..privacy.mechanisms.histogram import NoisyHistogram

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
