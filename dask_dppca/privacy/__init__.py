"""Layer 4, the privacy layer: every privacy claim in one folder, and no Dask in it.

``calibration``: analytic (Balle & Wang 2018) and classical Gaussian calibrations, the
exact Gaussian privacy profile, and :class:`.PrivacyTarget`.  ``noise``: vecd and the
float-safe samplers.  ``mechanism``: the g-DPPCA release as one object (sensitivity,
sigma, and the release math: noise once, then the eigendecomposition); ``contract``: what
every mechanism offers (parts, one ``release`` signature, ``describe``).  ``budget``:
tight (Gaussian-DP) composition of releases, kept in a ``ledger`` (in memory or a
SQLite file); ``charging``: which budgets a fit charges.  The score map: ``laplace``
(integer noise), ``quantile`` (the bound-free quantile), ``frame``, ``histogram``
(additive, sparse, group sizes, synthetic points) and ``score_map`` (the stage).
docs/privacy.md holds the arguments.  The compute layer (:mod:`dask_dppca.compute`) runs
a mechanism on a cluster; tests/test_layering.py keeps dask and distributed out of this
package.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

#: Public name -> the submodule defining it (imported on first use: :mod:`dask_dppca.lazy`).
_EXPORTS = {
    "BudgetExceededError": ".budget",
    "GaussianCharge": ".charges",
    "LedgerError": ".budget",
    "LedgerReplacedError": ".budget",
    "PrivacyBudget": ".budget",
    "Release": ".budget",
    "Reservation": ".budget",
    "PrivacyTarget": ".calibration",
    "analytic_gaussian_sigma": ".calibration",
    "calibrate_sigma": ".calibration",
    "classical_gaussian_sigma": ".calibration",
    "gaussian_delta": ".calibration",
    "gaussian_dp_delta": ".calibration",
    "gaussian_dp_epsilon": ".calibration",
    "gaussian_dp_mu": ".calibration",
    "validate_privacy_parameters": ".calibration",
    "active_budgets": ".charging",
    "CompositeMechanism": ".contract",
    "Mechanism": ".contract",
    "current_budget": ".charging",
    "reserve_release": ".charging",
    "set_default_budget": ".charging",
    "PrivateRelease": ".mechanism",
    "ReleaseMechanism": ".mechanism",
    "LatticeSampler": ".noise",
    "NoiseSampler": ".noise",
    "NonPrivateRandomStateWarning": ".noise",
    "OpenDPSampler": ".noise",
    "SeededSampler": ".noise",
    "add_symmetric_noise": ".noise",
    "default_sampler": ".noise",
    "lattice_step": ".noise",
    "vecd": ".noise",
    "vecd_inverse": ".noise",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .budget import (
        BudgetExceededError,
        LedgerError,
        LedgerReplacedError,
        PrivacyBudget,
        Release,
        Reservation,
    )
    from .calibration import (
        PrivacyTarget,
        analytic_gaussian_sigma,
        calibrate_sigma,
        classical_gaussian_sigma,
        gaussian_delta,
        gaussian_dp_delta,
        gaussian_dp_epsilon,
        gaussian_dp_mu,
        validate_privacy_parameters,
    )
    from .charges import GaussianCharge
    from .charging import active_budgets, current_budget, reserve_release, set_default_budget
    from .contract import CompositeMechanism, Mechanism
    from .mechanism import PrivateRelease, ReleaseMechanism
    from .noise import (
        LatticeSampler,
        NoiseSampler,
        NonPrivateRandomStateWarning,
        OpenDPSampler,
        SeededSampler,
        add_symmetric_noise,
        default_sampler,
        lattice_step,
        vecd,
        vecd_inverse,
    )

__all__ = [
    "BudgetExceededError",
    "CompositeMechanism",
    "GaussianCharge",
    "LatticeSampler",
    "LedgerError",
    "LedgerReplacedError",
    "Mechanism",
    "NoiseSampler",
    "NonPrivateRandomStateWarning",
    "OpenDPSampler",
    "PrivacyBudget",
    "PrivacyTarget",
    "PrivateRelease",
    "Release",
    "ReleaseMechanism",
    "Reservation",
    "SeededSampler",
    "active_budgets",
    "add_symmetric_noise",
    "analytic_gaussian_sigma",
    "calibrate_sigma",
    "classical_gaussian_sigma",
    "current_budget",
    "default_sampler",
    "gaussian_delta",
    "gaussian_dp_delta",
    "gaussian_dp_epsilon",
    "gaussian_dp_mu",
    "lattice_step",
    "reserve_release",
    "set_default_budget",
    "validate_privacy_parameters",
    "vecd",
    "vecd_inverse",
]
