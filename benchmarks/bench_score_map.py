"""Accuracy of the private score map: histogram total variation and frame coverage.

Run:  python benchmarks/bench_score_map.py [--runs 20] [--csv gau.csv]

Data: the R package ``dppca``'s ``gau`` design (5000 x 20, five clusters of 1000 rows in
cluster order: means 0, +5 on V1-V5, -3 on V1-V5, -1 on V6-V10, +3 on V6-V10;
covariances I, I, 5I, 5I, 8I), generated here from a fixed seed (TEST DATA, not R's
draw), or R's own export with ``--csv`` (``write.csv(gau, row.names = FALSE)``).  The
clusters are the groups.

Each run releases private directions (``DPPCA``, half of the total (3, 1e-4): the
analysis' default split) and then a score map of PC1 x PC2 on a 10 x 10 grid with the
default score-map share, a quarter of the total: ``ScoreMapMechanism(n, 0.75, 2.5e-5)``
(frame 1/4 of it, the additive histogram the rest), through ``release_score_map`` on a
local scheduler, with the real samplers (OS entropy).  Printed, median and worst over the
runs:

* ``TV``: total variation distance between the released additive histogram (clipped,
  normalised over all cells, the out-of-frame cell included) and the exact histogram of
  the same scores on the same frame (target <= 0.1);
* ``coverage``: the share of the points inside the private frame (target >= 0.98);
* ``width``: the frame's larger half-width over that of the exact frame, 1.5 times the
  0.995-quantile of each axis' ``|y - median|`` (a blown-up frame puts every point in one
  bin; target <= 8, worst shown as the largest);
* the TV again after dropping the cells whose noisy count is under two noise sigmas
  (free post-processing, what the synthetic points use by default);
* the same TV per group (groups = the five clusters, one common frame), and the noisy
  group sizes' largest relative error;
* TV and coverage on heavy-tailed data of the same size (iid Cauchy entries; multivariate
  t_1), the same pipeline.

With ``--contaminated N`` only the contaminated table runs instead: N x 24 multivariate t_2
(scatter 25, 12, 6, 1, ... in a random basis) with 1 % gross outliers and groups a/b/c
(60/30/10 %), analysed end to end by ``analyze`` at a total epsilon of 2 (default split,
default grid); printed per run: the bulk's central 98 % over the frame's width per axis
(target >= 0.4), the share of the bulk and of the outliers inside the frame, the grid.

With ``--r-package DIR`` (a checkout of github.com/yejinjo0220/dppca; R with VGAM), the R
package's own frame and additive histogram (benchmarks/r_score_map.R) run on the scores of
the first run at the same score-map budget, split as R splits it (frame half, histogram
half), and the same two figures are printed for it.  Its frame uses the data's own range
and its histogram clamps out-of-frame points into the edge bins.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import dask.array as da
import numpy as np

import dask_dppca as dd
from dask_dppca.compute.target import LocalScheduler
from dask_dppca.compute.trusted.score_map import release_score_map
from dask_dppca.graph.score_stats import project_scores
from dask_dppca.kernel.score_stats import histogram_counts
from dask_dppca.privacy.mechanisms.score_map import ScoreMapMechanism

TOTAL_EPSILON, TOTAL_DELTA = 3.0, 1e-4
#: The figures with a target, and which run is the worst for each.
TARGETS = {"TV": ("<= 0.1", max), "coverage": (">= 0.98", min), "width": ("<= 8", max)}
DIRECTIONS_SHARE, SCORE_MAP_SHARE = 0.5, 0.25


def gau(seed: int = 123) -> tuple[np.ndarray, np.ndarray]:
    """The ``gau`` design (see the module docstring) and its cluster labels."""
    rng = np.random.default_rng(seed)  # benchmark data only
    means = np.zeros((5, 20))
    means[1, :5], means[2, :5], means[3, 5:10], means[4, 5:10] = 5, -3, -1, 3
    scale = np.sqrt([1.0, 1.0, 5.0, 5.0, 8.0])
    x = np.vstack([means[k] + scale[k] * rng.standard_normal((1000, 20)) for k in range(5)])
    labels = np.repeat([f"group{k + 1}" for k in range(5)], 1000).astype(object)
    return x, labels


def total_variation(released: np.ndarray, exact: np.ndarray) -> float:
    p = np.clip(released, 0.0, None)
    p = p / p.sum() if p.sum() > 0 else p
    return 0.5 * float(np.abs(p - exact / exact.sum()).sum())


def r_figures(package: str, scores: np.ndarray, runs: int) -> dict[str, np.ndarray]:
    """TV and coverage of the R package's frame and additive histogram on ``scores``."""
    script = Path(__file__).with_name("r_score_map.R")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scores.csv"
        np.savetxt(path, scores, delimiter=",", fmt="%.17g")
        eps, delta = SCORE_MAP_SHARE * TOTAL_EPSILON, SCORE_MAP_SHARE * TOTAL_DELTA
        done = subprocess.run(
            ["Rscript", str(script), package, str(path), str(eps), str(delta), str(runs)],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
    values = np.array([[float(v) for v in line.split()] for line in done.stdout.splitlines()])
    return {"TV": values[:, 0], "coverage": values[:, 1]}


def one_run(
    x: np.ndarray,
    labels: np.ndarray,
    grouped: bool,
    keep: list | None = None,
    methods: tuple[str, ...] = ("additive",),
) -> dict[str, float]:
    n = x.shape[0]
    started = time.perf_counter()
    est = dd.DPPCA(
        n_components=2,
        epsilon=DIRECTIONS_SHARE * TOTAL_EPSILON,
        delta=DIRECTIONS_SHARE * TOTAL_DELTA,
        scheduler="threads",
        progress=False,
    ).fit(x)
    directions_s = time.perf_counter() - started
    mechanism = ScoreMapMechanism(
        n,
        SCORE_MAP_SHARE * TOTAL_EPSILON,
        SCORE_MAP_SHARE * TOTAL_DELTA,
        bins=(10, 10),
        domain=tuple(sorted(set(labels))) if grouped else None,
        methods=methods,
    )
    scores = project_scores(da.from_array(x, chunks=(1000, x.shape[1])), est.components_)
    started = time.perf_counter()
    score_map = release_score_map(
        LocalScheduler("threads"), scores, mechanism, labels=labels if grouped else None
    )
    map_s = time.perf_counter() - started
    y = x @ est.components_[:2].T
    if keep is not None:
        keep.append(y)
    x_edges, y_edges = score_map.frame.edges(score_map.bins)
    codes = None
    if grouped:
        lookup = {g: k for k, g in enumerate(mechanism.domain or ())}
        codes = np.array([lookup[g] for g in labels])
    exact = histogram_counts(y, x_edges, y_edges, codes, len(score_map.groups))
    released = score_map.histogram("additive").counts
    inside = (np.abs(y - score_map.frame.centre) <= score_map.frame.half_width).all(axis=1)
    out = {
        "TV": total_variation(released.sum(axis=0), exact.sum(axis=0)),
        "coverage": float(inside.mean()),
        "width": float(
            np.max(
                np.divide(
                    score_map.frame.half_width,
                    1.5 * np.quantile(np.abs(y - np.median(y, axis=0)), 0.995, axis=0),
                )
            )
        ),
        "TV, cells under 2 sigma dropped": total_variation(
            score_map.histogram("additive")
            .kept(score_map.histogram("additive").floor(2.0))
            .sum(axis=0),
            exact.sum(axis=0),
        ),
        **{
            f"TV {name}": total_variation(h.counts.sum(axis=0), exact.sum(axis=0))
            for name, h in score_map.histograms.items()
            if len(methods) > 1
        },
        "directions_s": directions_s,
        "score_map_s": map_s,
    }
    if grouped:
        tvs = [total_variation(released[g], exact[g]) for g in range(len(mechanism.domain or ()))]
        out["TV per group (worst)"] = max(tvs)
        kept = score_map.histogram("additive").kept(score_map.histogram("additive").floor(2.0))
        out["TV per group (worst), 2 sigma dropped"] = max(
            total_variation(kept[g], exact[g]) for g in range(len(mechanism.domain or ()))
        )
        sizes = np.array(list(score_map.group_sizes().values()))[:-1]
        out["group size rel. error (worst)"] = float(np.max(np.abs(sizes - 1000) / 1000))
    return out


def heavy_tailed(kind: str, seed: int = 5) -> np.ndarray:
    """5000 x 20 heavy-tailed data: iid standard Cauchy entries, or multivariate t_1 with
    scatter diag(20, 19, ..., 1) (benchmark data, fixed seed)."""
    rng = np.random.default_rng(seed)  # benchmark data only
    if kind == "cauchy":
        return rng.standard_cauchy((5000, 20))
    z = rng.standard_normal((5000, 20)) * np.sqrt(np.arange(20, 0, -1.0))
    return z / np.abs(rng.standard_normal((5000, 1)))


def contaminated(n: int, runs: int) -> None:
    """The contaminated table (module docstring): the frame drawn for the bulk."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests
    from tests.statistical.test_score_map_frame import contaminated_table, frame_figures

    x, bad, labels = contaminated_table(n)
    d = x.shape[1]
    print(f"\ncontaminated t_2, {n} x {d}, 1 % gross outliers, groups a/b/c, total epsilon 2\n")
    print("| run | spread PC1 | spread PC2 | bulk inside | outliers inside | bins | seconds |")
    print("|---|---|---|---|---|---|---|")
    for run in range(runs):
        started = time.perf_counter()
        result = dd.analyze(
            x,
            n_components=2,
            epsilon=2.0,
            delta=1e-5,
            groups=labels,
            stages=[dd.ScreeStage(), dd.ScoreMapStage(group_domain=("a", "b", "c"))],
            compute=dd.Compute(scheduler="threads"),
        )
        seconds = time.perf_counter() - started
        spread, inside = frame_figures(x, bad, result)
        mx, my = result.score_map.bins
        print(
            f"| {run + 1} | {spread[0]:.3f} | {spread[1]:.3f} | {inside[~bad].mean():.4f} | "
            f"{inside[bad].mean():.3f} | {mx} x {my} | {seconds:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--csv", help="R's write.csv(gau) export instead of the generated data")
    parser.add_argument("--r-package", help="a checkout of the R package dppca, to compare")
    parser.add_argument("--sparse", action="store_true", help="also additive + sparse")
    parser.add_argument("--contaminated", type=int, metavar="N", help="the contaminated table only")
    args = parser.parse_args()
    if args.contaminated:
        contaminated(args.contaminated, args.runs)
        return
    x, labels = gau()
    if args.csv:
        x = np.loadtxt(args.csv, delimiter=",", skiprows=1)
    configurations = [(False, ("additive",)), (True, ("additive",))]
    for kind in ("cauchy", "t1"):  # the frame on heavy tails (no variance), same pipeline
        heavy = heavy_tailed(kind)
        runs = [one_run(heavy, labels, False) for _ in range(args.runs)]
        print(f"\n{kind} data, 5000 x 20, no groups, {args.runs} runs\n")
        print("| figure | median | worst | target |")
        print("|---|---|---|---|")
        for key, (target, worst) in TARGETS.items():
            values = np.array([r[key] for r in runs])
            print(f"| {key} | {np.median(values):.4g} | {worst(values):.4g} | {target} |")
    if args.sparse:
        configurations.append((False, ("additive", "sparse")))
    for grouped, methods in configurations:
        kept: list = []
        runs = [one_run(x, labels, grouped, kept, methods) for _ in range(args.runs)]
        title = "groups: the 5 clusters (one frame)" if grouped else "no groups"
        if len(methods) > 1:
            title += "; additive and sparse, each half of the histograms' share"
        print(
            f"\n{title}; n = {x.shape[0]}, 10 x 10 bins, score map (0.75, 2.5e-5), {args.runs} runs\n"
        )
        print("| figure | median | worst | target |")
        print("|---|---|---|---|")
        for key in runs[0]:
            values = np.array([r[key] for r in runs])
            target, worst = TARGETS.get(key, ("", max))
            print(f"| {key} | {np.median(values):.4g} | {worst(values):.4g} | {target} |")
        if args.r_package and not grouped and len(methods) == 1:
            r = r_figures(args.r_package, kept[0], args.runs)
            print(
                f"\nthe R package's frame and additive histogram on run 1's scores, {args.runs} runs\n"
            )
            print("| figure | median | worst | target |")
            print("|---|---|---|---|")
            for key, values in r.items():
                target, worst = TARGETS[key]
                print(f"| {key} | {np.median(values):.4g} | {worst(values):.4g} | {target} |")


if __name__ == "__main__":
    main()
