"""The directions stage: a DPPCA fit at the directions' share.

The fit is a :class:`~dask_dppca.decomposition.estimator.DPPCA`; its part is the noisy
Kendall matrix's Gaussian release.  The fit's (epsilon, delta) is the largest whose mu
stays within the split's, and the fit claims the analysis's reservation itself (its
exact release mechanism, planned before anything is read).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...decomposition.estimator import DPPCA
from ...kernel import SpatialSign, resolve_spatial_sign
from ...privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ...privacy.mechanisms.calibration import gaussian_dp_epsilon, gaussian_dp_mu
from ...privacy.mechanisms.mechanism import ReleaseMechanism
from ..stage import StageContext, StageOutput

__all__ = ["DirectionsStage", "check_spatial_sign", "directions_row", "directions_target"]

_STAGE = "directions"


def check_spatial_sign(spatial_sign: Any, radius: Any) -> SpatialSign:
    """The directions' spatial sign, checked before anything is read (as the fit does)."""
    sign = resolve_spatial_sign(spatial_sign, radius)
    if not sign.is_bounded:
        raise ValueError(f"spatial_sign: {sign.name!r} is unbounded and has no finite sensitivity")
    return sign


def directions_target(mu: float, delta: float) -> tuple[float, float]:
    """(epsilon, delta) for the directions' fit such that its mu stays <= ``mu``."""
    eps = gaussian_dp_epsilon(mu, delta)
    while gaussian_dp_mu(eps, delta) > mu:
        eps *= 1.0 - 1e-9
    return eps, delta


def directions_row(report: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy table's row of the directions' release."""
    return {
        "stage": _STAGE,
        "release": "directions (noisy Kendall matrix)",
        "mechanism": "Gaussian (vecd)",
        "guarantee": "mu-GDP",
        "mu": report["sensitivity"] / report["sigma"],
        "epsilon": report["epsilon"],
        "delta": report["delta"],
        "sensitivity": report["sensitivity"],
        "noise": report["sigma"],
        "released_on": report["released_on"],
        "count": 1,
    }


@dataclass
class DirectionsStage:
    """The private directions: a DPPCA fit whose mu is the split's.

    Parameters
    ----------
    fit_parameters : dict
        ``DPPCA``'s parameters beyond k, epsilon and delta (spatial sign, radius, design,
        placement, ``random_state``, progress); ``scheduler`` is the analysis's.
    """

    fit_parameters: dict[str, Any] = field(default_factory=dict)
    name: str = _STAGE
    estimator: DPPCA | None = None

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """One Gaussian part: the noisy Kendall matrix."""
        return [PlannedPart(_STAGE, "directions", "gaussian")]

    def planned_release(
        self, n_components: int, split: BudgetSplit, scheduler: Any, records: Any, n_threads: int
    ) -> tuple[Any, ReleaseMechanism]:
        """Build the fit at the split's mu; its block plan and exact release (nothing read).

        The release is what the analysis reserves for this stage, with the others.
        """
        part = split.part(_STAGE, "directions")
        assert hasattr(part, "mu")
        epsilon, delta = directions_target(part.mu, split.delta / 2.0)
        n, d = records.shape
        self.estimator = DPPCA(
            n_components=n_components,
            epsilon=epsilon,
            delta=delta,
            scheduler=scheduler,
            **self.fit_parameters,
        )
        _, plan, release = self.estimator.planned_release(n, d, records.row_chunks, n_threads)
        return plan, release

    def run(self, context: StageContext) -> StageOutput:
        """Fit: the estimator claims its reservation and releases the directions."""
        assert self.estimator is not None, "planned_release comes first"
        self.estimator.fit(context.records)
        return StageOutput(self.estimator, [directions_row(self.estimator.privacy_)])
