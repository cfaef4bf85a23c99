"""A plan's figures as text: bytes in binary units, seconds in the largest unit that
fits, three significant digits (what :class:`~dask_dppca.planning.fit_plan.FitPlan` and
the analysis plan print).
"""

from __future__ import annotations

import math

__all__ = ["format_bytes", "format_seconds"]


def format_bytes(value: float | None, up: bool = False) -> str:
    """Bytes as text in binary units, 3 significant digits ("1.5 GiB", "12 B").

    Parameters
    ----------
    value : float or None
        Bytes; ``None`` (no memory limit) reads "unlimited".
    up : bool, default=False
        Round up (for a need, such as the memory limit a plan asks for).

    Returns
    -------
    str
    """
    if value is None:
        return "unlimited"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            scaled = value / scale
            if up:
                step = 10.0 ** (math.floor(math.log10(scaled)) - 2)
                scaled = math.ceil(round(scaled / step, 6)) * step
            return f"{scaled:.3g} {unit}"
    return f"{int(value)} B"


def format_seconds(value: float) -> str:
    """Seconds as text in the largest unit of days, hours, minutes and seconds that is
    at least 1, 3 significant digits ("2.5 min", "0.3 s").

    Parameters
    ----------
    value : float
        Seconds.

    Returns
    -------
    str
    """
    if value >= 86400:
        return f"{value / 86400:.3g} days"
    if value >= 3600:
        return f"{value / 3600:.3g} h"
    if value >= 60:
        return f"{value / 60:.3g} min"
    return f"{value:.3g} s"
