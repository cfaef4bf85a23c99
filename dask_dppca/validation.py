"""Validation of public numeric parameters (one wording, the parameter named first), and
the one rule for which data dtypes are real numbers.
"""

from __future__ import annotations

import math
import numbers
from typing import cast

import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "boolean",
    "integer_at_least",
    "is_real_numeric_dtype",
    "nonnegative_finite",
    "one_of",
    "optional_string",
    "positive_finite",
    "real_number",
]


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


def integer_at_least(name: str, value: object, low: int) -> int:
    """``value`` as an int >= ``low``; booleans and floats are refused."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Integral)
        or value < low
    ):
        raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")
    return int(value)


def boolean(name: str, value: object) -> bool:
    """``value`` if it is a bool (``0``/``1``/``"yes"`` are refused: say what you mean)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: must be True or False, got {value!r}")
    return bool(value)


def one_of(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``."""
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError(
        f"{name}: unknown value {value!r}; expected one of {', '.join(map(repr, choices))}"
    )


def optional_string(name: str, value: object) -> str | None:
    """``value`` if it is None or a non-empty string."""
    if value is None or (isinstance(value, str) and value):
        return value
    raise ValueError(f"{name}: must be a non-empty string or None, got {value!r}")


def is_real_numeric_dtype(dtype: object) -> bool:
    """True for a dtype whose values are real numbers: bool, integers, floats.

    Complex, text, object and pandas extension dtypes are not; neither are timedelta64
    (it subclasses ``np.signedinteger``) and datetime64, which are not coordinates on a
    real scale.
    """
    try:
        # Any object: np.dtype raises TypeError for what is not a numpy dtype.
        dtype = np.dtype(cast("DTypeLike", dtype))
    except TypeError:  # pandas extension dtypes: strings, categories, nullable integers
        return False
    if dtype == np.bool_:
        return True
    return (
        np.issubdtype(dtype, np.number)
        and not np.issubdtype(dtype, np.complexfloating)
        and dtype.kind not in "mM"
    )
