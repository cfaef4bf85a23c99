"""Independent oracles for the tests: a pair-by-pair float64 loop and adversarial data.

The loop shares no code with dask_dppca.kernel: it forms each difference, takes its
norm with math.hypot (overflow-safe, correctly scaled), builds g(t) and adds g g^T.
"""

from __future__ import annotations

import math

import numpy as np


def g_of_difference(x_i, x_j, xi):
    """g(t) for t = (x_i - x_j) / sqrt2, computed one pair at a time without overflow."""
    diff = [float(u) - float(v) for u, v in zip(x_i, x_j)]
    factor = 1.0
    if not all(math.isfinite(c) for c in diff):
        diff = [0.5 * float(u) - 0.5 * float(v) for u, v in zip(x_i, x_j)]
        factor = 2.0
    peak = max(abs(c) for c in diff)
    if peak == 0.0:
        return np.zeros(len(diff))
    scaled = [c / peak for c in diff]
    length = math.hypot(*scaled)
    unit = np.array([c / length for c in scaled])
    norm_t = peak * length * factor / math.sqrt(2.0) if peak < 1e300 else math.inf
    if peak >= 1e300:
        norm_t = peak * (length * factor / math.sqrt(2.0))
    return xi(norm_t) * unit


def reference_pair_sum(a, b=None, xi=lambda s: 1.0):
    """sum over pairs (i<j within a, or a x b) of g g^T, with rows holding NaN/inf skipped."""
    a = np.asarray(a, dtype=np.float64)
    pairs = []
    if b is None:
        pairs = [(a[i], a[j]) for i in range(len(a)) for j in range(i + 1, len(a))]
    else:
        b = np.asarray(b, dtype=np.float64)
        pairs = [(u, v) for u in a for v in b]
    d = a.shape[1]
    total = np.zeros((d, d))
    for u, v in pairs:
        if not (np.isfinite(u).all() and np.isfinite(v).all()):
            continue
        g = g_of_difference(u, v, xi)
        total += np.outer(g, g)
    return total


def relative_error(got, want):
    scale = np.linalg.norm(want)
    return np.linalg.norm(got - want) / (scale if scale > 0 else 1.0)
