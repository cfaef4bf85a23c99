"""dask-dppca: robust, differentially private PCA (g-DPPCA) at cluster scale.

Layers (design.md): ``kernel`` (numpy block-pair sums), ``graph`` (Dask tasks and the
reduction), ``privacy`` (calibration, noise, budget, trusted release); ``estimator``
and ``cli`` are thin shells over them.

The public names are imported on first use (PEP 562), so ``import dask_dppca`` and
the command line's ``--help`` do not pay for Dask, numba and scikit-learn up front.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

#: Public name -> module that defines it.
_PUBLIC = {
    "DPPCA": "estimator",
    "kendall_matrix": "graph",
    "sin_theta": "theory",
    "PrivacyBudget": "privacy.budget",
    "BudgetExceededError": "privacy.budget",
    "LedgerError": "privacy.budget",
    "set_default_budget": "privacy.charging",
    "active_budgets": "privacy.charging",
    "CompleteDesign": "design",
    "RegularDesign": "design",
    "Transform": "transforms",
    "sphere": "transforms",
    "winsor": "transforms",
    "custom": "transforms",
    "UntrustedReleaseWarning": "privacy.runner",
    "ClusterStalledError": "cluster",
}

__all__ = list(_PUBLIC)

try:
    __version__ = version("dask-dppca")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .design import CompleteDesign, RegularDesign
    from .cluster import ClusterStalledError
    from .estimator import DPPCA
    from .graph import kendall_matrix
    from .privacy.runner import UntrustedReleaseWarning
    from .privacy.budget import BudgetExceededError, LedgerError, PrivacyBudget
    from .privacy.charging import active_budgets, set_default_budget
    from .theory import sin_theta
    from .transforms import Transform, custom, sphere, winsor


def __getattr__(name: str) -> Any:
    try:
        module = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'dask_dppca' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
