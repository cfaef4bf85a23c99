"""Which budget the Dask configuration asks a fit to charge, read at fit time.

* :data:`LEDGER_KEY` ``dask-dppca.ledger``: a default ledger charged by every fit of
  every process that sees this configuration: a Dask YAML file (every process of the
  user on that machine), ``dask.config.set`` (this process), or the environment variable
  ``DASK_DASK_DPPCA__LEDGER`` (read again at each fit, so a child started by any method
  after it was set sees it).  It adds to the library's own default
  (``set_default_budget`` / ``DASK_DPPCA_BUDGET``); a ledger named twice is charged once.
* :data:`REQUIRED_KEY` ``dask-dppca.budget-required`` (``DASK_DASK_DPPCA__BUDGET_REQUIRED=1``):
  a fit that finds no budget to charge is refused instead of running uncharged.

The privacy layer reads no Dask configuration: the estimator passes these down as plain
values (:func:`~dask_dppca.privacy.budget.charging.reserve_release`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import dask

from ..privacy import PrivacyBudget
from ..privacy.budget.charging import resolve_budgets

__all__ = [
    "LEDGER_KEY",
    "REQUIRED_KEY",
    "budget_required",
    "budgets_to_charge",
    "configured_ledgers",
]

#: Dask configuration key: a default ledger every fit charges.
LEDGER_KEY = "dask-dppca.ledger"
#: Dask configuration key: refuse a fit that has no budget to charge.
REQUIRED_KEY = "dask-dppca.budget-required"
_LEDGER_ENV = "DASK_DASK_DPPCA__LEDGER"
_REQUIRED_ENV = "DASK_DASK_DPPCA__BUDGET_REQUIRED"


def budgets_to_charge(carried: Iterable[PrivacyBudget] = ()) -> tuple[PrivacyBudget, ...]:
    """Every budget a release made now must charge: the one place that answers it.

    Every path that draws noise (a directions fit, each stage of an analysis, the app)
    asks here, so a new stage cannot forget a way of naming a budget: the active ones
    (the default, ``with`` blocks, a parent process's), ``carried`` (an estimator's,
    :class:`~dask_dppca.privacy.budget.charging.BudgetCarrier`), and the ledgers of the Dask
    configuration (:data:`LEDGER_KEY` and its environment variable); with
    :data:`REQUIRED_KEY` set and none of them, the release is refused.  (The ledger
    configured where the noise is drawn is charged there, :mod:`.site_ledger`.)

    Raises
    ------
    BudgetRequiredError
        Required and none.
    LedgerError
        A named ledger cannot be opened.
    """
    return resolve_budgets(carried=carried, named=configured_ledgers(), required=budget_required())


def configured_ledgers() -> list[tuple[str, str]]:
    """``(where, path)`` of each default ledger the configuration names now."""
    named = []
    value = dask.config.get(LEDGER_KEY, None)
    if value not in (None, "", False):
        named.append((LEDGER_KEY, str(value)))
    from_env = os.environ.get(_LEDGER_ENV)  # also when set after Dask read its configuration
    if from_env:
        named.append((_LEDGER_ENV, from_env))
    return named


def budget_required() -> bool:
    """Whether :data:`REQUIRED_KEY` (or its environment variable, read now) is set.

    Raises
    ------
    ValueError
        If it holds no boolean.
    """
    values = [dask.config.get(REQUIRED_KEY, None), os.environ.get(_REQUIRED_ENV)]
    return any(_flag(value) for value in values)


def _flag(value: object) -> bool:
    if value is None or value == "":
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{REQUIRED_KEY}: expected true or false, got {value!r}")
