"""The report of a privacy budget, from one read of its ledger: plain text
(:meth:`~.privacy_budget.PrivacyBudget.describe`), the notebook's HTML and plain data
(``dask-dppca budget show [--json]``).

Totals, what was spent, what is left, and a table of every release, the stages of one
analysis (release ids ``ANALYSIS.STAGE``) on one line.  Every figure comes from the same
rows, so a concurrent fit cannot split a report.
"""

from __future__ import annotations

import dataclasses
import html
import math
import time
from collections.abc import Sequence
from typing import Any

from ..mechanisms.parts import part_text
from .arithmetic import BudgetArithmetic
from .ledger_rows import Release

__all__ = ["COLUMNS", "render_html", "render_text", "report_data", "stage_name"]

#: The columns of the table of releases.
COLUMNS = (
    "id",
    "state",
    "reserved (UTC)",
    "epsilon",
    "delta",
    "sensitivity",
    "sigma",
    "dataset",
    "label",
)

_STATES = ("committed", "reserved", "cancelled")


def stage_name(fit_id: str) -> str:
    """The stage a release id ``ANALYSIS.STAGE`` names, in words (``score_map``:
    ``score map``); the id itself when it names none.
    """
    return fit_id.rpartition(".")[2].replace("_", " ")


def _analysis_of(row: Release) -> str | None:
    """The analysis a row is a stage of (its id is ``ANALYSIS.STAGE``), or None."""
    head, dot, _ = row.fit_id.rpartition(".")
    return head if dot and head else None


def _by_analysis(rows: Sequence[Release]) -> list[list[Release]]:
    """``rows`` in order, the consecutive stages of one analysis together."""
    groups: list[list[Release]] = []
    for row in rows:
        key = _analysis_of(row)
        if groups and key is not None and _analysis_of(groups[-1][0]) == key:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _analyses_text(counted: Sequence[Release]) -> str:
    """``"; 6 analyses (18 of them)"``: how many analyses the counted rows are stages of."""
    analyses = {key for row in counted if (key := _analysis_of(row)) is not None}
    if not analyses:
        return ""
    stages = sum(_analysis_of(row) is not None for row in counted)
    return f"; {len(analyses)} analys{'is' if len(analyses) == 1 else 'es'} ({stages} of them)"


def _facts(
    arithmetic: BudgetArithmetic, ledger: str | None, rows: Sequence[Release]
) -> list[tuple[str, str]]:
    """The report's ``(name, value)`` lines: totals, ledger, releases, spent, remaining."""
    counted = [r for r in rows if r.counted]
    states = {state: sum(r.state == state for r in rows) for state in _STATES}
    epsilon, delta = arithmetic.epsilon, arithmetic.delta
    plans = ", or ".join(f"{k} of {arithmetic.remaining(counted, k):.4g} each" for k in (2, 4))
    return [
        ("budget", f"epsilon={epsilon:g}, delta={delta:g}"),
        ("ledger", ledger or "(in memory, this process only)"),
        (
            "releases",
            f"{len(counted)} counted ({states['committed']} committed, "
            f"{states['reserved']} reserved), {states['cancelled']} cancelled"
            + _analyses_text(counted),
        ),
        (
            "spent",
            f"epsilon={arithmetic.spent_epsilon(counted):.6g} at delta={delta:g} "
            f"(mu={arithmetic.spent_mu(counted):.6g}; {_composed_text(arithmetic, counted)}"
            "stated at the ledger's delta: a release made at a larger delta shows a smaller "
            "epsilon here than its own total)",
        ),
        (
            "remaining",
            f"one more release of epsilon <= {arithmetic.remaining(counted, 1):.6g} at delta="
            f"{delta:g}, or {plans}",
        ),
    ]


def _composed_text(arithmetic: BudgetArithmetic, counted: Sequence[Release]) -> str:
    """Why the spent total is less than the releases' epsilons added up: they compose
    tightly at the ledger's delta (their Gaussian parts' mu add in squares, the rest by
    their privacy profiles), with that sum beside it when there are several releases
    (an analysis's stages count as one release).
    """
    releases = _by_analysis(counted)
    if len(releases) < 2:
        return ""
    added = sum(arithmetic.spent_epsilon(release) for release in releases)
    return (
        f"the {len(releases)} releases compose tightly at the ledger's delta, so this is "
        f"less than their epsilons at that delta added up ({added:.6g}); "
    )


def _cells(row: Release) -> tuple[str, ...]:
    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row.reserved_at))
    mixed = bool(row.parts)
    return (
        str(row.id),
        row.state,
        when,
        number(row.epsilon),
        number(row.delta),
        "parts" if mixed else f"{row.sensitivity:.4g}",
        "; ".join(part_text(p) for p in row.parts) if mixed else f"{row.sigma:.4g}",
        row.dataset,
        row.label,
    )


def _table_cells(rows: Sequence[Release]) -> list[tuple[str, ...]]:
    """One line per release, the stages of one analysis on one line (its parts)."""
    lines: list[tuple[str, ...]] = []
    for group in _by_analysis(rows):
        if len(group) == 1:
            lines.append(_cells(group[0]))
            continue
        first = _cells(group[0])
        states = sorted({row.state for row in group})
        stages = ", ".join(
            stage_name(row.fit_id) + (f" ({row.state})" if len(states) > 1 else "") for row in group
        )
        parts = [p for row in group if row.counted for p in (row.parts or ())]
        lines.append(
            (
                f"{group[0].id}-{group[-1].id}",
                "/".join(states),
                first[2],
                "-",
                "-",
                "parts",
                f"{len(parts)} parts"
                + (" + a Gaussian" if any(not r.parts for r in group) else ""),
                group[0].dataset,
                f"analysis {_analysis_of(group[0])}: {stages}",
            )
        )
    return lines


def render_text(arithmetic: BudgetArithmetic, ledger: str | None, rows: Sequence[Release]) -> str:
    """The plain-text report of a budget (``arithmetic``, kept in ``ledger``) whose ledger
    holds ``rows``: totals, spent, remaining, and a table of every release.
    """
    lines = [f"{name + ':':<11}{value}" for name, value in _facts(arithmetic, ledger, rows)]
    if rows:
        table = [COLUMNS, *_table_cells(rows)]
        widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
        lines.append("")
        lines += [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table
        ]
    return "\n".join(lines)


def render_html(arithmetic: BudgetArithmetic, ledger: str | None, rows: Sequence[Release]) -> str:
    """The same report as HTML tables (a notebook's view of a budget)."""
    out = ["<div><table>"]
    out += [
        f"<tr><th style='text-align:left'>{html.escape(name)}</th>"
        f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
        for name, value in _facts(arithmetic, ledger, rows)
    ]
    out.append("</table>")
    if rows:
        header = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
        out.append(f"<table><tr>{header}</tr>")
        out += [
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
            for cells in _table_cells(rows)
        ]
        out.append("</table>")
    return "".join(out) + "</div>"


def report_data(
    arithmetic: BudgetArithmetic, ledger: str | None, rows: Sequence[Release]
) -> dict[str, Any]:
    """The report as plain data (what :meth:`~.privacy_budget.PrivacyBudget.as_dict` returns)."""
    counted = [r for r in rows if r.counted]
    spent = arithmetic.spent_epsilon(counted)
    return {
        "ledger": ledger,
        "epsilon": arithmetic.epsilon,
        "delta": arithmetic.delta,
        "counts": {
            **{state: sum(r.state == state for r in rows) for state in _STATES},
            "counted": len(counted),
        },
        "spent": {
            "epsilon": spent if math.isfinite(spent) else None,
            "mu": arithmetic.spent_mu(counted),
        },
        "remaining": {str(k): arithmetic.remaining(counted, k) for k in (1, 2, 4)},
        "releases": [{**dataclasses.asdict(r), "mu": r.mu, "counted": r.counted} for r in rows],
    }
