"""The floating-point error state the numerics run under, whatever the caller set.

numpy's error state (``np.seterr``, ``np.errstate``) is the caller's, and Dask's worker
threads inherit it.  Under ``np.seterr(all="raise")`` an underflow in the scale classes'
products, harmless by design, became a FloatingPointError for a data set holding one far
record and not for its neighbour: a data-dependent exception.  The kernel is written and
tested (silent, tests/kernel/test_hostile.py) under numpy's default state, so every
function that computes on data values runs in it: :func:`own_errstate`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import numpy as np

__all__ = ["FLOATING_POINT_STATE", "own_errstate"]

#: numpy's default error state, under which the kernel is verified to raise no warning.
FLOATING_POINT_STATE = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}

_P = ParamSpec("_P")
_R = TypeVar("_R")


def own_errstate(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``function`` under :data:`FLOATING_POINT_STATE` (a fresh ``np.errstate`` per
    call, so concurrent calls in threads do not share one).
    """

    @functools.wraps(function)
    def under_own_state(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with np.errstate(**FLOATING_POINT_STATE):  # type: ignore[arg-type]
            return function(*args, **kwargs)

    return under_own_state
