"""What a budget charges for a release: its Gaussian charge or its privacy parts.

The mathematics' side of a charge (no ledger, no budget): a mechanism states what it
costs here, and :mod:`.budget` composes it with every release counted before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .contract import ChargedGaussian, CompositeMechanism, Mechanism
from .parts import GaussianPart, PrivacyPart, PureDPPart

__all__ = ["GaussianCharge", "PartsCharge", "charge_of"]


@dataclass(frozen=True)
class GaussianCharge:
    """What a budget charges for one Gaussian release: ``mu = sensitivity / sigma``.

    A mechanism offers its charge as ``mechanism.charge``; the budget's ``check``,
    ``reserve`` and ``spend`` take either
    (:class:`~dask_dppca.privacy.budget.privacy_budget.PrivacyBudget`).

    Attributes
    ----------
    sensitivity : float
        The l2 sensitivity the noise is calibrated to (slack included), >= 0.
    sigma : float
        The noise scale, > 0.
    excess : float
        The sampler's privacy excess (0 for an exact sampler).
    epsilon, delta : float or None
        The release's own calibration target, kept for the record (the budget composes
        ``sensitivity / sigma``, not these).

    Examples
    --------
    >>> import dask_dppca as dd
    >>> charge = dd.GaussianCharge(sensitivity=1.0, sigma=10.0)  # a 0.1-GDP release
    >>> budget = dd.PrivacyBudget(epsilon=1.0, delta=1e-6)
    >>> budget.check(charge)  # fits: no exception
    >>> budget.spend(charge)
    >>> budget.releases
    1
    """

    sensitivity: float
    sigma: float
    excess: float = 0.0
    epsilon: float | None = None
    delta: float | None = None


@dataclass(frozen=True)
class PartsCharge:
    """What a budget charges for a release stated as parts (:mod:`.parts`).

    Mixed parts (Gaussian, pure and approximate DP) are composed exactly with every
    other release (:mod:`.accounting`).  A mechanism offering ``.parts`` (and no
    ``.charge``) is charged this way.

    Attributes
    ----------
    parts : tuple of PrivacyPart
        At least one.
    epsilon, delta : float or None
        For the record only.
    """

    parts: tuple[PrivacyPart, ...]
    epsilon: float | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        if not parts or not all(
            isinstance(p, (GaussianPart, PureDPPart)) or hasattr(p, "delta") for p in parts
        ):
            raise ValueError(f"parts: expected one or more privacy parts, got {self.parts!r}")
        object.__setattr__(self, "parts", parts)


def charge_of(item: Any) -> GaussianCharge | PartsCharge:
    """The charge of a mechanism (:mod:`.contract`: exactly its parts) or a charge itself.

    A :class:`~.contract.Mechanism` or :class:`~.contract.CompositeMechanism` is charged
    its ``parts``.  A :class:`~.contract.ChargedGaussian` (the g-DPPCA release) keeps its
    Gaussian charge, whose row records the sampler's excess beside the part; that charge
    must be its one part.

    Raises
    ------
    TypeError
        For anything else.
    ValueError
        For a Gaussian charge that is not its mechanism's parts.
    """
    if isinstance(item, (GaussianCharge, PartsCharge)):
        return item
    if not isinstance(item, (Mechanism, CompositeMechanism)):
        raise TypeError(
            f"charge: expected a GaussianCharge, a PartsCharge or a mechanism (parts, "
            f"release, describe), got {type(item).__name__}"
        )
    parts = tuple(item.parts)
    if isinstance(item, ChargedGaussian):
        charge = item.charge
        if not isinstance(charge, GaussianCharge):
            raise TypeError(f"charge: {type(item).__name__}.charge is not a GaussianCharge")
        if parts != (GaussianPart(charge.sensitivity / charge.sigma),):
            raise ValueError(
                f"charge: {type(item).__name__}'s Gaussian charge is not its parts {parts!r}"
            )
        return charge
    return PartsCharge(parts)
