"""Building blocks for release tests: a mechanism at a chosen sigma, and lane sums.

A fit plans its :class:`~dask_dppca.privacy.ReleaseMechanism` from public inputs; tests
that drive the release directly (the noise law, the audit, the drawn-once ticket) need
the same object at a sigma they choose, and the lanes' sums it releases from.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dask_dppca.design import CompleteDesign
from dask_dppca.graph import LaneState
from dask_dppca.kernel import ExactSum, sphere
from dask_dppca.privacy import PrivacyTarget, ReleaseMechanism
from dask_dppca.privacy.mechanisms.noise import NoiseSampler, SeededSampler


def mechanism_for(
    n: int, d: int, sigma: float, sampler: NoiseSampler | None = None
) -> ReleaseMechanism:
    """The sphere release of n records of width d (complete design: |P| = n (n - 1) / 2),
    its sigma set to ``sigma``; the sampler a seeded TEST one unless given."""
    design = CompleteDesign()
    planned = ReleaseMechanism.plan_release(
        design,
        design.plan((n,), d),
        sphere(),
        PrivacyTarget.of(1.0, 1e-6),
        SeededSampler(0) if sampler is None else sampler,
    )
    return dataclasses.replace(planned, sigma=sigma)


def lane_of(matrix: np.ndarray) -> LaneState:
    """A lane state holding the upper triangle of ``matrix`` (as the lanes do)."""
    d = matrix.shape[0]
    return LaneState(ExactSum((d * (d + 1) // 2,)).plus(np.asarray(matrix)[np.triu_indices(d)]), {})
