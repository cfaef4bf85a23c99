"""What one noisy release costs, stated as the guarantee its mechanism is proven to give.

Every mechanism of the analysis (the directions, scree values, quantiles, histograms, group
counts) states its cost as one or more *parts*, each a guarantee with a known dominating
pair of distributions, so that an accountant can compose mixed mechanisms exactly:

- :class:`GaussianPart`: mu-Gaussian DP (Dong, Roth & Su 2022), what Gaussian noise of
  scale ``sigma`` on a statistic of l2 sensitivity ``Delta`` gives with ``mu = Delta /
  sigma``; dominated by the pair N(0, 1), N(mu, 1).
- :class:`PureDPPart`: epsilon-DP (the exponential mechanism, AboveThreshold, Laplace
  noise); every such mechanism is dominated by randomized response with that epsilon
  (Kairouz, Oh & Viswanath 2015).
- :class:`ApproxDPPart`: (epsilon, delta)-DP (a thresholded histogram); dominated by the
  four-outcome pair of the same paper.

A part is a public record of a plan: it is built from public parameters only and written
to the ledger as the dictionary :func:`part_to_dict` returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return value


@dataclass(frozen=True)
class GaussianPart:
    """A mu-Gaussian-DP release.

    Attributes
    ----------
    mu : float
        ``sensitivity / sigma`` of the Gaussian noise, > 0.
    """

    mu: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", _positive("mu", self.mu))


@dataclass(frozen=True)
class PureDPPart:
    """An epsilon-DP release (delta = 0).

    Attributes
    ----------
    epsilon : float
        The release's epsilon, > 0.
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon))


@dataclass(frozen=True)
class ApproxDPPart:
    """An (epsilon, delta)-DP release.

    Attributes
    ----------
    epsilon : float
        The release's epsilon, >= 0.
    delta : float
        The release's delta, in (0, 1).
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        epsilon = float(self.epsilon)
        if not (math.isfinite(epsilon) and epsilon >= 0.0):
            raise ValueError(f"epsilon: expected a finite number >= 0, got {epsilon!r}")
        delta = float(self.delta)
        if not (0.0 < delta < 1.0):
            raise ValueError(f"delta: expected a number in (0, 1), got {delta!r}")
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)


#: One part of a release's cost.
PrivacyPart = GaussianPart | PureDPPart | ApproxDPPart

_KINDS: dict[str, type[GaussianPart] | type[PureDPPart] | type[ApproxDPPart]] = {
    "gaussian": GaussianPart,
    "pure": PureDPPart,
    "approximate": ApproxDPPart,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def part_to_dict(part: PrivacyPart) -> dict[str, Any]:
    """The part as a JSON-ready dictionary: ``{"kind": ..., <its fields>}``."""
    fields = {name: getattr(part, name) for name in part.__dataclass_fields__}
    return {"kind": _NAMES[type(part)], **fields}


def part_from_dict(record: dict[str, Any]) -> PrivacyPart:
    """The part a :func:`part_to_dict` dictionary describes (its values checked again)."""
    fields = dict(record)
    kind = fields.pop("kind", None)
    if kind not in _KINDS:
        raise ValueError(f"kind: expected one of {sorted(_KINDS)}, got {kind!r}")
    return _KINDS[kind](**fields)


def part_text(part: PrivacyPart) -> str:
    """A part in a few characters, for reports: ``mu=0.3``, ``eps=0.1``, ``eps=0.1,delta=1e-6``."""
    record = part_to_dict(part)
    if record["kind"] == "gaussian":
        return f"mu={record['mu']:.4g}"
    if record["kind"] == "pure":
        return f"eps={record['epsilon']:.4g}"
    return f"eps={record['epsilon']:.4g},delta={record['delta']:.3g}"
