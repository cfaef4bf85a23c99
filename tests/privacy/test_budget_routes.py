"""One table of the routes by which a budget is named (charging.ROUTES).

The resolver walks the table in order: its order is the precedence (which budget object
is charged for a ledger named twice, the order of the reservations, whose refusal comes
first), and docs/privacy.md lists the same routes in the same order.  Swapping two rows
changes what the resolver returns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dask_dppca.privacy import PrivacyBudget, set_default_budget
from dask_dppca.privacy.budget import charging
from dask_dppca.privacy.budget.charging import BUDGET_ENV, ROUTES, resolve_budgets
from dask_dppca.privacy.budget.ledger_rows import LedgerError

DOCS = Path(__file__).parents[2] / "docs" / "privacy.md"


@pytest.fixture
def ledgers(tmp_path, monkeypatch):
    """Four ledgers, and no default before or after."""
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    paths = [str(tmp_path / f"{name}.ledger") for name in "abcd"]
    for path in paths:
        PrivacyBudget(1.0, 1e-5, ledger=path, create=True)
    yield paths
    set_default_budget(None)


def _resolved(paths):
    """Resolve with a default (a), a with block (b), a carried (c), a configured (d)."""
    a, b, c, d = paths
    set_default_budget(a)
    with PrivacyBudget.open(b):
        found = resolve_budgets(carried=[PrivacyBudget.open(c)], named=[("key", d)])
    return [Path(budget.ledger).stem for budget in found]


def test_the_table_is_the_precedence(ledgers):
    assert [route.name for route in ROUTES] == [
        "default",
        "with-block",
        "ancestor",
        "carried",
        "configured",
    ]
    assert _resolved(ledgers) == ["a", "b", "c", "d"]


def test_swapping_two_routes_changes_the_resolution(ledgers, monkeypatch):
    swapped = (ROUTES[1], ROUTES[0], *ROUTES[2:])
    monkeypatch.setattr(charging, "ROUTES", swapped)
    assert _resolved(ledgers) == ["b", "a", "c", "d"]


def test_the_first_route_naming_a_ledger_gives_its_budget(ledgers):
    default = set_default_budget(ledgers[0])
    with PrivacyBudget.open(ledgers[0]) as opened:
        assert opened is not default
        assert resolve_budgets(named=[("key", ledgers[0])]) == (default,)


def test_the_first_route_s_refusal_comes_first(ledgers, monkeypatch, tmp_path):
    monkeypatch.setenv(BUDGET_ENV, str(tmp_path / "missing.ledger"))
    with pytest.raises(LedgerError, match=BUDGET_ENV):
        resolve_budgets(named=[("key", str(tmp_path / "also-missing.ledger"))])
    monkeypatch.delenv(BUDGET_ENV)
    with pytest.raises(LedgerError, match="key="):
        resolve_budgets(named=[("key", str(tmp_path / "also-missing.ledger"))])


def test_the_docs_list_the_routes_of_the_table():
    """docs/privacy.md's table: the same routes, in the same order, the same words."""
    rows = re.findall(r"^\| `([a-z-]+)` \| (.+) \| (.+) \|$", DOCS.read_text(), re.MULTILINE)
    assert [name for name, _, _ in rows] == [route.name for route in ROUTES]
    for (_, named_by, refusal), route in zip(rows, ROUTES, strict=True):
        assert named_by.replace("`", "") == route.named_by.replace("`", "")
        assert refusal == (route.refusal or "never")
