"""The app's parts without a browser: the page builds (notebook path), post-processing
is exact arithmetic on the stored release, the release folder round-trips.

Small data on the synchronous scheduler; seeds make TEST DATA only.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pn = pytest.importorskip("panel")

import dask_dppca as dd  # noqa: E402
from dask_dppca.analysis.report import score_map_of  # noqa: E402
from dask_dppca.app import build_app  # noqa: E402
from dask_dppca.app.page import AppPage, bounded_pve, first_k, one_line  # noqa: E402
from dask_dppca.app.releases import ReleaseStore, releases_folder  # noqa: E402
from dask_dppca.privacy.budget.privacy_budget import BudgetExceededError  # noqa: E402


@pytest.fixture(scope="module")
def result():
    X = np.random.default_rng(2).standard_normal((1500, 5)) * np.sqrt([9, 4, 1, 1, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dd.analyze(X, n_components=3, epsilon=3.0, delta=1e-5, scheduler="synchronous")


def test_first_k_is_the_released_values_cut_and_renormalised(result):
    shown = first_k(result, 2)
    assert shown.directions.shape == (2, result.directions.shape[1])
    for method, values in result.scree["values"].items():
        assert shown.scree["values"][method] == list(values)[:2]
        top = np.maximum(np.asarray(values[:2]), 0)
        expected = top / top.sum() if top.sum() > 0 else top
        np.testing.assert_allclose(shown.scree["pve_topk"][method], expected)
    bounded, _ = bounded_pve(result.scree["pve_total"])
    assert shown.scree["pve_total"] == bounded[:2]  # over all d, bounded over every released
    assert first_k(result, 99).directions.shape[0] == 3  # never more than released


def test_the_release_folder_round_trips_newest_first(result, tmp_path):
    store = ReleaseStore(releases_folder(str(tmp_path / "s.ledger")))
    assert store.keys() == []
    key = store.add(result)
    assert store.keys() == [key]
    again = store.load(key)
    np.testing.assert_array_equal(again.directions, result.directions)
    assert "k=3, epsilon=3, delta=1e-05" in store.label(key)
    with pytest.raises(ValueError, match="key"):
        store.load("../escape")


@pytest.mark.slow
def test_the_page_builds_for_a_notebook_and_shows_a_release_for_free(result, tmp_path):
    page = AppPage(epsilon=1.0, delta=1e-5)  # an in-memory budget
    assert "Remaining" in page.remaining.object and "in memory" in page.remaining.object
    page._show(result)
    mapped = score_map_of(result)
    maps = 0 if mapped is None else 2 + (len(mapped.groups) > 1)
    assert page.plots.object.count("<img") == 1 + maps and "directions" in page.table.object
    assert page.resample.visible == (mapped is not None)
    before = page.budget.as_dict()
    if mapped is not None:  # new synthetic points, the same release
        shown = page.plots.object
        page._resample()
        assert page.plots.object != shown
    page.kind.value = "PVE (all d)"
    page.show_k.value = 1
    assert page.show_k.options == list(range(1, result.directions.shape[0] + 1))
    assert "loadings" in page.directions.object and "x0" in page.directions.object
    page.palette.value = "greys (print)"
    assert "PVE (all d)" not in page.plots.object or "<img" in page.plots.object
    assert page.budget.as_dict() == before  # post-processing spends nothing
    assert isinstance(build_app(), pn.viewable.Viewable)
    report = page._report_file().getvalue()  # the page's "Download the HTML report"
    assert report.startswith("<!DOCTYPE html>") and result.meta["analysis_id"] in report
    assert f"{page.budget.remaining():.6g}" in report


def test_errors_are_one_line():
    assert one_line(BudgetExceededError("a\nb")).startswith("Refused, nothing charged: a")
    assert one_line(ValueError("k: bad\nmore")) == "Check the inputs: k: bad"


def test_without_a_ledger_every_page_of_a_server_shares_one_budget(result):
    import dask_dppca as dd

    budget = dd.PrivacyBudget(1.0, 1e-5)
    releases = ReleaseStore(None)
    first = AppPage(budget=budget, releases=releases)
    budget.spend(_charge(), label="test")
    again = AppPage(budget=budget, releases=releases)  # a reload
    assert again.budget is first.budget and again.budget.releases == 1
    releases.add(result)
    assert (
        again.past.options == {}
        and len(AppPage(budget=budget, releases=releases).past.options) == 1
    )


def _charge():
    from dask_dppca.privacy.budget.privacy_budget import GaussianCharge

    return GaussianCharge(sensitivity=1.0, sigma=4.0)


def test_merged_bins_are_block_sums_of_the_released_cells():
    from dask_dppca.app.page import merge_bins, merge_choices
    from dask_dppca.privacy.mechanisms.score_map import ScoreMap

    mx, my, groups = 4, 6, 2
    rng = np.random.default_rng(4)  # a made-up release (test data only)
    counts = rng.normal(5.0, 2.0, (groups, mx * my + 1))
    record = {
        "frame": {"centre": [0.0, 0.0], "half_width": [1.0, 1.0]},
        "histograms": {
            "additive": {
                "bins": [mx, my],
                "counts": counts.tolist(),
                "method": "additive",
                "sigma": 2.0,
            }
        },
        "groups": ["a", "b"],
    }
    score_map = ScoreMap.from_dict(record)
    assert merge_choices(score_map) == {
        "none (4 x 6 map)": 1,
        "2 x 2 cells into one (2 x 3 map)": 2,
    }
    merged = merge_bins(score_map, 2).histogram()
    assert merged.bins == (2, 3) and merged.sigma == 4.0
    for g in range(groups):  # oracle: cell by cell, x fastest
        for y in range(3):
            for x in range(2):
                cells = [(2 * y + dy) * mx + 2 * x + dx for dy in (0, 1) for dx in (0, 1)]
                assert merged.counts[g, y * 2 + x] == pytest.approx(counts[g, cells].sum())
        assert merged.counts[g, -1] == counts[g, -1]  # out of frame kept
    assert merge_bins(score_map, 1) is score_map
    with pytest.raises(ValueError, match="merge"):
        merge_bins(score_map, 3)


def test_pve_over_all_d_is_shown_as_shares_that_add_up():
    shares, note = bounded_pve([1.29, 0.4, -0.05])
    assert all(0 <= v <= 1 for v in shares) and sum(shares) == pytest.approx(1.0)
    assert shares[0] > shares[1] > shares[2] == 0 and "1.64" in note
    assert bounded_pve([0.5, 0.2]) == ([0.5, 0.2], None)  # believable: unchanged
    assert bounded_pve([0.5, -0.1])[0] == [0.5, 0.0]


@pytest.mark.slow
def test_the_cost_line_is_the_release_check_over_a_grid(monkeypatch):
    """The page's verdict (planned_split + check_charge) against what analyze itself does
    under the same ledger: refused (BudgetExceededError) or past its check (stopped just
    after it, before anything is read), over (epsilon, delta, split, ledger state).
    """
    import itertools

    import dask_dppca.analysis.run as run
    from dask_dppca.analysis.run import check_charge, planned_split
    from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, PartsCharge, PrivacyBudget

    class PastTheCheck(Exception):
        pass

    def stop(*_, **__):
        raise PastTheCheck

    monkeypatch.setattr(run, "_run_stages", stop)
    import dask.array as da

    n, d = 10**6, 4  # large: every stage accurate enough at these shares; never computed
    X = da.zeros((n, d), chunks=(10**5, d))  # only its public shape is used before the check
    groups = np.zeros(n, dtype=np.int8)
    splits = [
        {"split": {"directions": 0.5, "scree": 0.25, "score_map": 0.25}},
        {"split": {"directions": 1.0, "scree": 0.2}, "score_map": False},
        {"split": {"directions": 0.5, "scree": 0.25, "score_map": 0.25, "median": 0.1},
         "stages": ["median"], "scale": "robust",
         "split_scale": 0.2},
        {"split": {"directions": 0.5, "scree": 0.25, "score_map": 0.25}, "grouped": True},
    ]  # fmt: skip
    outcomes = set()
    states = ("fresh", "gaussian", "parts")  # a ledger with nothing, a Gaussian row, parts
    grid = [
        point
        for point in itertools.product(states, (0.1, 2.5), (5e-7, 1e-6, 2e-6), splits)
        if point[0] != "parts" or point[3] is splits[0]  # mixed rows: slow to compose
    ]
    for state, eps, dlt, plan in grid:
        budget = PrivacyBudget(3.0, 1e-6)
        if state == "gaussian":
            budget.spend(GaussianCharge(sensitivity=1.0, sigma=2.5))
        elif state == "parts":
            budget.spend(PartsCharge(planned_split(2, d, epsilon=1.0, delta=1e-6).all_parts))
        split = dict(
            plan["split"], **({"scale": plan["split_scale"]} if "split_scale" in plan else {})
        )
        public = dict(
            split=split,
            score_map=plan.get("score_map", True),
            stages=plan.get("stages", ()),
            scale=plan.get("scale", "none"),
        )
        try:
            check_charge(
                budget,
                planned_split(
                    2, d, epsilon=eps, delta=dlt, grouped=plan.get("grouped", False), **public
                ),
            )
            page_says = "fits"
        except BudgetExceededError:
            page_says = "refused"
        extra = {"groups": groups, "group_domain": [0, 1]} if plan.get("grouped") else {}
        try:
            with budget:
                dd.analyze(X, n_components=2, epsilon=eps, delta=dlt, **public, **extra)
        except PastTheCheck:
            release_does = "fits"
        except BudgetExceededError:
            release_does = "refused"
        assert page_says == release_does, (state, eps, dlt, plan)
        outcomes.add((state, eps, dlt == 1e-6, release_does))
    assert ("fresh", 0.1, True, "fits") in outcomes  # at the ledger's own delta: fits
    assert {o[-1] for o in outcomes} == {"fits", "refused"}
