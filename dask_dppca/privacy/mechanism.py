"""The g-DPPCA release as one privacy object, built from public inputs only.

:class:`ReleaseMechanism` is the mechanism ``M(X) = eig(K_hat(X) + E)`` with ``E``
symmetric Gaussian noise (vecd law) of scale ``sigma``: everything the privacy proof
needs, fixed before any data is read.  It is made from

* the design plan (``|P|``, the largest degree, the block and tile sizes that bound
  the kernel's rounding error: :class:`~dask_dppca.design.DesignPlan`),
* the transform's bound ``G``,
* epsilon, delta and the calibration,
* the noise sampler (its lattice slack and privacy excess).

The estimator plans one, checks the budget against its sensitivity and sigma, and
hands it to :func:`~dask_dppca.privacy.runner.run_release`; ``theory.release_sigma``
builds the same object without data, so the planner's sigma is the fit's sigma.
Its :meth:`~ReleaseMechanism.describe` is what becomes ``DPPCA.privacy_``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .calibration import CALIBRATIONS, calibrate_sigma, validate_privacy_parameters
from .noise import NoiseSampler

if TYPE_CHECKING:  # the plan and the transform are passed in; nothing else is used
    from ..design import CompleteDesign, DesignPlan, RegularDesign
    from ..transforms import Transform

__all__ = ["ReleaseMechanism"]


@dataclass(frozen=True)
class ReleaseMechanism:
    """Sensitivity and sigma of one g-DPPCA release (use :meth:`plan` to build it).

    Attributes
    ----------
    design : CompleteDesign or RegularDesign
        The pair design (public).
    plan : DesignPlan
        Its block pairs, ``|P|``, largest degree, block and tile sizes.
    transform : Transform
        The generalized spatial sign; its bound ``G`` enters the sensitivity.
    epsilon, delta : float
        The privacy parameters this release is calibrated to.
    calibration : {"analytic", "classical"}
    sampler : NoiseSampler
        Draws the noise; its slack and excess are charged.
    design_sensitivity : float
        ``sqrt(2) G^2 max_degree / |P|`` (analytic) or the paper's ``2 G^2 max_degree / |P|``.
    rounding_slack : float
        ``2 G^2`` times the kernel's worst-case rounding error for the plan's blocks
        and tiles (0 for the classical calibration, loose by sqrt(2) already).
    sampler_slack, sampler_excess : float
        The sampler's input rounding room and privacy excess at this sigma.
    sensitivity : float
        The total l2 sensitivity the noise is calibrated to.
    sigma : float
        The noise scale (vecd: diagonal ``sigma^2``, off-diagonal ``sigma^2 / 2``).
    """

    design: CompleteDesign | RegularDesign
    plan: DesignPlan
    transform: Transform
    epsilon: float
    delta: float
    calibration: str
    sampler: NoiseSampler
    design_sensitivity: float
    rounding_slack: float
    sampler_slack: float
    sampler_excess: float
    sensitivity: float
    sigma: float

    @classmethod
    def plan_release(
        cls,
        design: CompleteDesign | RegularDesign,
        plan: DesignPlan,
        transform: Transform,
        epsilon: float,
        delta: float,
        calibration: str,
        sampler: NoiseSampler,
    ) -> ReleaseMechanism:
        """Calibrate the release of ``plan``'s K_hat (public inputs only).

        * ``"analytic"``: the design's tight sensitivity plus room for floating point,
          ``2 G^2`` times the kernel's worst-case error (docs/privacy.md).
        * ``"classical"``: the paper's sensitivity, already loose by sqrt(2), no
          rounding room.

        The sampler's lattice step can double when sigma crosses a power of two, so
        its slack and excess are taken at twice a first sigma: an upper bound for the
        final, barely larger, sigma.
        """
        epsilon, delta = validate_privacy_parameters(epsilon, delta)
        if calibration not in CALIBRATIONS:
            raise ValueError(f"calibration: unknown value {calibration!r}; expected one of {CALIBRATIONS}")
        if not transform.is_bounded:
            raise ValueError(f"transform: {transform.name!r} is unbounded and has no finite sensitivity")
        g2 = transform.bound**2
        if calibration == "classical":
            rounding, design_sensitivity = 0.0, plan.paper_sensitivity(transform.bound)
        else:
            rounding, design_sensitivity = 2.0 * g2 * plan.rounding_error(), plan.sensitivity(transform.bound)
        sensitivity = design_sensitivity + rounding
        n_entries = _n_entries(plan.n_features)
        first_sigma = calibrate_sigma(sensitivity, epsilon, delta, calibration)
        slack = sampler.sensitivity_slack(n_entries, 2.0 * first_sigma)
        excess = sampler.privacy_excess(n_entries, 2.0 * first_sigma)
        sigma = calibrate_sigma(sensitivity + slack, epsilon, delta, calibration, excess=excess)
        return cls(design, plan, transform, epsilon, delta, calibration, sampler,
                   design_sensitivity, rounding, slack, excess, sensitivity + slack, sigma)

    @property
    def is_private(self) -> bool:
        """False when the sampler must never be used for a real release (a test seed)."""
        return bool(self.sampler.is_private)

    def describe(self) -> dict[str, Any]:
        """Everything needed to re-derive sigma by hand (``DPPCA.privacy_``)."""
        g = self.transform
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbours": "replace-one",
            "n_samples": self.plan.n_samples,
            "n_features": self.plan.n_features,
            "transform": g.name,
            "bound_G": g.bound,
            "radius": g.radius,
            "calibration": self.calibration,
            "sensitivity": self.sensitivity,
            "sensitivity_formula": (
                "2 G^2 max_degree / n_pairs (paper: 4 G^2 / n)" if self.calibration == "classical"
                else "sqrt(2) G^2 max_degree / n_pairs + rounding_slack + sampler_slack"
            ),
            "sigma_formula": "calibrate_sigma(sensitivity, epsilon, delta, calibration, excess=sampler_excess)",
            "rounding_slack": self.rounding_slack,
            "sampler_slack": self.sampler_slack,
            "sampler_excess": self.sampler_excess,
            "sigma": self.sigma,
            "noise_law": "vecd: diagonal N(0, sigma^2), off-diagonal N(0, sigma^2/2), independent",
            "sampler": type(self.sampler).__name__,
            "private": self.is_private,
            **self.design.describe(),
            **self.plan.describe(),
        }


def _n_entries(n_features: int) -> int:
    """Entries of vecd(K): the upper triangle with the diagonal."""
    return n_features * (n_features + 1) // 2
