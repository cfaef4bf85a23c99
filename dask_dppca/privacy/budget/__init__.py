"""The privacy budget's books: composition, the ledger, charging, shared budgets.

One floor above :mod:`dask_dppca.privacy.mechanisms` (it adds up what the mechanisms
cost, and never the other way round).  :class:`~.privacy_budget.PrivacyBudget` and its
errors are named here as they were when this was one module, ``dask_dppca.privacy.budget``.
"""

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

_EXPORTS = dict.fromkeys(
    (
        "BudgetExceededError",
        "LedgerError",
        "LedgerReplacedError",
        "PrivacyBudget",
        "Release",
        "Reservation",
    ),
    ".privacy_budget",
)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .privacy_budget import (
        BudgetExceededError,
        LedgerError,
        LedgerReplacedError,
        PrivacyBudget,
        Release,
        Reservation,
    )

__all__ = [
    "BudgetExceededError",
    "LedgerError",
    "LedgerReplacedError",
    "PrivacyBudget",
    "Release",
    "Reservation",
]
