"""Exact, order-free sums of float64 arrays (numpy, no Dask).

The graph adds one partial sum per task.  Floating-point addition is not associative,
so a float reduction gives the same bits only if it always adds in one fixed tree, and a
fixed tree holds partial sums in memory until their siblings are done (more the larger
the graph).  :class:`ExactSum` adds instead in exact integer arithmetic: every float64
is an integer multiple of 2^-1074, and the sum is held as base-2^60 digits in int64
arrays.  The total is then the same whatever the order or grouping of the additions,
so the graph may add partial sums as they come, in a few chains; :meth:`ExactSum.to_float`
rounds it once, correctly, to float64.

Memory: the digits span the binary orders of the values added, from the lowest bit of
the smallest to the top of the largest: for sums of like-sized entries 2 or 3 digits
per entry, at most 38 (the whole float range, subnormals included, and a carry).

Non-finite values (only an unbounded, non-private transform can produce them) are
summed apart in float64; a sum of infinities and NaNs is order-free too (NaN if any NaN
or both signs of infinity, else the infinity).  A finite total beyond the float range
rounds to infinity.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["ExactSum"]

#: Bits per digit: an int64 digit holds a digit (< 2^60) plus the carries of an addition.
_DIGIT_BITS = 60
_DIGIT = 1 << _DIGIT_BITS


class ExactSum:
    """The exact sum of float64 arrays of one shape.

    :meth:`plus` and :meth:`merge` return new sums, so a Dask task never changes its
    inputs; :meth:`add` adds in place, for a sum private to one task (a worker-wide
    task's running sums: no copy of the digits per addition).

    Parameters
    ----------
    shape : tuple of int
        Shape of the arrays added.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(int(s) for s in shape)
        # digits[k] holds the digit of weight 2^(60 (low + k)); all in [0, 2^60) but the
        # top one, which carries the sign.
        self.low = 0
        self.digits = np.zeros((1, math.prod(self.shape)), dtype=np.int64)
        self.special = np.zeros(math.prod(self.shape))  # non-finite values, in float

    def plus(self, values: ArrayLike) -> ExactSum:
        """The sum of these values and ``values``, as a new sum."""
        total = self._copy()
        total.add(values)
        return total

    def add(self, values: ArrayLike) -> None:
        """Add ``values`` to this sum in place (the same total as :meth:`plus`)."""
        values = np.asarray(values, dtype=np.float64)
        if values.shape != self.shape:
            raise ValueError(f"values: expected shape {self.shape}, got {values.shape}")
        self._add(values.reshape(-1))

    @classmethod
    def merge(cls, *sums: ExactSum) -> ExactSum:
        """The sum of several exact sums of one shape."""
        first = sums[0]
        if any(other.shape != first.shape for other in sums[1:]):
            raise ValueError("sums: all must have one shape")
        total = first._copy()
        for other in sums[1:]:
            total._widen(other.low, other.low + len(other.digits))
            start = other.low - total.low
            total.digits[start : start + len(other.digits)] += other.digits
            total._normalise()
            total.special += other.special
        return total

    @classmethod
    def of_rows(cls, values: ArrayLike) -> ExactSum:
        """The exact sum of the rows of a 2-D array (shape: a row's), as one sum.

        The same total as adding the rows one by one with :meth:`plus`, in a few
        vectorised steps: every entry is split into its digits at once, then groups of
        ``_ROWS_PER_STEP`` rows are added digit by digit (no int64 overflow: each
        digit is below 2^60 in size) and carried, until one row is left.
        """
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2:
            raise ValueError(f"values: expected a 2-D array, got shape {values.shape}")
        rows, width = values.shape
        total = cls((width,))
        if rows == 0:
            return total
        every = cls((rows * width,))
        every._add(values.reshape(-1))
        digits = every.digits.reshape(len(every.digits), rows, width)
        step = _ROWS_PER_STEP
        while digits.shape[1] > 1:
            groups = -(-digits.shape[1] // step)
            padded = np.zeros((len(digits) + 1, groups * step, width), dtype=np.int64)
            padded[: len(digits), : digits.shape[1]] = digits
            digits = padded.reshape(len(padded), groups, step, width).sum(axis=2)
            flat = digits.reshape(len(digits), -1)
            _carry(flat)  # the new top digit takes the carries: every size below 2^62
            digits = flat.reshape(len(flat), groups, width)
        total.low, total.digits = every.low, np.ascontiguousarray(digits[:, 0, :])
        total._normalise()
        total.special = every.special.reshape(rows, width).sum(axis=0)
        return total

    def to_float(self) -> NDArray[np.float64]:
        """The total, correctly rounded to float64 (one rounding), in the added shape."""
        out = np.empty(self.digits.shape[1])
        for start in range(0, out.size, _CHUNK):  # small temporaries, as in plus()
            part = slice(start, start + _CHUNK)
            out[part] = _rounded(self.digits[:, part], self.low)
        out = np.where(self.special == 0.0, out, self.special)  # NaN != 0: kept
        return out.reshape(self.shape)

    # -- internals -----------------------------------------------------------------

    def _copy(self) -> ExactSum:
        twin = ExactSum.__new__(ExactSum)
        twin.shape, twin.low = self.shape, self.low
        twin.digits, twin.special = self.digits.copy(), self.special.copy()
        return twin

    def _add(self, values: NDArray[np.float64]) -> None:
        finite = np.isfinite(values)
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, as in any order
            self.special += np.where(finite, 0.0, values)
        # A chunk of entries at a time: a dozen temporaries per entry stay small.
        for start in range(0, values.size, _CHUNK):
            part = slice(start, start + _CHUNK)
            self._add_finite(np.where(finite[part], values[part], 0.0), start)
        self._normalise()

    def _add_finite(self, values: NDArray[np.float64], offset: int) -> None:
        mantissa, exponent = np.frexp(values)
        # values = m 2^(exponent - 53) with m an integer below 2^53 (exact).
        m = np.ldexp(np.abs(mantissa), 53).astype(np.int64)
        nonzero = np.flatnonzero(m)
        if nonzero.size == 0:
            return
        m = np.where(mantissa[nonzero] < 0, -m[nonzero], m[nonzero])
        lsb = exponent[nonzero].astype(np.int64) - 53
        digit = np.floor_divide(lsb, _DIGIT_BITS)
        shift = lsb - digit * _DIGIT_BITS  # in [0, 60)
        magnitude = np.abs(m)
        low_part = (magnitude & ((np.int64(1) << (_DIGIT_BITS - shift)) - 1)) << shift
        high_part = magnitude >> (_DIGIT_BITS - shift)
        self._widen(int(digit.min()), int(digit.max()) + 2)
        row, column = digit - self.low, nonzero + offset
        sign = np.sign(m)
        # Each digit gets at most one addend below 2^60 in size: no int64 overflow.
        self.digits[row, column] += sign * low_part
        self.digits[row + 1, column] += sign * high_part

    def _widen(self, low: int, high: int) -> None:
        """Make room for digits ``low`` to ``high - 1`` (and one more at the top for carries)."""
        new_low = min(self.low, low)
        new_high = max(self.low + len(self.digits), high + 1)
        if (new_low, new_high) == (self.low, self.low + len(self.digits)):
            return
        grown = np.zeros((new_high - new_low, self.digits.shape[1]), dtype=np.int64)
        start = self.low - new_low
        grown[start : start + len(self.digits)] = self.digits
        self.low, self.digits = new_low, grown

    def _normalise(self) -> None:
        """Carry every digit but the top one into [0, 2^60); a top digit that reached
        2^60 carries into a new digit above it.
        """
        _carry(self.digits)
        while np.any(np.abs(self.digits[-1]) >= _DIGIT):
            self._widen(self.low, self.low + len(self.digits) + 1)
            _carry(self.digits)


#: Entries one step of ExactSum.plus works on.
_CHUNK = 1 << 15
#: Rows one step of ExactSum.of_rows adds (4 digits below 2^60 each, and a carry: < 2^63).
_ROWS_PER_STEP = 4


def _carry(digits: NDArray[np.int64]) -> None:
    """Carry every digit but the top one into [0, 2^60), in place (floor division)."""
    for k in range(len(digits) - 1):
        carry = digits[k] >> _DIGIT_BITS
        digits[k] -= carry << _DIGIT_BITS
        digits[k + 1] += carry


def _rounded(digits: NDArray[np.int64], low: int) -> NDArray[np.float64]:
    """The values of normalised ``digits`` (lowest of weight 2^(60 low)), each correctly
    rounded to float64.
    """
    magnitude = digits.copy()
    negative = magnitude[-1] < 0  # the top digit carries the sign
    magnitude[:, negative] *= -1
    _carry(magnitude)  # now every digit in [0, 2^60)
    nonzero = magnitude != 0
    top = len(magnitude) - 1 - np.argmax(nonzero[::-1], axis=0)  # highest nonzero digit
    columns = np.arange(magnitude.shape[1])
    first = magnitude[top, columns]
    second = np.where(top >= 1, magnitude[np.maximum(top - 1, 0), columns], 0)
    below = np.cumsum(nonzero, axis=0)  # nonzero digits at or under each one
    rest = np.where(top >= 2, below[np.maximum(top - 2, 0), columns], 0) > 0
    # The top 55 bits and a sticky bit (round to odd): one rounding to 53 bits is then
    # the correct rounding of the exact value.  Scaling by 2^exponent is exact: a total
    # below the normal range is a multiple of 2^-1074 (as every float is), so a
    # subnormal total is a float already.
    bits = np.frexp(first.astype(np.float64))[1].astype(np.int64)
    bits -= (first >> np.maximum(bits - 1, 0)) == 0  # the float may round up a bit
    shift = 55 - bits  # 55 - 60 to 54
    up, down = np.maximum(shift, 0), np.maximum(-shift, 0)
    one = np.int64(1)
    kept = np.where(shift >= 0, (first << up) | (second >> (_DIGIT_BITS - up)), first >> down)
    dropped = np.where(
        shift >= 0,
        second & ((one << (_DIGIT_BITS - up)) - 1),
        (first & ((one << down) - 1)) | second,
    )
    kept |= ((dropped != 0) | rest).astype(np.int64)
    exponent = _DIGIT_BITS * (low + top) - shift
    with np.errstate(over="ignore"):
        out: NDArray[np.float64] = np.ldexp(kept.astype(np.float64), exponent.astype(np.int32))
    out = np.where(negative, -out, out)
    out[~nonzero.any(axis=0)] = 0.0
    return out
