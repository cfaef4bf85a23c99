"""The g-DPPCA release as one privacy object, built from public inputs only.

:class:`ReleaseMechanism` is the mechanism ``M(X) = eig(K_hat(X) + E)`` with ``E``
symmetric Gaussian noise (vecd law) of scale ``sigma``: everything the privacy proof
needs, fixed before any data is read.  It is made from

* the design plan (``|P|``, the largest degree, the block and tile sizes that bound
  the kernel's rounding error: :class:`~dask_dppca.design.DesignPlan`),
* the spatial sign's bound ``G``,
* the privacy target (epsilon, delta, calibration: a
  :class:`~dask_dppca.privacy.mechanisms.calibration.PrivacyTarget`, valid by construction),
* the noise sampler (its lattice slack and privacy excess).

The estimator plans one, every active budget reserves it whole
(:func:`~dask_dppca.privacy.budget.charging.reserve_release`), and the compute layer runs
:meth:`ReleaseMechanism.release` once, on the trusted worker, on the exact pair sum.
``planning.release_sigma`` builds the same object without data, so the planner's
sigma is the fit's sigma.  Its :meth:`~ReleaseMechanism.describe` becomes
``DPPCA.privacy_``.  Nothing here knows about Dask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernel.fp_state import own_errstate
from .advice import noise_spectral_norm, signal_to_noise
from .calibration import PrivacyTarget
from .charges import GaussianCharge
from .contract import own_noise
from .noise import NoiseSampler, add_symmetric_noise
from .parts import GaussianPart, PrivacyPart

if TYPE_CHECKING:  # the plan and the spatial sign are passed in; nothing else is used
    from ...design import Design, DesignPlan
    from ...kernel import SpatialSign

__all__ = ["PrivateRelease", "ReleaseMechanism"]


@dataclass(frozen=True)
class PrivateRelease:
    """What leaves the trusted node: functions of K_tilde only.

    Attributes
    ----------
    eigenvalues : ndarray, shape (d,)
        Eigenvalues of K_tilde, decreasing.
    components : ndarray, shape (n_components, d)
        Matching unit eigenvectors as rows, sign fixed so the largest-magnitude entry
        is positive (a deterministic post-processing).
    released_on : str
        Where the noise was drawn: a worker's address, or ``"this process"``.
    """

    eigenvalues: np.ndarray
    components: np.ndarray
    released_on: str = "this process"


@dataclass(frozen=True)
class ReleaseMechanism:
    """Sensitivity and sigma of one g-DPPCA release (use :meth:`plan_release` to build it).

    Attributes
    ----------
    design : Design
        The pair design (public).
    plan : DesignPlan
        Its block pairs, ``|P|``, largest degree, block and tile sizes.
    spatial_sign : SpatialSign
        The generalized spatial sign; its bound ``G`` enters the sensitivity.
    target : PrivacyTarget
        The (epsilon, delta, calibration) this release is calibrated to.
    sampler : NoiseSampler
        Draws the noise; its slack and excess are charged.
    design_sensitivity : float
        ``sqrt(2) G^2 max_degree / |P|`` (analytic) or the paper's ``2 G^2 max_degree / |P|``.
    rounding_slack : float
        ``2 G^2`` times the kernel's worst-case rounding error for the plan's blocks
        and tiles.  For the classical calibration, only the part of it that the paper's
        looser sensitivity does not already cover (0 unless n is in the billions).
    sampler_slack, sampler_excess : float
        The sampler's input rounding room and privacy excess at this sigma.
    sensitivity : float
        The total l2 sensitivity the noise is calibrated to.
    sigma : float
        The noise scale (vecd: diagonal ``sigma^2``, off-diagonal ``sigma^2 / 2``).
    """

    design: Design
    plan: DesignPlan
    spatial_sign: SpatialSign
    target: PrivacyTarget
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
        design: Design,
        plan: DesignPlan,
        spatial_sign: SpatialSign,
        target: PrivacyTarget,
        sampler: NoiseSampler,
    ) -> ReleaseMechanism:
        """Calibrate the release of ``plan``'s K_hat (public inputs only).

        * ``"analytic"``: the design's tight sensitivity plus room for floating point,
          ``2 G^2`` times the kernel's worst-case error (docs/privacy.md).
        * ``"classical"``: the paper's sensitivity ``2 G^2 max_degree / |P|``.  It
          exceeds the tight one by ``(2 - sqrt(2)) G^2 max_degree / |P|``, which covers
          the rounding room while n is below about 2e9 (complete design); beyond, the
          rest of the rounding room is added (docs/privacy.md).

        The sampler's lattice step can double when sigma crosses a power of two, so
        its slack and excess are taken at twice a first sigma: an upper bound for the
        final, barely larger, sigma.

        Raises
        ------
        ValueError
            For an unbounded spatial sign (no finite sensitivity).
        """
        if not spatial_sign.is_bounded:
            raise ValueError(
                f"spatial_sign: {spatial_sign.name!r} is unbounded and has no finite sensitivity"
            )
        g2 = spatial_sign.bound**2
        rounding = 2.0 * g2 * plan.rounding_error()
        if target.calibration == "classical":
            design_sensitivity = plan.paper_sensitivity(spatial_sign.bound)
            covered = design_sensitivity - plan.sensitivity(spatial_sign.bound)
            rounding = max(0.0, rounding - covered)
        else:
            design_sensitivity = plan.sensitivity(spatial_sign.bound)
        sensitivity = design_sensitivity + rounding
        n_entries = _n_entries(plan.n_features)
        first_sigma = target.sigma(sensitivity)
        slack = sampler.sensitivity_slack(n_entries, 2.0 * first_sigma)
        excess = sampler.privacy_excess(n_entries, 2.0 * first_sigma)
        sigma = target.sigma(sensitivity + slack, excess=excess)
        return cls(
            design,
            plan,
            spatial_sign,
            target,
            sampler,
            design_sensitivity,
            rounding,
            slack,
            excess,
            sensitivity + slack,
            sigma,
        )

    @property
    def epsilon(self) -> float:
        """The target epsilon."""
        return self.target.epsilon

    @property
    def delta(self) -> float:
        """The target delta."""
        return self.target.delta

    @property
    def calibration(self) -> str:
        """The target's calibration."""
        return self.target.calibration

    @property
    def charge(self) -> GaussianCharge:
        """What every active budget charges for this release: its :attr:`parts` and the
        sampler's excess (a :class:`~.contract.ChargedGaussian`: the ledger keeps the
        sensitivity, sigma and excess of a Gaussian row).
        """
        return GaussianCharge(
            self.sensitivity, self.sigma, self.sampler_excess, self.epsilon, self.delta
        )

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """One Gaussian part, ``mu = sensitivity / sigma`` (the sampler's excess is charged
        beside it: :attr:`charge`).
        """
        return (GaussianPart(self.sensitivity / self.sigma),)

    @property
    def is_private(self) -> bool:
        """False when the sampler must never be used for a real release (a test seed)."""
        return bool(self.sampler.is_private)

    @own_errstate
    def release(
        self,
        exact: np.ndarray,
        sampler: NoiseSampler | None = None,
        *,
        n_components: int | None = None,
        released_on: str = "this process",
    ) -> PrivateRelease:
        """Normalise the exact sum, add the noise once, and eigendecompose.

        The only function that sees the exact K_hat and the only one that draws noise;
        the caller makes sure it runs once per fit (the compute layer's release ticket).

        Parameters
        ----------
        exact : ndarray, shape (d, d)
            The exact ``sum_P g g^T`` (never leaves the trusted node).
        sampler : NoiseSampler, optional
            None or the mechanism's own ``sampler``: the noise was planned with it.
        n_components : int, optional
            Number of leading eigenvectors to return (all d by default).
        released_on : str
            Where this runs, for the record.
        """
        noise = own_noise(self, self.sampler, sampler)
        k_hat = np.asarray(exact, dtype=np.float64) / float(self.plan.n_pairs)
        k_tilde = add_symmetric_noise(k_hat, self.sigma, noise)
        del k_hat
        eigenvalues, eigenvectors = np.linalg.eigh(k_tilde)
        order = np.argsort(eigenvalues)[::-1]
        eigenvalues = eigenvalues[order]
        keep = order if n_components is None else order[:n_components]
        components = eigenvectors[:, keep].T.copy()
        peaks = np.argmax(np.abs(components), axis=1)
        components *= np.sign(components[np.arange(len(peaks)), peaks])[:, None]
        return PrivateRelease(
            eigenvalues=eigenvalues, components=components, released_on=released_on
        )

    def describe(self) -> dict[str, Any]:
        """Everything needed to re-derive sigma by hand (``DPPCA.privacy_``)."""
        g = self.spatial_sign
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbours": "replace-one",
            "n_samples": self.plan.n_samples,
            "n_features": self.plan.n_features,
            "spatial_sign": g.name,
            "bound_G": g.bound,
            "radius": g.radius,
            "calibration": self.calibration,
            "sensitivity": self.sensitivity,
            "sensitivity_formula": (
                "2 G^2 max_degree / n_pairs (paper: 4 G^2 / n) + rounding_slack + sampler_slack"
                if self.calibration == "classical"
                else "sqrt(2) G^2 max_degree / n_pairs + rounding_slack + sampler_slack"
            ),
            "sigma_formula": (
                "calibrate_sigma(sensitivity, epsilon, delta, calibration, excess=sampler_excess)"
            ),
            "rounding_slack": self.rounding_slack,
            "sampler_slack": self.sampler_slack,
            "sampler_excess": self.sampler_excess,
            "sigma": self.sigma,
            "noise_law": "vecd: diagonal N(0, sigma^2), off-diagonal N(0, sigma^2/2), independent",
            "signal_bound": g.bound**2,
            "noise_spectral_norm": noise_spectral_norm(self.sigma, self.plan.n_features),
            "signal_to_noise": signal_to_noise(g.bound, self.sigma, self.plan.n_features),
            "released": RELEASED,
            "sampler": type(self.sampler).__name__,
            "private": self.is_private,
            **self.design.describe(),
            **self.plan.describe(),
        }


#: What the release is, for the report: the eigenvalues are of a Kendall matrix, not variances.
RELEASED = (
    "eigenvalues and leading eigenvectors of K_tilde = K_hat + E, the noisy multivariate "
    "Kendall (spatial-sign) matrix; its eigenvalues are not variances (trace K_hat <= G^2), "
    "and kendall_eigenvalue_ratio_ is their share, not a share of variance"
)


def _n_entries(n_features: int) -> int:
    """Entries of vecd(K): the upper triangle with the diagonal."""
    return n_features * (n_features + 1) // 2
