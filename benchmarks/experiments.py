"""Regenerate the experiments of docs/results.md (figures in docs/figures/).

    python benchmarks/experiments.py --quick          # a few minutes: 5 data sets, n <= 3000
    python benchmarks/experiments.py --smoke          # seconds: one model and data set, to a temp dir
    python benchmarks/experiments.py --datasets 20 --n-max 100000   # the full grid in one process (long)

The committed docs/results.json was produced by several partial runs (--models, --n-list,
--skip, --first-dataset, --ag-only, --out DIR), run in parallel and merged with
--merge DIR1,DIR2,... into docs/ (results.json, results_tables.md, figures/); the exact
commands are in docs/results.md.

Speed: for each data set the exact K_hat (every transform) and the covariance are
computed once (dask_dppca.kendall_matrix, complete design), then the release is
repeated for every epsilon and calibration with the estimator's own release code
(dask_dppca.privacy.ReleaseMechanism.release) at the estimator's sigma
(dask_dppca.planning.utility.release_sigma: bitwise a private fit's privacy_["sigma"], which
tests/statistical/test_theory.py and tests/estimator/test_fit_matches_theory.py check).  The noise comes from a SeededSampler (same Gaussian law, seeded, NOT
PRIVATE: an experiment, not a release).

Analyze Gauss runs twice: about the known location (the origin), and about a private
centre bought with part of the same budget (:func:`private_centre`), the fair baseline
when the location is unknown.  "Best" baselines are oracles: the best public clip per
cell, chosen after the fact; the generated tables also show one clip for every model.

diffprivlib's and OpenDP's PCA are run in a forked child process under a wall-clock cap;
once a method exceeds the cap at some n it is marked "gave up" there and not tried at
larger n.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing as mp
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

import numpy as np

import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, make_skewed, random_directions, spiked_spectrum
from dask_dppca.decomposition.metrics import sin_theta
from dask_dppca.decomposition.reference import breakdown_bound
from dask_dppca.design import CompleteDesign
from dask_dppca.kernel import sphere
from dask_dppca.planning.utility import UtilityModel, release_sigma
from dask_dppca.privacy import PrivacyTarget, ReleaseMechanism
from dask_dppca.privacy.mechanisms.calibration import calibrate_sigma, gaussian_dp_mu
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning, SeededSampler

warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
DELTA = 1e-6
ROOT = Path(__file__).resolve().parents[1]

# name: (d, m, df, outlier fraction); df None = Gaussian, a string = skewed independent
# components with that marginal (datasets.make_skewed: not elliptical, mean 0).
# Spikes 10 m, ..., 10; bulk 1.
# Location 0 (known to Analyze Gauss's clipping) unless named "shift": then the location
# is SHIFT * (1, ..., 1) / sqrt(d), unknown to every method.
MODELS = {
    "gauss_d20_m2": (20, 2, None, 0.0),
    "t3_d20_m2": (20, 2, 3.0, 0.0),
    "t1_d20_m2": (20, 2, 1.0, 0.0),
    "t1_d20_m2_shift": (20, 2, 1.0, 0.0),
    "gauss_d20_m5": (20, 5, None, 0.0),
    "t1_d20_m5": (20, 5, 1.0, 0.0),
    "gauss_d100_m2": (100, 2, None, 0.0),
    "t1_d100_m2": (100, 2, 1.0, 0.0),
    "gauss_d100_m5": (100, 5, None, 0.0),
    "t1_d100_m5": (100, 5, 1.0, 0.0),
    "contam2_d20_m2": (20, 2, None, 0.02),
    "contam5_d20_m2": (20, 2, None, 0.05),
    "lognorm_d20_m2": (20, 2, "lognormal", 0.0),
    "pareto_d20_m2": (20, 2, "pareto", 0.0),
}
CONTAM_FRACS = (0.0, 0.01, 0.02, 0.05, 0.08, 0.12, 0.2)  # the contamination sweep
MODELS.update({f"contam_{frac:g}": (20, 2, None, frac) for frac in CONTAM_FRACS})
SHIFT = 10.0
WINSOR_RADII = (1.0, 4.0, 16.0)
RADII = WINSOR_RADII  # set by --radii          # public, in the units of t = (x_i - x_j)/sqrt2
CLIP_NORMS = (2.0, 5.0, 10.0, 20.0, 50.0)  # public row norms for Analyze Gauss / peers
# Two-stage Analyze Gauss: share of the GDP mu^2 spent on a private centre, and the public
# clipping radii of its rounds (the first is the public bound on the location's norm).
CENTRE_SHARES = (0.1, 0.25)
CENTRE_RADII = (40.0, 10.0, 2.5)


def release(k_hat: np.ndarray, sigma: float, m: int, seed: int) -> np.ndarray:
    """The estimator's release on a precomputed K_hat; returns (d, m) directions."""
    if sigma == 0.0:
        w, v = np.linalg.eigh(k_hat)
        return v[:, ::-1][:, :m]
    design = CompleteDesign()  # two records: one pair, so the release divides by |P| = 1
    mechanism = dataclasses.replace(
        ReleaseMechanism.plan_release(
            design,
            design.plan((2,), k_hat.shape[0]),
            sphere(),
            PrivacyTarget.of(1.0, DELTA),
            SeededSampler(seed),
        ),
        sigma=sigma,
    )
    return mechanism.release(k_hat, n_components=m).components.T


def clip_rows(X: np.ndarray, c: float) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1)
    return X * np.minimum(1.0, c / np.maximum(norms, 1e-300))[:, None]


# -- capped peers ------------------------------------------------------------------------


def _peer_child(name, X, m, eps, c, queue):
    warnings.simplefilter("ignore")
    try:
        if name == "diffprivlib":
            # diffprivlib 0.6.6's models/__init__ imports its forest module, which needs
            # sklearn.tree._tree.DOUBLE (gone in scikit-learn >= 1.6); PCA does not use it.
            shim = types.ModuleType("diffprivlib.models.forest")
            shim.RandomForestClassifier = shim.DecisionTreeClassifier = None
            sys.modules.setdefault("diffprivlib.models.forest", shim)
            from diffprivlib.models import PCA

            est = PCA(
                n_components=m, epsilon=eps, data_norm=c, centered=True, random_state=None
            ).fit(clip_rows(X, c))
        else:
            import opendp.prelude as dp

            dp.enable_features("contrib", "honest-but-curious", "idealized-numerics")
            from opendp.extras.sklearn.decomposition import PCA

            est = PCA(
                epsilon=eps, row_norm=c, n_samples=X.shape[0], n_features=X.shape[1], n_components=m
            ).fit(clip_rows(X, c))
        queue.put(np.asarray(est.components_, dtype=float))
    except Exception as error:  # reported, not fatal
        queue.put(repr(error)[:300])


def run_peer(name, X, m, eps, c, cap):
    """(components (m, d) or None, wall seconds, status)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peer_child, args=(name, X, m, eps, c, queue))
    start = time.perf_counter()
    proc.start()
    proc.join(cap)
    wall = time.perf_counter() - start
    if proc.is_alive():
        proc.kill()
        proc.join()
        return None, wall, "gave up"
    result = queue.get() if not queue.empty() else "no result"
    if isinstance(result, str):
        return None, wall, result
    return result, wall, "ok"


# -- one data set -------------------------------------------------------------------------


def evaluate(model, n, seed, eps_list, noise_reps, record, radii=None, kernels=True):
    d, m, df, frac = MODELS[model]
    spectrum = spiked_spectrum(d, m)
    directions = random_directions(d, 1000 + seed)
    if isinstance(df, str):
        X = make_skewed(n, spectrum, directions, marginal=df, seed=seed)
    else:
        X = make_elliptical(n, spectrum, directions, df=df, outlier_fraction=frac, seed=seed)
    if model.endswith("shift"):
        X += SHIFT / math.sqrt(d)
    U = directions[:, :m]
    base = dict(model=model, n=n, dataset=seed, frac=frac)

    def err(V):
        return sin_theta(V, U)

    # references
    k_hats = {}
    if kernels:
        w, v = np.linalg.eigh(X.T @ X / n)
        record(
            dict(base, method="covariance (non-private)", eps=math.inf, err=err(v[:, ::-1][:, :m]))
        )
        k_hats["sphere"] = dd.kendall_matrix(X, scheduler="synchronous")
        for r in RADII if radii is None else radii:
            k_hats[f"winsor r={r:g}"] = dd.kendall_matrix(
                X, spatial_sign="winsor", radius=r, scheduler="synchronous"
            )
    for name, K in k_hats.items():
        record(
            dict(
                base, method=f"g {name} (non-private)", eps=math.inf, err=err(release(K, 0.0, m, 0))
            )
        )
    second = {c: clip_rows(X, c).T @ clip_rows(X, c) / n for c in CLIP_NORMS}
    for eps in eps_list:
        for name, K in k_hats.items():
            tr, r = ("sphere", None) if name == "sphere" else ("winsor", float(name.split("=")[1]))
            cals = ["analytic"] + (["classical"] if eps < 1 else [])
            for cal in cals:
                sigma = release_sigma(n, d, eps, DELTA, spatial_sign=tr, radius=r, calibration=cal)
                for rep in range(noise_reps):
                    V = release(K, sigma, m, seed * 1000 + rep)
                    record(
                        dict(base, method=f"g-DPPCA {name} ({cal})", eps=eps, err=err(V), rep=rep)
                    )
        for c, S in second.items():
            # Analyze Gauss: ||x x^T - y y^T||_F <= sqrt2 c^2 for ||x||,||y|| <= c (as docs/method.md, section 4)
            sigma = calibrate_sigma(math.sqrt(2.0) * c * c / n, eps, DELTA, "analytic")
            for rep in range(noise_reps):
                V = release(S, sigma, m, seed * 1000 + 500 + rep)
                record(dict(base, method=f"Analyze Gauss c={c:g}", eps=eps, err=err(V), rep=rep))
        for share in CENTRE_SHARES:
            for rep in range(noise_reps):
                centre, mu_rest, _ = private_centre(X, eps, share, seed * 1000 + 700 + rep)
                for c in CLIP_NORMS:
                    S, sigma = centred_second_moment(X, centre, c, mu_rest)
                    V = release(S, sigma, m, seed * 1000 + 800 + rep)
                    record(
                        dict(
                            base,
                            method=f"Analyze Gauss private centre {share:g} c={c:g}",
                            eps=eps,
                            err=err(V),
                            rep=rep,
                        )
                    )
    return X, U


def private_centre(X: np.ndarray, eps: float, share: float, seed: int):
    """The centring stage of a two-stage Analyze Gauss: (centre, mu left for stage two,
    [(sensitivity, sigma) of each round]).

    The (eps, DELTA) target is the analytic Gaussian's mu-GDP (``gaussian_dp_mu``);
    ``share`` of mu^2 goes to the centre, split equally over the rounds
    of CENTRE_RADII: each round adds the noisy mean of the rows clipped to a public
    radius r about the current centre (replace-one sensitivity 2 r / n).  A fixed point of
    the clipped mean is a Huber-type spatial location, consistent for symmetric data and
    finite for t_1.  The public location bound CENTRE_RADII[0] is one more public
    parameter that g-DPPCA does not need.  Seeded noise: an experiment, not a release.
    """
    n, d = X.shape
    mu = gaussian_dp_mu(eps, DELTA)
    mu_round = mu * math.sqrt(share / len(CENTRE_RADII))
    rng = np.random.default_rng(seed)
    centre, releases = np.zeros(d), []
    for r in CENTRE_RADII:
        sensitivity = 2.0 * r / n
        releases.append((sensitivity, sensitivity / mu_round))
        step = clip_rows(X - centre, r).mean(axis=0)
        centre = centre + step + rng.normal(0.0, releases[-1][1], size=d)
    return centre, mu * math.sqrt(1.0 - share), releases


def centred_second_moment(X: np.ndarray, centre: np.ndarray, c: float, mu: float):
    """Stage two of the two-stage Analyze Gauss: (second moment of the rows centred at the
    (public, post-processed) ``centre`` and clipped to ``c``, its sigma at GDP ``mu``)."""
    clipped = clip_rows(X - centre, c)
    return clipped.T @ clipped / X.shape[0], math.sqrt(2.0) * c * c / X.shape[0] / mu


def summarise(rows, keys=("model", "n", "eps", "method", "frac")):
    groups = {}
    for row in rows:
        if row.get("err") is None:
            continue
        groups.setdefault(tuple(row[k] for k in keys), []).append(row["err"])
    out = []
    for key, errs in groups.items():
        q1, med, q3 = np.quantile(errs, [0.25, 0.5, 0.75])
        out.append(dict(zip(keys, key), median=med, q1=q1, q3=q3, count=len(errs)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--datasets", type=int, default=20)
    ap.add_argument(
        "--first-dataset",
        type=int,
        default=0,
        help="seed of the first data set (to add data sets to an earlier run)",
    )
    ap.add_argument("--noise-reps", type=int, default=1)
    ap.add_argument("--n-max", type=int, default=30000)
    ap.add_argument(
        "--n-ref", type=int, default=10000, help="n of the epsilon and contamination sweeps"
    )
    ap.add_argument("--models", default=",".join(m for m in MODELS if not m.startswith("contam_")))
    ap.add_argument("--peer-cap", type=float, default=20.0, help="seconds per peer fit")
    ap.add_argument("--out", default=str(ROOT / "docs"))
    ap.add_argument("--replot", action="store_true", help="redraw figures from docs/results.json")
    ap.add_argument("--radii", default="1,4,16", help="public winsor radii")
    ap.add_argument("--n-max-d100", type=int, default=100000, help="n cap for the d = 100 models")
    ap.add_argument(
        "--n-list", default=None, help="explicit n values of the n sweep (overrides --n-max)"
    )
    ap.add_argument(
        "--winsor-n-max", type=int, default=10**9, help="winsor kernels only for n <= this"
    )
    ap.add_argument(
        "--skip", default="", help="comma list of parts to skip: contam,peers,wall,planner"
    )
    ap.add_argument("--peer-ns", default="300,500,1000,3000,10000", help="n ladder of the peers")
    ap.add_argument("--peer-datasets", type=int, default=5)
    ap.add_argument("--peer-models", default="t1_d20_m2,gauss_d20_m2")
    ap.add_argument(
        "--ag-only",
        action="store_true",
        help="only the Analyze Gauss rows (no kernels): adds the baselines to an earlier run",
    )
    ap.add_argument(
        "--merge",
        default=None,
        help="comma list of run directories (each with results.json and rows.json) to merge into --out",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="one model, n = 300, one data set, no peers (seconds); writes to a temporary "
        "directory unless --out is given",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.datasets, args.n_list, args.n_ref, args.models = 1, "300", 300, "t1_d20_m2"
        args.radii, args.skip = "4", "contam,peers,wall,planner"
        if args.out == ap.get_default("out"):
            args.out = tempfile.mkdtemp(prefix="dppca-experiments-smoke-")
    global RADII
    RADII = tuple(float(r) for r in args.radii.split(",") if r)
    if args.quick:
        args.datasets, args.n_max, args.n_ref, args.peer_cap = 5, 3000, 3000, 5.0
        args.radii, RADII = "4", (4.0,)
    out = Path(args.out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    models = args.models.split(",")
    n_grid = [n for n in (1000, 3000, 10000, 30000, 100000) if n <= args.n_max]
    if args.n_list is not None:
        n_grid = [int(float(n)) for n in args.n_list.split(",") if n]
    skip = set(args.skip.split(","))
    eps_grid = [0.1, 0.3, 0.5, 1.0, 3.0, 10.0]
    if args.merge:
        merge(args.merge.split(","), out)
        return
    if args.replot:
        results = json.loads((out / "results.json").read_text())
        make_all(results, out / "figures")
        print(headlines(results))
        return
    rows, t0 = [], time.time()
    record = rows.append

    # 1. n sweep (epsilon 0.5 and 1) and epsilon sweep at n_ref, per model
    for model in models:
        for n in n_grid:
            if MODELS[model][0] >= 100 and n > args.n_max_d100:
                continue
            for s in range(args.first_dataset, args.first_dataset + args.datasets):
                eps_list = eps_grid if n == args.n_ref else [0.5, 1.0]
                evaluate(
                    model,
                    n,
                    s,
                    eps_list,
                    args.noise_reps,
                    record,
                    radii=RADII if n <= args.winsor_n_max else (),
                    kernels=not args.ag_only,
                )
            print(f"[{time.time() - t0:6.0f}s] {model} n={n}", flush=True)

    # 2. contamination sweep (Gaussian d=20, m=2), with the breakdown bound
    bounds = []
    n_c = min(args.n_ref, 3000)
    for frac in [] if "contam" in skip else CONTAM_FRACS:
        for s in range(args.datasets):
            X, _ = evaluate(
                f"contam_{frac:g}", n_c, s, [1.0], args.noise_reps, record, kernels=not args.ag_only
            )
            if s == 0:
                bounds.append(dict(frac=frac, **breakdown_bound(X, 2)))
        print(f"[{time.time() - t0:6.0f}s] contamination {frac}", flush=True)

    # 3. peers under a time cap (diffprivlib, OpenDP), t1 and Gaussian d=20, eps=1
    peer_rows = []
    for model in [] if "peers" in skip else args.peer_models.split(","):
        d, m, df, frac = MODELS[model]
        for name in ("diffprivlib", "opendp"):
            for c in (5.0, 20.0):
                gave_up = False
                for n in [int(float(v)) for v in args.peer_ns.split(",")]:
                    if gave_up:
                        peer_rows.append(
                            dict(
                                model=model,
                                method=f"{name} c={c:g}",
                                n=n,
                                status="skipped",
                                cap=args.peer_cap,
                            )
                        )
                        continue
                    for s in range(args.peer_datasets):
                        spectrum, directions = spiked_spectrum(d, m), random_directions(d, 1000 + s)
                        X = make_elliptical(n, spectrum, directions, df=df, seed=s)
                        comp, wall, status = run_peer(name, X, m, 1.0, c, args.peer_cap)
                        e = sin_theta(comp.T, directions[:, :m]) if comp is not None else None
                        peer_rows.append(
                            dict(
                                model=model,
                                method=f"{name} c={c:g}",
                                n=n,
                                dataset=s,
                                cap=args.peer_cap,
                                wall=wall,
                                status=status,
                                err=e,
                                eps=1.0,
                                frac=0.0,
                            )
                        )
                        if status != "ok":
                            gave_up = True
                            break
                print(f"[{time.time() - t0:6.0f}s] {name} c={c:g} {model}", flush=True)
    # our wall time for the same n (sphere fit through the estimator, synchronous)
    ours_wall = []
    for n in [] if "wall" in skip else (300, 500, 1000, 3000, 10000, 30000):
        X = make_elliptical(n, spiked_spectrum(20, 2), random_directions(20, 0), df=1.0, seed=0)
        start = time.perf_counter()
        dd.DPPCA(2, epsilon=1.0, design="complete", scheduler="synchronous").fit(X)
        ours_wall.append(dict(n=n, wall=time.perf_counter() - start))

    # 4. planner predictions for the n sweep (sphere, analytic, eps 1 and 0.5)
    plan_rows = []
    for model in [] if "planner" in skip else models:
        d, m, df, frac = MODELS[model]
        if frac or isinstance(df, str):  # the planner's model is elliptical and clean
            continue
        um = UtilityModel(spiked_spectrum(d, m), m, df=df, n_triples=40000)
        for n in n_grid:
            for eps in (0.5, 1.0):
                plan_rows.append(
                    dict(
                        model=model,
                        n=n,
                        eps=eps,
                        pred=um.quantile(n, eps, DELTA),
                        pred_classical=um.quantile(n, eps, DELTA, calibration="classical")
                        if eps < 1
                        else None,
                        bound=um.utility_bound(n, eps, DELTA)["bound"],
                    )
                )
        for eps in eps_grid:
            plan_rows.append(
                dict(
                    model=model,
                    n=args.n_ref,
                    eps=eps,
                    pred=um.quantile(args.n_ref, eps, DELTA),
                    sweep="eps",
                )
            )

    results = dict(
        args=vars(args),
        n_grid=n_grid,
        eps_grid=eps_grid,
        summary=summarise(rows),
        contamination=bounds,
        peers=peer_rows,
        ours_wall=ours_wall,
        planner=plan_rows,
        seconds=time.time() - t0,
    )
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (out / "rows.json").write_text(json.dumps(rows, default=float))
    make_all(results, out / "figures")
    (out / "results_tables.md").write_text(tables(results))
    print(headlines(results))
    print(f"done in {time.time() - t0:.0f} s; wrote {out / 'results.json'} and figures")


def merge(dirs, out):
    """Merge several partial runs (each --out DIR with results.json and rows.json) into out."""
    rows, parts, seen = [], [], set()
    for d in dirs:
        parts.append(json.loads((Path(d) / "results.json").read_text()))
        for row in json.loads((Path(d) / "rows.json").read_text()):
            # runs overlap (an --ag-only pass repeats the known-centre Analyze Gauss rows,
            # bit for bit: same data and noise seeds): count each evaluation once
            key = tuple(
                row.get(k) for k in ("model", "n", "eps", "method", "frac", "dataset", "rep")
            )
            if key not in seen:
                seen.add(key)
                rows.append(row)
    n_grid = sorted({n for p in parts for n in p["n_grid"]})
    models = []
    for p in parts:
        models += [m for m in p["args"]["models"].split(",") if m not in models]
    plan = {}
    for p in parts:
        for r in p["planner"]:
            plan[(r["model"], r["n"], r["eps"], r.get("sweep"))] = r
    first = next((p for p in parts if p["contamination"]), parts[0])
    # peers: per model, the rows of the run with the longest time cap
    peers, best_cap = [], {}
    for p in parts:
        for r in p["peers"]:
            r.setdefault("cap", p["args"]["peer_cap"])
            best_cap[r["model"]] = max(best_cap.get(r["model"], 0.0), r["cap"])
    peers = [r for p in parts for r in p["peers"] if r["cap"] == best_cap[r["model"]]]
    args = dict(
        parts[0]["args"],
        out=out.name,
        models=",".join(models),
        merged_from=[Path(d).name for d in dirs],
        datasets=max(p["args"]["datasets"] for p in parts),
        peer_cap=max(p["args"]["peer_cap"] for p in parts if p["peers"]) if peers else 0,
        n_ref=first["args"]["n_ref"],
        runs=[dict(p["args"], out=Path(p["args"]["out"]).name) for p in parts],
    )
    results = dict(
        args=args,
        n_grid=n_grid,
        eps_grid=parts[0]["eps_grid"],
        summary=summarise(rows),
        contamination=first["contamination"],
        peers=peers,
        ours_wall=next((p["ours_wall"] for p in parts if p["ours_wall"]), []),
        planner=list(plan.values()),
        seconds=sum(p["seconds"] for p in parts),
    )
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    make_all(results, out / "figures")
    (out / "results_tables.md").write_text(tables(results))
    print(headlines(results))


# -- plots and headline numbers ------------------------------------------------------------

STYLE = {  # drawing order: later lines on top
    "covariance (non-private)": dict(color="0.5", ls=":"),
    "g sphere (non-private)": dict(color="k", ls=":"),
    "Analyze Gauss c=10": dict(color="C3", ls="--"),
    "best Analyze Gauss, known centre (oracle c)": dict(color="C3", lw=1.6),
    "best Analyze Gauss, private centre (oracle c)": dict(color="C4", lw=1.6),
    "best g-DPPCA winsor (analytic)": dict(color="C2", lw=1.6, ls="--"),
    "g-DPPCA sphere (classical)": dict(color="C0", ls="--"),
    "g-DPPCA sphere (analytic)": dict(color="C0", lw=2.2),
}
# method-name prefixes of the "best of a public grid" lines (the best is chosen after the fact)
BEST_PREFIX = {
    "best g-DPPCA winsor (analytic)": "g-DPPCA winsor",
    "best Analyze Gauss, known centre (oracle c)": "Analyze Gauss c=",
    "best Analyze Gauss, private centre (oracle c)": "Analyze Gauss private centre",
}


def _table(results):
    return {(r["model"], r["n"], r["eps"], r["method"], r["frac"]): r for r in results["summary"]}


def _best(tab, model, n, eps, prefix, frac):
    cands = [
        (v["median"], k[3])
        for k, v in tab.items()
        if k[0] == model and k[1] == n and k[2] == eps and k[4] == frac and k[3].startswith(prefix)
    ]
    return min(cands) if cands else (None, None)


def _series(tab, model, xs, key, method, frac, eps=None, n=None):
    out = []
    for x in xs:
        nn, ee = (x, eps) if key == "n" else (n, x)
        if method.startswith("best "):
            prefix = BEST_PREFIX[method]
            cands = [
                v
                for k, v in tab.items()
                if k[0] == model
                and k[1] == nn
                and k[2] == ee
                and k[4] == frac
                and k[3].startswith(prefix)
                and "classical" not in k[3]
            ]
            row = min(cands, key=lambda v: v["median"]) if cands else None
        else:
            e2 = math.inf if "non-private" in method else ee
            row = tab.get((model, nn, e2, method, frac))
        out.append((x, row["q1"], row["median"], row["q3"]) if row else (x, None, None, None))
    return out


def _plot_lines(ax, series_by_method):
    for method, pts in series_by_method.items():
        pts = [p for p in pts if p[2] is not None]
        if not pts:
            continue
        x, lo, med, hi = (np.array(v, dtype=float) for v in zip(*pts))
        ax.plot(x, med, label=method, marker="o", ms=3, **STYLE.get(method, {}))
        ax.fill_between(x, lo, hi, alpha=0.12, color=STYLE.get(method, {}).get("color"))


def make_all(results, figdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tab = _table(results)
    models = results["args"]["models"].split(",")
    methods = list(STYLE)
    for key, xs, fixed, fname, title in (
        ("n", results["n_grid"], dict(eps=1.0), "error_vs_n.png", "epsilon = 1, delta = 1e-6"),
        (
            "eps",
            results["eps_grid"],
            dict(n=results["args"]["n_ref"]),
            "error_vs_epsilon.png",
            f"n = {results['args']['n_ref']}, delta = 1e-6",
        ),
    ):
        cols = min(4, len(models))
        rows_ = math.ceil(len(models) / cols)
        fig, axes = plt.subplots(rows_, cols, figsize=(4.2 * cols, 3.4 * rows_), squeeze=False)
        for ax, model in zip(axes.flat, models):
            frac = MODELS[model][3]
            series = {
                meth: _series(tab, model, xs, key, meth, frac, **fixed)
                for meth in methods
                if not (meth.endswith("(classical)"))
            }
            if key == "eps":
                series["g-DPPCA sphere (classical)"] = [
                    p
                    for p in _series(
                        tab, model, xs, key, "g-DPPCA sphere (classical)", frac, **fixed
                    )
                    if p[0] < 1
                ]
            _plot_lines(ax, series)
            ax.set_xscale("log"), ax.set_yscale("log")
            ax.set_title(model.replace("_", " "), fontsize=10)
            ax.set_xlabel("n (records)" if key == "n" else "epsilon")
            ax.set_ylabel("sin theta to the truth")
            ax.grid(alpha=0.3, which="both")
        for ax in list(axes.flat)[len(models) :]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
        fig.suptitle(
            f"Subspace error (median, quartile band; {results['args']['datasets']} data sets), {title}"
        )
        fig.tight_layout(rect=(0, 0.08, 1, 0.96))
        fig.savefig(figdir / fname, dpi=110)
        plt.close(fig)

    # records: analytic vs classical at eps 0.5, with the planner
    plan = {(p["model"], p["n"], p["eps"]): p for p in results["planner"] if "sweep" not in p}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, model in zip(axes, ("t1_d20_m2", "gauss_d100_m5")):
        if model not in models:
            continue
        for cal, style in (("analytic", dict(color="C0")), ("classical", dict(color="C1"))):
            pts = [
                p
                for p in _series(
                    tab, model, results["n_grid"], "n", f"g-DPPCA sphere ({cal})", 0.0, eps=0.5
                )
                if p[2] is not None
            ]
            if not pts:
                continue
            x, lo, med, hi = (np.array(v, dtype=float) for v in zip(*pts))
            ax.plot(x, med, marker="o", label=f"measured, {cal}", **style)
            ax.fill_between(x, lo, hi, alpha=0.15, color=style["color"])
            key = "pred" if cal == "analytic" else "pred_classical"
            pr = [plan[(model, n, 0.5)][key] for n in results["n_grid"] if (model, n, 0.5) in plan]
            ax.plot(results["n_grid"][: len(pr)], pr, ls="--", label=f"planner, {cal}", **style)
        ax.set_xscale("log"), ax.set_yscale("log"), ax.grid(alpha=0.3, which="both")
        (
            ax.set_title(f"{model}: sphere, epsilon = 0.5"),
            ax.set_xlabel("n"),
            ax.set_ylabel("sin theta"),
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figdir / "calibration_records.png", dpi=110)
    plt.close(fig)

    _public_clip_plot(results, tab, figdir, plt)
    if results["contamination"]:
        _contamination_plot(results, tab, figdir, plt)
    if results["peers"] or results["ours_wall"]:
        _wall_plot(results, figdir, plt)


def _models_run_at(tab, models, n):
    """The models with a g-DPPCA sphere result at (n, epsilon = 1)."""
    return [mo for mo in models if (mo, n, 1.0, "g-DPPCA sphere (analytic)", MODELS[mo][3]) in tab]


def _public_clip_ratio(tab, model, n, c):
    """Analyze Gauss (private centre, share 0.1, clip c) / g-DPPCA sphere at epsilon = 1."""
    frac = MODELS[model][3]
    ag = tab.get((model, n, 1.0, f"Analyze Gauss private centre 0.1 c={c:g}", frac))
    ours = tab.get((model, n, 1.0, "g-DPPCA sphere (analytic)", frac))
    return ag["median"] / ours["median"] if ag and ours else None


def _public_clip_plot(results, tab, figdir, plt):
    """AG (private centre) with one clip for every model, over g-DPPCA sphere, at n_ref."""
    n = results["args"]["n_ref"]
    models = _models_run_at(tab, results["args"]["models"].split(","), n)
    if not models:
        return
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x = np.arange(len(models))
    for i, c in enumerate(CLIP_NORMS):
        ratios = [_public_clip_ratio(tab, mo, n, c) for mo in models]
        ax.plot(
            x,
            [np.nan if v is None else v for v in ratios],
            marker="o",
            label=f"c = {c:g}",
            color=plt.cm.viridis(i / (len(CLIP_NORMS) - 1)),
        )
    ax.axhline(1.0, color="k", lw=1)
    ax.text(-0.4, 1.05, "above the line: g-DPPCA better", ha="left", fontsize=8)
    ax.set_yscale("log"), ax.grid(alpha=0.3, which="both")
    ax.set_xticks(x, [mo.replace("_", " ") for mo in models], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("error ratio: Analyze Gauss / g-DPPCA")
    ax.set_title(
        f"Analyze Gauss (private centre) with ONE public clip c for all models; n = {n}, epsilon = 1",
        fontsize=9,
    )
    ax.legend(fontsize=8, ncol=5)
    fig.tight_layout()
    fig.savefig(figdir / "public_clip.png", dpi=110)
    plt.close(fig)


def _contamination_plot(results, tab, figdir, plt):
    fig, ax = plt.subplots(figsize=(6, 4))
    fr = [b["frac"] for b in results["contamination"]]
    n_c = min(results["args"]["n_ref"], 3000)
    for meth in (
        "covariance (non-private)",
        "g sphere (non-private)",
        "g-DPPCA sphere (analytic)",
        "best g-DPPCA winsor (analytic)",
        "best Analyze Gauss, known centre (oracle c)",
        "best Analyze Gauss, private centre (oracle c)",
    ):
        pts = []
        for f in fr:
            s = _series(tab, f"contam_{f:g}", [n_c], "n", meth, f, eps=1.0)[0]
            pts.append((max(f, 1e-3),) + s[1:])
        _plot_lines(ax, {meth: pts})
    bound = results["contamination"][0]["fraction"]
    ax.axvline(bound, color="k", lw=0.8)
    ax.text(bound, 0.02, f" breakdown bound\n (sphere, clean): {bound:.3f}", fontsize=8)
    ax.set_xscale("log"), ax.set_yscale("log"), ax.grid(alpha=0.3, which="both")
    ax.set_xlabel("fraction replaced by a tight far cluster (0 plotted at 1e-3)")
    ax.set_ylabel("sin theta"), ax.set_title(f"Gaussian d=20 m=2, n={n_c}, epsilon=1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(figdir / "error_vs_contamination.png", dpi=110)
    plt.close(fig)


def _wall_plot(results, figdir, plt):
    fig, ax = plt.subplots(figsize=(6, 4))
    peers = {}
    for r in results["peers"]:
        if r["model"] != "t1_d20_m2" or r.get("status") == "skipped":
            continue
        peers.setdefault(r["method"], {}).setdefault(r["n"], []).append(r)
    for i, (meth, byn) in enumerate(sorted(peers.items())):
        ns = sorted(byn)
        walls = [np.median([r["wall"] for r in byn[n] if "wall" in r]) for n in ns]
        ax.plot(ns, walls, marker="o", label=meth, color=f"C{i + 3}")
        for n in ns:
            if any(r["status"] == "gave up" for r in byn[n]):
                ax.plot([n], [results["args"]["peer_cap"]], marker="x", ms=12, color=f"C{i + 3}")
    ow = results["ours_wall"]
    ax.plot(
        [r["n"] for r in ow],
        [r["wall"] for r in ow],
        marker="s",
        color="C0",
        lw=2,
        label="g-DPPCA sphere (DPPCA.fit, complete)",
    )
    ax.axhline(results["args"]["peer_cap"], color="k", ls=":", lw=0.8)
    ax.text(300, results["args"]["peer_cap"] * 1.1, "time cap (x = gave up)", fontsize=8)
    ax.set_xscale("log"), ax.set_yscale("log"), ax.grid(alpha=0.3, which="both")
    (
        ax.set_xlabel("n"),
        ax.set_ylabel("wall seconds per fit"),
        ax.set_title("t_1, d = 20, m = 2, epsilon = 1"),
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(figdir / "wall_time_peers.png", dpi=110)
    plt.close(fig)


def _cell(tab, model, n, eps):
    """sphere row, best winsor, best AG (known centre), best AG (private centre) of one cell."""
    frac = MODELS[model][3]
    ours = tab.get((model, n, eps, "g-DPPCA sphere (analytic)", frac))
    return (ours,) + tuple(
        _best(tab, model, n, eps, BEST_PREFIX[k], frac)
        for k in (
            "best g-DPPCA winsor (analytic)",
            "best Analyze Gauss, known centre (oracle c)",
            "best Analyze Gauss, private centre (oracle c)",
        )
    )


def _records_ratios(tab, n_grid, model):
    """n at which the analytic calibration reaches the classical's median, over the classical n."""
    a = [
        p
        for p in _series(tab, model, n_grid, "n", "g-DPPCA sphere (analytic)", 0.0, eps=0.5)
        if p[2] is not None
    ]
    c = _series(tab, model, n_grid, "n", "g-DPPCA sphere (classical)", 0.0, eps=0.5)
    if len(a) < 2:
        return {}
    ln, la = np.log([p[0] for p in a]), np.log([p[2] for p in a])
    out = {}
    for n, _, med, _ in c:
        if med is not None and la.min() <= math.log(med) <= la.max():
            out[n] = math.exp(np.interp(math.log(med), la[::-1], ln[::-1])) / n
    return out


def headlines(results) -> str:
    tab = _table(results)
    n_ref = results["args"]["n_ref"]
    lines = []
    for model in results["args"]["models"].split(","):
        ours, (wi, winame), (ag, agname), (agp, agpname) = _cell(tab, model, n_ref, 1.0)
        if ours is None or ag is None:
            continue
        lines.append(
            f"{model}: n={n_ref} eps=1: sphere {ours['median']:.4f}, best winsor {wi} ({winame}), "
            f"best AG {ag:.4f} ({agname}), best AG private centre {agp} ({agpname}); "
            f"AG/sphere = {ag / ours['median']:.2f}"
            + (f", AG private/sphere = {agp / ours['median']:.2f}" if agp else "")
        )
    for model in results["args"]["models"].split(","):
        ratios = _records_ratios(tab, results["n_grid"], model)
        if ratios:
            lines.append(
                f"{model}: records ratio analytic/classical at eps=0.5 ("
                + ", ".join(f"n={n}: {r:.2f}" for n, r in ratios.items())
                + ")"
            )
    return "\n".join(lines)


def tables(results) -> str:
    """The markdown tables of docs/results.md, from a (merged) results.json."""
    tab = _table(results)
    n_ref, models = results["args"]["n_ref"], results["args"]["models"].split(",")
    counts = {}
    for v in results["summary"]:
        counts.setdefault((v["model"], v["n"]), set()).add(v["count"])

    def f(x):
        return "—" if x is None else f"{x:.3g}"

    def r(x):
        return "—" if x is None else f"{x:.2f}"

    out = [
        f"### Headline cells: n = {n_ref}, epsilon = 1",
        "",
        "| model | g-DPPCA sphere [quartiles] | best winsor | best AG, known centre | best AG, private centre "
        "| AG known / sphere | AG private / sphere | g sphere, non-private | covariance, non-private | data sets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in models:
        ours, (wi, winame), (ag, agname), (agp, agpname) = _cell(tab, model, n_ref, 1.0)
        if ours is None:
            continue
        frac = MODELS[model][3]
        ref_g = tab.get((model, n_ref, math.inf, "g sphere (non-private)", frac))
        ref_c = tab.get((model, n_ref, math.inf, "covariance (non-private)", frac))
        short = lambda name: name.replace("Analyze Gauss ", "").replace("private centre ", "share ")  # noqa: E731
        out.append(
            f"| {model} | {f(ours['median'])} [{f(ours['q1'])}, {f(ours['q3'])}] "
            f"| {f(wi)} ({winame.replace('g-DPPCA winsor ', '').replace(' (analytic)', '') if winame else ''}) "
            f"| {f(ag)} ({short(agname) if agname else ''}) | {f(agp)} ({short(agpname) if agpname else ''}) "
            f"| {r(ag / ours['median']) if ag else '—'} | {r(agp / ours['median']) if agp else '—'} "
            f"| {f(ref_g['median'] if ref_g else None)} | {f(ref_c['median'] if ref_c else None)} "
            f"| {ours['count']} |"
        )
    for key, xs, label in (
        ("eps", results["eps_grid"], f"Epsilon sweep, n = {n_ref}"),
        ("n", results["n_grid"], "n sweep, epsilon = 1"),
    ):
        out += [
            "",
            f"### {label}: g-DPPCA sphere / best AG known centre / best AG private centre "
            "(AG private / sphere)",
            "",
            "| model | " + " | ".join(f"{key} = {x:g}" for x in xs) + " |",
            "|---|" + "---|" * len(xs),
        ]
        for model in models:
            cells = []
            for x in xs:
                n, eps = (n_ref, x) if key == "eps" else (x, 1.0)
                ours, _, (ag, _), (agp, _) = _cell(tab, model, n, eps)
                if ours is None:
                    cells.append("not run")
                    continue
                c = ours["count"]
                cells.append(
                    f"{f(ours['median'])} / {f(ag)} / {f(agp)} "
                    f"({r(agp / ours['median']) if agp else '—'})"
                    + ("" if c >= 20 else f" [{c} sets]")
                )
            if any(c != "not run" for c in cells):
                out.append(f"| {model} | " + " | ".join(cells) + " |")
    for n in sorted({n_ref, max(results["n_grid"], default=n_ref)}):
        present = _models_run_at(tab, models, n)
        out += [
            "",
            f"### One public clipping norm for every model, n = {n}, epsilon = 1: "
            "Analyze Gauss (private centre, share 0.1) / g-DPPCA sphere",
            "",
            "| c | " + " | ".join(present) + " | **worst** |",
            "|---|" + "---|" * (len(present) + 1),
        ]
        for c in CLIP_NORMS:
            ratios = [_public_clip_ratio(tab, mo, n, c) for mo in present]
            known = [x for x in ratios if x is not None]
            out.append(
                f"| {c:g} | "
                + " | ".join(r(x) for x in ratios)
                + f" | **{r(max(known)) if known else '—'}** |"
            )
    out += [
        "",
        "### Records ratio (analytic / classical calibration, epsilon = 0.5)",
        "",
        "| model | " + " | ".join(f"n = {n:g}" for n in results["n_grid"]) + " |",
        "|---|" + "---|" * len(results["n_grid"]),
    ]
    for model in models:
        ratios = _records_ratios(tab, results["n_grid"], model)
        if ratios:
            out.append(
                f"| {model} | " + " | ".join(r(ratios.get(n)) for n in results["n_grid"]) + " |"
            )
    if results["contamination"]:
        fracs = [b["frac"] for b in results["contamination"]]
        n_c = min(n_ref, 3000)
        out += [
            "",
            f"### Contamination: Gaussian d=20 m=2, n = {n_c}, epsilon = 1, a tight far cluster",
            "",
            "| fraction | " + " | ".join(f"{x:g}" for x in fracs) + " |",
            "|---|" + "---|" * len(fracs),
        ]
        for meth in (
            "covariance (non-private)",
            "g sphere (non-private)",
            "g-DPPCA sphere (analytic)",
            "best g-DPPCA winsor (analytic)",
            "Analyze Gauss c=2",
            "Analyze Gauss c=5",
            "Analyze Gauss c=10",
            "best Analyze Gauss, private centre (oracle c)",
        ):
            cells = [
                _series(tab, f"contam_{x:g}", [n_c], "n", meth, x, eps=1.0)[0][2] for x in fracs
            ]
            if any(c is not None for c in cells):
                out.append(f"| {meth} | " + " | ".join(f(c) for c in cells) + " |")
    if results["peers"]:
        out += [
            "",
            "### Peers: median sin theta (median wall seconds) per rung, epsilon = 1",
            "",
            "| model | peer | time cap (s) | rungs |",
            "|---|---|---|---|",
        ]
        byrung = {}
        for row in results["peers"]:
            byrung.setdefault((row["model"], row["method"]), {}).setdefault(row["n"], []).append(
                row
            )
        for (model, meth), rungs in sorted(byrung.items()):
            cells = []
            for n, rows_n in sorted(rungs.items()):
                status = {row["status"] for row in rows_n}
                if status == {"skipped"}:
                    continue
                if status == {"ok"}:
                    cells.append(
                        f"n = {n}: {f(np.median([row['err'] for row in rows_n]))} "
                        f"({np.median([row['wall'] for row in rows_n]):.1f} s, {len(rows_n)} sets)"
                    )
                else:
                    cells.append(
                        f"**gave up at n = {n}**"
                        if "gave up" in status
                        else f"n = {n}: {sorted(status)}"
                    )
            out.append(f"| {model} | {meth} | {rows_n[0]['cap']:g} | " + "; ".join(cells) + " |")
    plan = {(p["model"], p["n"], p["eps"]): p for p in results["planner"] if "sweep" not in p}
    out += [
        "",
        "### Planner check: predicted median / measured median (sphere, analytic)",
        "",
        "| model | epsilon | " + " | ".join(f"n = {n:g}" for n in results["n_grid"]) + " |",
        "|---|---|" + "---|" * len(results["n_grid"]),
    ]
    for model in models:
        for eps in (0.5, 1.0):
            cells = []
            for n in results["n_grid"]:
                pred = plan.get((model, n, eps))
                ours = tab.get((model, n, eps, "g-DPPCA sphere (analytic)", MODELS[model][3]))
                cells.append(r(pred["pred"] / ours["median"]) if pred and ours else "—")
            if any(c != "—" for c in cells):
                out.append(f"| {model} | {eps:g} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
