"""The privacy layer: sigma calibration, float-safe noise and the privacy budget.

``calibration``: analytic (Balle & Wang 2018) and classical Gaussian calibrations and
the exact Gaussian privacy profile.  ``noise``: vecd and the float-safe samplers.
``budget``: tight (Gaussian-DP) composition of releases, kept in a ``ledger`` (in
memory or a SQLite file).  docs/privacy.md holds the arguments; ``release`` (the
trusted release task) builds on these.
"""

from .budget import BudgetExceededError, LedgerError, PrivacyBudget, Release, Reservation
from .charging import active_budgets, current_budget, reserve_release, set_default_budget
from .calibration import (
    analytic_gaussian_sigma,
    calibrate_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    gaussian_dp_delta,
    gaussian_dp_epsilon,
    gaussian_dp_mu,
    validate_privacy_parameters,
)
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
    "PrivacyBudget",
    "Release",
    "current_budget",
    "LedgerError",
    "Reservation",
    "active_budgets",
    "reserve_release",
    "set_default_budget",
    "analytic_gaussian_sigma",
    "calibrate_sigma",
    "classical_gaussian_sigma",
    "gaussian_delta",
    "gaussian_dp_delta",
    "gaussian_dp_epsilon",
    "gaussian_dp_mu",
    "validate_privacy_parameters",
    "LatticeSampler",
    "NoiseSampler",
    "NonPrivateRandomStateWarning",
    "OpenDPSampler",
    "SeededSampler",
    "add_symmetric_noise",
    "default_sampler",
    "lattice_step",
    "vecd",
    "vecd_inverse",
]
