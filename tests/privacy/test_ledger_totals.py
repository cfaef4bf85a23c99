"""A ledger is held to the rule for a budget's totals on every open, however it was made."""

from __future__ import annotations

import pytest

import dask_dppca as dd
from dask_dppca.privacy.budget import ledger_file
from dask_dppca.privacy.budget.ledger import SQLiteLedger
from dask_dppca.privacy.budget.ledger_rows import LedgerError


@pytest.mark.parametrize("totals", [(1e6, 1e-5), (1.0, 0.5 + 0.5), (1e-9, 1e-5)])
def test_a_ledger_whose_totals_no_budget_accepts_is_refused_on_open(tmp_path, totals):
    path = str(tmp_path / "old.ledger")
    ledger_file.create_file(path, *totals)  # as an older version (or a hand) made it
    with pytest.raises(LedgerError, match="outside what a budget may hold|invalid totals"):
        dd.PrivacyBudget.open(path)
    with pytest.raises(ValueError, match="epsilon|delta"):
        SQLiteLedger.open_or_create(str(tmp_path / "new.ledger"), *totals)


def test_a_ledger_with_sound_totals_opens(tmp_path):
    path = tmp_path / "ok.ledger"
    dd.PrivacyBudget(2.0, 1e-5, ledger=path, create=True)
    assert (dd.PrivacyBudget.open(path).epsilon, dd.PrivacyBudget.open(path).delta) == (2.0, 1e-5)
