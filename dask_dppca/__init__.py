"""dask-dppca: robust, differentially private PCA (g-DPPCA) at cluster scale.

Layers (design.md): ``kernel`` (numpy block-pair sums), ``graph`` (Dask tasks and the
reduction), ``privacy`` (calibration, noise, budget, trusted release); ``estimator``
and ``cli`` are thin shells over them.
"""

from .design import CompleteDesign, RegularDesign
from .estimator import DPPCA, kendall_matrix
from .privacy.budget import BudgetExceededError, PrivacyBudget
from .theory import sin_theta
from .transforms import Transform, custom, sphere, winsor

__all__ = [
    "DPPCA",
    "kendall_matrix",
    "sin_theta",
    "PrivacyBudget",
    "BudgetExceededError",
    "CompleteDesign",
    "RegularDesign",
    "Transform",
    "sphere",
    "winsor",
    "custom",
]

__version__ = "0.1.0"
