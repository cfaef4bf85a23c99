"""Breakdown: how many adversarial records each estimator survives (docs/method.md, section 6.4).

Replace the first k of n records (i.i.d., so any k are as good) by adversarial points
and measure sin theta between the estimated top-m subspace and the true one.  The
subspace has *broken down* once sin theta > 0.5.  Printed next to the bound of
docs/method.md, section 6.4: replacing k records changes a fraction p = k(2n-k-1)/(n(n-1)) of
the pair terms, each by at most G^2 in operator norm, so ||K_hat' - K_hat||_2 <= G^2 p
and, by Weyl and Davis-Kahan, sin theta(K_hat', K_hat) <= G^2 p / (gap - G^2 p) < 1
while G^2 p < gap / 2 (gap = lambda_m - lambda_{m+1} of the clean K_hat).

    python benchmarks/bench_breakdown.py [--n 2000] [--d 10] [--epsilon 1]

Estimators: g-DPPCA sphere and winsor (non-private K_hat eigenvectors, and the private
release at epsilon, noise from OS entropy), and covariance PCA
(``kendall_matrix(X, spatial_sign="identity")`` is the sample covariance).
Data: Gaussian, spectrum spiked_spectrum(d, 2, 10) = (20, 10, 1, ..., 1), m = 2.
Adversaries (all k records of one kind):
  far_weakest    at 1e4 along the weakest true direction, unit jitter (a far cluster)
  far_random     at 1e4, each in its own random direction
  near_weakest   exact copies of one point at 10 along the weakest direction (a tight
                 cluster close to the bulk: the pairs among them contribute 0)
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum

M = 2
BREAKDOWN = 0.5
RADIUS = 3.0  # public winsor radius, in units of the unit noise level (never tuned on data)
FRACTIONS = [
    0.0,
    None,
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
    0.06,
    0.07,
    0.08,
    0.09,
    0.10,
    0.12,
    0.15,
    0.20,
    0.25,
    0.30,
]  # None: exactly one record
METHODS = {  # name -> (kendall_matrix kwargs, G or None for unbounded)
    "sphere": ({"spatial_sign": "sphere"}, 1.0),
    "winsor": ({"spatial_sign": "winsor", "radius": RADIUS}, RADIUS),
    "covariance": ({"spatial_sign": "identity"}, None),
}


def pair_fraction(k: int, n: int) -> float:
    """Fraction of the n(n-1)/2 pairs that contain at least one of k replaced records."""
    return k * (2 * n - k - 1) / (n * (n - 1))


def bound_records(gap: float, bound_g: float | None, n: int) -> int:
    """Largest k with G^2 p(k) < gap / 2 (0 for an unbounded transform)."""
    if bound_g is None:
        return 0
    k = 0
    while k + 1 <= n and bound_g**2 * pair_fraction(k + 1, n) < gap / 2:
        k += 1
    return k


def adversarial_rows(kind: str, k: int, directions: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)  # adversary's choices: data, not privacy noise
    d = directions.shape[0]
    weakest = directions[:, -1]
    if kind == "far_weakest":
        return 1e4 * weakest + rng.standard_normal((k, d))
    if kind == "far_random":
        z = rng.standard_normal((k, d))
        return 1e4 * z / np.linalg.norm(z, axis=1, keepdims=True)
    if kind == "near_weakest":
        return np.tile(10.0 * weakest, (k, 1))
    raise ValueError(f"kind: unknown adversary {kind!r}")


def contaminate(
    x: np.ndarray, kind: str, k: int, directions: np.ndarray, seed: int = 0
) -> np.ndarray:
    y = x.copy()
    if k:
        y[:k] = adversarial_rows(kind, k, directions, seed)
    return y


def top_subspace(matrix: np.ndarray, m: int = M) -> np.ndarray:
    values, vectors = np.linalg.eigh(matrix)
    return vectors[:, np.argsort(values)[::-1][:m]]


def eigengap(matrix: np.ndarray, m: int = M) -> float:
    values = np.sort(np.linalg.eigvalsh(matrix))[::-1]
    return float(values[m - 1] - values[m])


def records_for(fraction, n):
    return 1 if fraction is None else int(round(fraction * n))


def private_subspace(x, method, epsilon):
    est = dd.DPPCA(
        n_components=M,
        epsilon=epsilon,
        scheduler="threads",
        design="complete",
        **METHODS[method][0],
    ).fit(x)
    return est.components_.T


def run(n: int, d: int, epsilon: float, seed: int = 1) -> list[dict]:
    directions = random_directions(d, seed)
    truth = directions[:, :M]
    x = make_elliptical(n, spiked_spectrum(d, M, 10.0), directions, df=None, seed=seed + 1)
    rows = []
    for method, (kwargs, bound_g) in METHODS.items():
        clean = dd.kendall_matrix(x, scheduler="threads", **kwargs)
        gap = eigengap(clean)
        k_bound = bound_records(gap, bound_g, n)
        for kind in ["far_weakest", "far_random", "near_weakest"]:
            curve, private_curve = [], []
            for fraction in FRACTIONS:
                k = records_for(fraction, n)
                y = contaminate(x, kind, k, directions)
                k_hat = dd.kendall_matrix(y, scheduler="threads", **kwargs)
                curve.append((k, dd.sin_theta(top_subspace(k_hat), truth)))
                if bound_g is not None and epsilon:
                    private_curve.append(
                        (k, dd.sin_theta(private_subspace(y, method, epsilon), truth))
                    )
            rows.append(
                {
                    "method": method,
                    "adversary": kind,
                    "gap": gap,
                    "bound_k": k_bound,
                    "breakdown_k": _first_break(curve),
                    "curve": curve,
                    "private_breakdown_k": _first_break(private_curve) if private_curve else None,
                    "private_curve": private_curve,
                }
            )
    return rows


def _first_break(curve):
    broken = [k for k, s in curve if s > BREAKDOWN]
    return min(broken) if broken else None


def _fmt_k(k, n):
    if k is None:
        return f"> {FRACTIONS[-1]:.0%}"
    return f"{k / n:.2%} ({k})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument(
        "--epsilon",
        type=float,
        default=1.0,
        help="privacy epsilon of the private release (0: skip it)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rows = run(args.n, args.d, args.epsilon)
    n = args.n
    print(
        f"n = {n}, d = {args.d}, m = {M}, spectrum (20, 10, 1, ...), Gaussian; "
        f"breakdown = first fraction of replaced records with sin theta > {BREAKDOWN}"
    )
    print(f"private release: epsilon = {args.epsilon:g}, delta = 1e-6, complete design\n")
    print(
        "| estimator | adversary | eigengap of K_hat | bound: holds while k/n <= | "
        "breakdown (K_hat) | breakdown (private) |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        bound = "1/n: none" if row["method"] == "covariance" else _fmt_k(row["bound_k"], n)
        private = "-" if row["method"] == "covariance" else _fmt_k(row["private_breakdown_k"], n)
        print(
            f"| {row['method']} | {row['adversary']} | {row['gap']:.4g} | {bound} | "
            f"{_fmt_k(row['breakdown_k'], n)} | {private} |"
        )
    print("\nsin theta to the truth by fraction of replaced records (K_hat; private in brackets):")
    header = " ".join(f"{('1 rec' if f is None else f'{f:.1%}'):>13s}" for f in FRACTIONS)
    print(f"{'':24s} {header}")
    for row in rows:
        cells = []
        for i, (_, s) in enumerate(row["curve"]):
            p = row["private_curve"][i][1] if row["private_curve"] else math.nan
            cells.append(f"{s:5.3f} [{p:5.3f}]" if row["private_curve"] else f"{s:13.3f}")
        print(
            f"{row['method'] + '/' + row['adversary']:24s} " + " ".join(f"{c:>13s}" for c in cells)
        )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
