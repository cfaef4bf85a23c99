"""Which privacy budgets this process holds open: the process-wide state of the budgets.

The budgets whose ``with`` block is open in any thread (in entry order, with their
depth), and the in-memory budgets by pickling token (an in-memory budget unpickled in
its own process is itself).  :func:`publish_budgets` registers the default and the open
budgets for child processes (:mod:`.lineage`); which of them a fit charges is
:mod:`.charging`'s job.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Protocol

from . import lineage
from .ledger import ledger_path


class OpenBudget(Protocol):
    """What the registry reads of a budget (budget.py's ``PrivacyBudget`` registers itself
    here; the registry does not import it).
    """

    @property
    def ledger(self) -> str | None:
        """Its ledger file, or None in memory."""
        ...


__all__ = [
    "BUDGET_ENV",
    "OpenBudget",
    "enter_budget",
    "exit_budget",
    "find_in_memory",
    "open_budgets",
    "publish_budgets",
    "remember_in_memory",
]

#: Environment variable naming the ledger of the default budget (inherited by child
#: processes); see :mod:`~dask_dppca.privacy.budget.charging`.
BUDGET_ENV = "DASK_DPPCA_BUDGET"

#: What tells budgets apart: ``("file", path)`` or ``("memory", token)``.
BudgetKey = tuple[str, str | None]

_STATE_LOCK = threading.RLock()
_OPEN: dict[BudgetKey, list[Any]] = {}  # key -> [budget, depth], in entry order
_IN_MEMORY: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def publish_budgets() -> None:
    """Register this process's default and open budgets for its child processes
    (:mod:`~dask_dppca.privacy.budget.lineage`).
    """
    with _STATE_LOCK:
        opened = [budget for budget, _ in _OPEN.values()]
        ledgers = [budget.ledger for budget in opened if budget.ledger is not None]
        default = os.environ.get(BUDGET_ENV)
        if default:
            try:
                ledgers.insert(0, ledger_path(default))
            except ValueError:
                pass  # a fit here refuses it (charging.default_budget)
        memory = any(budget.ledger is None for budget in opened)
        lineage.register(list(dict.fromkeys(ledgers)), memory)


def open_budgets() -> list[Any]:
    """The budgets whose ``with`` block is open in any thread of this process, in entry order."""
    with _STATE_LOCK:
        return [budget for budget, _ in _OPEN.values()]


def enter_budget(key: BudgetKey, budget: OpenBudget) -> None:
    """Open one more ``with`` block of ``budget`` (told apart by ``key``)."""
    with _STATE_LOCK:
        entry = _OPEN.setdefault(key, [budget, 0])
        entry[1] += 1
        if entry[1] == 1:
            publish_budgets()  # for child processes, whenever they were started


def exit_budget(key: BudgetKey) -> None:
    """Close one ``with`` block of the budget ``key``; the last one closes it."""
    with _STATE_LOCK:
        entry = _OPEN[key]
        entry[1] -= 1
        if entry[1] == 0:
            del _OPEN[key]
            publish_budgets()


def remember_in_memory(token: str, budget: OpenBudget) -> None:
    """Keep (weakly) the in-memory ``budget`` under its pickling ``token``."""
    _IN_MEMORY[token] = budget


def find_in_memory(token: str) -> Any:
    """The in-memory budget of ``token`` in this process, if it is still alive."""
    return _IN_MEMORY.get(token)
