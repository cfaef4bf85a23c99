"""Cost of the noise samplers at d = 100, 1000, 3000 (n_entries = d (d + 1) / 2).

Run:  python benchmarks/bench_noise.py [--max-opendp-entries 20000]

Prints a markdown table of seconds per call of ``add_symmetric_noise`` on a d x d
matrix.  OpenDP is timed on at most ``--max-opendp-entries`` entries and extrapolated
linearly (its cost is per entry; a full d = 3000 draw takes minutes); those cells are
marked with ``~``.  The matrix content is irrelevant to the cost; the seed below only
makes the benchmark matrix (test data, not noise) repeatable.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dask_dppca.privacy.mechanisms.noise import (
    OPENDP_MAX_ENTRIES,
    LatticeSampler,
    OpenDPSampler,
    add_symmetric_noise,
    default_sampler,
)

SIGMA = 1e-4


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def time_sampler(sampler, d: int, max_entries: int | None) -> tuple[float, bool]:
    """Seconds for one d x d symmetric draw; (value, extrapolated?)."""
    n_entries = d * (d + 1) // 2
    if max_entries is None or n_entries <= max_entries:
        matrix = np.random.default_rng(0).normal(size=(d, d))
        matrix = matrix + matrix.T
        repeats = 3 if n_entries <= 600_000 else 1
        return best_of(lambda: add_symmetric_noise(matrix, SIGMA, sampler), repeats), False
    values = np.random.default_rng(0).normal(size=max_entries)
    per_entry = best_of(lambda: sampler.add_noise(values, SIGMA), 2) / max_entries
    return per_entry * n_entries, True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-opendp-entries", type=int, default=20_000)
    parser.add_argument("--dims", type=int, nargs="+", default=[100, 1000, 3000])
    args = parser.parse_args()

    samplers = [
        ("OpenDP, k = -1074 (default)", OpenDPSampler(), args.max_opendp_entries),
        (
            "OpenDP, k = floor(log2 sigma) - 40",
            OpenDPSampler(lattice_bits=40),
            args.max_opendp_entries,
        ),
        ("LatticeSampler (2^-40 sigma grid)", LatticeSampler(), None),
    ]
    header = (
        "| sampler | "
        + " | ".join(f"d = {d} ({d * (d + 1) // 2:,} entries)" for d in args.dims)
        + " |"
    )
    print(header)
    print("|---" * (len(args.dims) + 1) + "|")
    for name, sampler, cap in samplers:
        cells = []
        for d in args.dims:
            seconds, extrapolated = time_sampler(sampler, d, cap)
            per_entry = seconds / (d * (d + 1) // 2) * 1e6
            cells.append(f"{'~' if extrapolated else ''}{seconds:.3g} s ({per_entry:.2g} us/entry)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print(f"default_sampler: OpenDP up to {OPENDP_MAX_ENTRIES:,} entries, LatticeSampler above:")
    for d in args.dims:
        print(f"  d = {d}: {type(default_sampler(d * (d + 1) // 2)).__name__}")


if __name__ == "__main__":
    main()
