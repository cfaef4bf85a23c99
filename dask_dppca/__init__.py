"""dask-dppca: robust, differentially private PCA (g-DPPCA) at cluster scale.

Layers, lowest first (CONTRIBUTING.md, "Layout"; :data:`dask_dppca.layers.LAYERS`): ``kernel``
(numpy + numba block-pair sums), ``design`` (pair designs and block planning), ``io`` and
``graph`` (inputs, the Dask task graph), ``privacy`` (calibration, noise, the mechanisms,
the budget; no Dask), ``compute`` (where and how a graph runs, the trusted release),
``planning`` (plans before anything is read), ``decomposition`` (the estimator, result
files), ``analysis`` (the stage contract, its registry, ``analyze``); ``app`` and ``cli``
are the shells over them.

The public names are imported on first use (PEP 562), so ``import dask_dppca`` and
the command line's ``--help`` do not pay for Dask, numba and scikit-learn up front.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .lazy import lazy_exports
from .version import installed_version

# The library's logger (fit start and end, the plan, where the noise was drawn): silent
# until the application configures logging, as a library's logger should be.
logging.getLogger(__name__).addHandler(logging.NullHandler())

#: Public name -> module that defines it.
_PUBLIC = {
    "DPPCA": "decomposition.estimator",
    "PrivateRobustScaler": "decomposition.scaler",
    "analyze": "analysis.run",
    "PrivateAnalysis": "analysis.result",
    "plan_analysis": "analysis.plan",
    "AnalysisPlan": "analysis.plan",
    "Compute": "analysis.options",
    "DirectionsStage": "analysis.stages.directions",
    "ScreeStage": "analysis.stages.scree",
    "ScoreMapStage": "analysis.stages.score_map",
    "MedianStage": "analysis.stages.median",
    "ScaleStage": "analysis.stages.scale",
    "kendall_matrix": "decomposition.reference",
    "sin_theta": "decomposition.metrics",
    "PrivacyBudget": "privacy.budget.privacy_budget",
    "GaussianCharge": "privacy.mechanisms.charges",
    "BudgetExceededError": "privacy.budget.privacy_budget",
    "LedgerError": "privacy.budget.privacy_budget",
    "LedgerReplacedError": "privacy.budget.privacy_budget",
    "set_default_budget": "privacy.budget.charging",
    "active_budgets": "privacy.budget.charging",
    "CompleteDesign": "design",
    "RegularDesign": "design",
    "SpatialSign": "kernel.spatial_sign",
    "sphere": "kernel.spatial_sign",
    "winsor": "kernel.spatial_sign",
    "custom": "kernel.spatial_sign",
    "UntrustedReleaseWarning": "compute.trusted.placement",
    "ClusterStalledError": "compute.waits",
    "PrivacyWarning": "privacy.mechanisms.advice",
    "NoisyReleaseWarning": "privacy.mechanisms.advice",
    "LargeDeltaWarning": "privacy.mechanisms.advice",
    "PrivacyReport": "privacy.report",
    "load_result": "decomposition.loading",
}

__all__ = list(_PUBLIC)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    __version__: str
    from .analysis.options import Compute  # noqa: F401
    from .analysis.plan import AnalysisPlan, plan_analysis  # noqa: F401
    from .analysis.result import PrivateAnalysis  # noqa: F401
    from .analysis.run import analyze  # noqa: F401
    from .analysis.stages.directions import DirectionsStage  # noqa: F401
    from .analysis.stages.median import MedianStage  # noqa: F401
    from .analysis.stages.scale import ScaleStage  # noqa: F401
    from .analysis.stages.score_map import ScoreMapStage  # noqa: F401
    from .analysis.stages.scree import ScreeStage  # noqa: F401
    from .compute.trusted.placement import UntrustedReleaseWarning  # noqa: F401
    from .compute.waits import ClusterStalledError  # noqa: F401
    from .decomposition.estimator import DPPCA  # noqa: F401
    from .decomposition.loading import load_result  # noqa: F401
    from .decomposition.metrics import sin_theta  # noqa: F401
    from .decomposition.reference import kendall_matrix  # noqa: F401
    from .decomposition.scaler import PrivateRobustScaler  # noqa: F401
    from .design import CompleteDesign, RegularDesign  # noqa: F401
    from .kernel.spatial_sign import SpatialSign, custom, sphere, winsor  # noqa: F401
    from .privacy.budget.charging import active_budgets, set_default_budget  # noqa: F401
    from .privacy.budget.privacy_budget import (  # noqa: F401
        BudgetExceededError,
        LedgerError,
        LedgerReplacedError,
        PrivacyBudget,
    )
    from .privacy.mechanisms.advice import LargeDeltaWarning, NoisyReleaseWarning, PrivacyWarning  # noqa: F401
    from .privacy.mechanisms.charges import GaussianCharge  # noqa: F401
    from .privacy.report import PrivacyReport  # noqa: F401


_public_attribute, _public_names = lazy_exports(
    __name__, {name: f".{module}" for name, module in _PUBLIC.items()}
)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on first use (dask_dppca.version)
        value = globals()["__version__"] = installed_version()
        return value
    return _public_attribute(name)


def __dir__() -> list[str]:
    return sorted({*_public_names(), "__version__"})
