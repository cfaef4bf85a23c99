"""Layer 4, the privacy layer: every privacy claim in one folder, and no Dask in it.

Two rooms, the budget above the mathematics (tests/test_layering.py keeps the arrows
pointing down):

* :mod:`.mechanisms`, the mathematics: ``calibration`` (analytic and classical Gaussian
  calibrations, the exact Gaussian privacy profile, :class:`.PrivacyTarget`),
  ``accounting`` and ``parts`` (what a release costs and how costs compose),
  ``noise`` (vecd and the float-safe samplers), ``contract`` (what every mechanism
  offers), ``charges``, and one module a mechanism: ``mechanism`` (the g-DPPCA
  release), ``scree``, ``laplace``, ``quantile``, ``median``, ``scale``, ``frame``,
  ``histogram``, ``score_map``; ``advice`` warns from public quantities.
* :mod:`.budget`, the books: ``privacy_budget`` (tight composition of releases),
  its ``ledger`` (in memory or a SQLite file: ``ledger_file``, ``ledger_rows``,
  ``ledger_chain``), ``arithmetic``, ``charging`` (which budgets a fit charges),
  ``registry`` and ``lineage`` (budgets shared across processes and files),
  ``report``.

Beside them, what a release says about itself, read from released values only:
``report`` (:class:`.PrivacyReport`) and ``notices``.  docs/privacy.md holds the
arguments.  The compute layer (:mod:`dask_dppca.compute`) runs a mechanism on a
cluster; tests/test_layering.py keeps dask and distributed out of this package.

The modules' paths before the two rooms (``dask_dppca.privacy.noise``, ...) still import,
with a DeprecationWarning, for one release (:func:`dask_dppca.lazy.moved_modules`).
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports, moved_modules

#: Public name -> the submodule defining it (imported on first use: :mod:`dask_dppca.lazy`).
_EXPORTS = {
    "BudgetExceededError": ".budget.privacy_budget",
    "GaussianCharge": ".mechanisms.charges",
    "LedgerError": ".budget.privacy_budget",
    "LedgerReplacedError": ".budget.privacy_budget",
    "PrivacyBudget": ".budget.privacy_budget",
    "Release": ".budget.privacy_budget",
    "Reservation": ".budget.privacy_budget",
    "PrivacyTarget": ".mechanisms.calibration",
    "analytic_gaussian_sigma": ".mechanisms.calibration",
    "calibrate_sigma": ".mechanisms.calibration",
    "classical_gaussian_sigma": ".mechanisms.calibration",
    "gaussian_delta": ".mechanisms.calibration",
    "gaussian_dp_delta": ".mechanisms.calibration",
    "gaussian_dp_epsilon": ".mechanisms.calibration",
    "gaussian_dp_mu": ".mechanisms.calibration",
    "validate_privacy_parameters": ".mechanisms.calibration",
    "active_budgets": ".budget.charging",
    "CompositeMechanism": ".mechanisms.contract",
    "Mechanism": ".mechanisms.contract",
    "current_budget": ".budget.charging",
    "reserve_release": ".budget.charging",
    "set_default_budget": ".budget.charging",
    "PrivateRelease": ".mechanisms.mechanism",
    "ReleaseMechanism": ".mechanisms.mechanism",
    "LatticeSampler": ".mechanisms.noise",
    "NoiseSampler": ".mechanisms.noise",
    "NonPrivateRandomStateWarning": ".mechanisms.noise",
    "OpenDPSampler": ".mechanisms.noise",
    "SeededSampler": ".mechanisms.noise",
    "add_symmetric_noise": ".mechanisms.noise",
    "default_sampler": ".mechanisms.noise",
    "make_sampler": ".mechanisms.contract",
    "SAMPLER_KINDS": ".mechanisms.contract",
    "lattice_step": ".mechanisms.noise",
    "vecd": ".mechanisms.noise",
    "vecd_inverse": ".mechanisms.noise",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

#: The modules' paths before the two rooms -> where they live now (deprecated aliases).
_MOVED = {
    **{
        name: f"mechanisms.{name}"
        for name in (
            "accounting",
            "advice",
            "calibration",
            "charges",
            "contract",
            "frame",
            "histogram",
            "laplace",
            "mechanism",
            "median",
            "noise",
            "parts",
            "quantile",
            "scale",
            "score_map",
            "scree",
        )
    },
    "budget_arithmetic": "budget.arithmetic",
    "budget_registry": "budget.registry",
    "budget_report": "budget.report",
    "charging": "budget.charging",
    "ledger": "budget.ledger",
    "ledger_chain": "budget.ledger_chain",
    "ledger_file": "budget.ledger_file",
    "ledger_rows": "budget.ledger_rows",
    "lineage": "budget.lineage",
}
moved_modules(__name__, _MOVED, removed_in="0.3")

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .budget.charging import active_budgets, current_budget, reserve_release, set_default_budget
    from .budget.privacy_budget import (
        BudgetExceededError,
        LedgerError,
        LedgerReplacedError,
        PrivacyBudget,
        Release,
        Reservation,
    )
    from .mechanisms.calibration import (
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
    from .mechanisms.charges import GaussianCharge
    from .mechanisms.contract import SAMPLER_KINDS, CompositeMechanism, Mechanism, make_sampler
    from .mechanisms.mechanism import PrivateRelease, ReleaseMechanism
    from .mechanisms.noise import (
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
    "SAMPLER_KINDS",
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
    "make_sampler",
    "reserve_release",
    "set_default_budget",
    "validate_privacy_parameters",
    "vecd",
    "vecd_inverse",
]
