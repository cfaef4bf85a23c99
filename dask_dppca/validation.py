"""Validation of public numeric parameters: one wording, the parameter named first."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["real_number", "positive_finite"]


def real_number(name: str, value: object) -> float:
    """``value`` as a float; booleans and strings are refused (``True`` is not 1.0 here)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name}: must be a real number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a real number, got {value!r}") from None


def nonnegative_finite(name: str, value: object) -> float:
    """``value`` as a finite float >= 0, else a ValueError naming ``name`` and the value."""
    number = real_number(name, value)
    if not (math.isfinite(number) and number >= 0.0):
        raise ValueError(f"{name}: must be finite and >= 0, got {number!r}")
    return number


def positive_finite(name: str, value: object) -> float:
    """``value`` as a finite float > 0, else a ValueError naming ``name`` and the value."""
    number = real_number(name, value)
    if not (math.isfinite(number) and number > 0.0):
        raise ValueError(f"{name}: must be finite and > 0, got {number!r}")
    return number
