"""The HTML report in a real headless Chromium: self-contained, every image loads, no
console error, not blank, and the privacy table composes to the stated total.

Small data on the synchronous scheduler (fast); the data's seed makes TEST DATA only.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.report import render_report
from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.privacy.mechanisms.accounting import compose
from dask_dppca.privacy.mechanisms.parts import GaussianPart, PureDPPart
from tests.browser.conftest import console_errors, not_blank, screenshot_dir


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    rng = np.random.default_rng(5)  # test data only
    X = rng.standard_normal((2000, 6)) * np.sqrt([9.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    folder = tmp_path_factory.mktemp("report")
    budget = dd.PrivacyBudget(5.0, 1e-5, ledger=folder / "study.ledger", create=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with budget:
            result = dd.analyze(X, n_components=3, epsilon=3.0, delta=1e-5, scheduler="synchronous")
    path = folder / "report.html"
    text = result.to_html(path, budget=budget)
    return result, budget, path, text


def test_the_report_is_one_file_with_nothing_to_fetch(report):
    result, budget, path, text = report
    assert path.read_text(encoding="utf-8") == text
    # nothing fetched at view time: no script, no stylesheet link, every src inline
    assert "<script" not in text and "<link" not in text
    sources = re.findall(r'src="([^"]*)"', text)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http://" not in text and "https://" not in text
    # the public metadata, the version, the ledger's rows and what remains
    assert f">{result.meta['n_samples']}<" in text and f">{result.meta['n_features']}<" in text
    assert result.meta["dataset"] in text and dd.__version__ in text
    assert f"{budget.remaining():.6g}" in text
    assert "NOT PRIVATE" not in text  # nothing non-private was passed


def test_a_reference_is_labelled_not_private(report):
    result = report[0]
    text = render_report(result, reference=[9.0, 4.0, 1.0])
    assert text.count("NOT PRIVATE") >= 1 and "class='warn'" in text


def _with_score_map(result, X):
    """The result with a grouped score map released here (the analysis's own stage may
    not run yet: the report shows whatever map the result holds).
    """
    import dataclasses

    import dask.array as da

    from dask_dppca.compute.target import LocalScheduler
    from dask_dppca.compute.trusted.score_map import release_score_map
    from dask_dppca.graph.score_stats import project_scores
    from dask_dppca.privacy.mechanisms.score_map import ScoreMapMechanism

    n = X.shape[0]
    labels = np.where(np.arange(n) % 2 == 0, "a", "b")  # public test labels
    mechanism = ScoreMapMechanism(n, 1.0, 1e-6, bins=(8, 8), domain=("a", "b"))
    scores = project_scores(da.from_array(X, chunks=(500, X.shape[1])), result.directions[:2])
    score_map = release_score_map(LocalScheduler("synchronous"), scores, mechanism, labels=labels)
    return dataclasses.replace(result, score_map=score_map)


@pytest.mark.slow
def test_the_score_map_is_drawn_per_group_with_synthetic_points(report, tmp_path, browser):
    result, _, _, _ = report
    X = np.random.default_rng(5).standard_normal((2000, 6))  # test data only
    mapped = _with_score_map(result, X)
    path = tmp_path / "map.html"
    text = mapped.to_html(path)
    for alt in ("score map", "score map per group", "synthetic points"):
        assert f'alt="{alt}"' in text
    browser.get(path.as_uri())
    console_errors(browser)
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth]);"
    )
    # 3 scree plots, the loadings, the map, its group panels, the synthetic points
    assert len(images) == 7 and all(done and width > 100 for done, width in images)
    # saved and loaded, the map is still drawn (the JSON holds it)
    mapped.save(tmp_path / "map.json")
    again = PrivateAnalysis.load(tmp_path / "map.json").to_html()
    assert 'alt="score map per group"' in again


def _table_in_browser(browser, table_id):
    return browser.execute_script(
        f"return Array.from(document.querySelectorAll('#{table_id} tr')).map("
        "r => Array.from(r.cells).map(c => [c.textContent, c.dataset.value || null]));"
    )


def test_the_loadings_and_the_map_parameters_in_chromium(tmp_path, browser):
    """A grouped analysis of a DataFrame with column names: the report's loadings table,
    as the browser shows it, holds exactly the released components under the input's
    column names, and its parameters list the group domain and the map's bins."""
    import pandas as pd

    rng = np.random.default_rng(8)  # test data only
    X = rng.standard_normal((3000, 5)) * np.sqrt([9.0, 4.0, 1.0, 1.0, 1.0])
    frame = pd.DataFrame(X, columns=["age", "income", "hours", "rooms", "visits"])
    frame["site"] = np.where(np.arange(3000) % 3 == 0, "north", "south")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dd.analyze(
            frame,
            n_components=3,
            epsilon=3.0,
            delta=1e-5,
            groups="site",
            group_domain=("north", "south"),
            scheduler="synchronous",
        )
    path = tmp_path / "loadings.html"
    result.to_html(path)
    browser.get(path.as_uri())
    assert console_errors(browser) == []
    rows = _table_in_browser(browser, "loadings")
    assert [c[0] for c in rows[0]] == ["feature", "PC1", "PC2", "PC3"]
    assert [r[0][0] for r in rows[1:]] == ["age", "income", "hours", "rooms", "visits"]
    shown = np.array([[float(v) for _, v in r[1:]] for r in rows[1:]])
    np.testing.assert_array_equal(shown, result.directions.T)  # exactly the release
    printed = np.array([[float(t) for t, _ in r[1:]] for r in rows[1:]])
    np.testing.assert_allclose(printed, result.directions.T, atol=5e-5)
    params = {r[0][0]: r[1][0] for r in _table_in_browser(browser, "parameters")}
    mx, my = result.score_map.bins
    assert params["score map bins"] == f"{mx} x {my}"
    assert params["group domain (public)"].startswith("north, south")
    assert browser.find_element("css selector", "img[alt='loadings plot']").get_attribute(
        "naturalWidth"
    ) not in (None, "0")
    if (where := screenshot_dir()) is not None:
        browser.set_window_size(1280, 5200)
        (where / "report-loadings-full.png").write_bytes(browser.get_screenshot_as_png())
        browser.set_window_size(1280, 1000)
    # without column names: x0 .. x4, or the names given to the report
    named = render_report(dataclasses_replace_meta(result), feature_names=list("vwxyz"))
    assert "<th>v</th>" in named and "<th>z</th>" in named
    plain = render_report(dataclasses_replace_meta(result))
    assert "<th>x0</th>" in plain and "<th>x4</th>" in plain
    with pytest.raises(ValueError, match="feature_names"):
        render_report(result, feature_names=["a", "b"])


def dataclasses_replace_meta(result):
    """The result as if its input had had no column names."""
    import dataclasses

    meta = {k: v for k, v in result.meta.items() if k != "feature_names"}
    return dataclasses.replace(result, meta=meta)


def test_the_report_in_chromium(report, browser):
    result, _, path, _ = report
    browser.get(path.as_uri())
    console_errors(browser)  # start clean after the load
    browser.refresh()
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt]);"
    )
    assert len(images) >= 3
    assert all(done and width > 100 for done, width, _ in images), images
    assert console_errors(browser) == []
    png = browser.get_screenshot_as_png()
    assert not_blank(png) > 0.05
    if (where := screenshot_dir()) is not None:
        (where / "report.png").write_bytes(png)
        browser.set_window_size(1280, 4000)
        (where / "report-full.png").write_bytes(browser.get_screenshot_as_png())
        browser.set_window_size(1280, 1000)
    # the privacy table as the browser shows it: its parts compose to the stated total
    parts = []
    for kind, count, mu, eps in browser.execute_script(
        "return Array.from(document.querySelectorAll('#privacy-table tr.part')).map("
        "r => [r.dataset.kind, +r.dataset.count, r.dataset.mu, r.dataset.epsilon]);"
    ):
        part = GaussianPart(float(mu)) if kind == "gaussian" else PureDPPart(float(eps))
        parts += [part] * int(count)
    shown = float(browser.find_element("id", "composed-epsilon").text)
    total = float(browser.find_element("id", "total-epsilon").text)
    delta = float(browser.find_element("id", "total-delta").text)
    assert compose(parts).epsilon(delta) == pytest.approx(shown, rel=1e-5)
    assert shown <= total * (1 + 1e-9)
    assert total == result.meta["epsilon"]
    # every noise scale re-derived from the other columns
    recomputed = browser.execute_script(
        "return Array.from(document.querySelectorAll('#privacy-table tr.part')).map("
        "r => r.cells[10].textContent);"
    )
    noisy = [row.get("noise") is not None for row in result.privacy]
    assert any(noisy)
    for cell, has_noise in zip(recomputed, noisy):
        assert cell.endswith("(matches)") if has_noise else "no noise scale" in cell, cell


@pytest.mark.slow
def test_analyze_writes_the_report_with_the_ledger(tmp_path, capsys):
    from dask_dppca.cli import main
    from tests.cli import write_store

    store = write_store(tmp_path / "x.zarr", n=2000, d=4)
    dd.PrivacyBudget(4.0, 1e-5, ledger=tmp_path / "study.ledger", create=True)
    code = main(
        [
            "analyze",
            store,
            "-k",
            "2",
            "--scheduler",
            "synchronous",
            "--budget",
            str(tmp_path / "study.ledger"),
            "--output",
            str(tmp_path / "r.json"),
            "--report",
            str(tmp_path / "report.html"),
            "--feature-names",
            "height, weight,age,score",
        ]
    )
    assert code == 0, capsys.readouterr().err
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    for name in ("height", "weight", "age", "score"):  # the loadings' rows, as named
        assert f'<tr><th>{name}</th><td class="num" data-value=' in text
    remaining = dd.PrivacyBudget.open(tmp_path / "study.ledger").remaining()
    assert f"{remaining:.6g}" in text and "x.zarr" in text
    assert "row chunks of" in text  # the store's own chunking
    again = ["--output", str(tmp_path / "r2.json"), "--report", str(tmp_path / "report.html")]
    assert main(["analyze", store, *again]) != 0
    assert "--report" in capsys.readouterr().err
