"""``dask-dppca app`` with groups, in a real headless Chromium: a grouped release through
the page (labels and their PUBLIC domain as the CLI takes them), the group display
switched off and recoloured for free, and a release made by the CLI on the same ledger
listed after a reload.  A 2000 x 6 Zarr store and a Zarr array of integer labels 0, 1, 2
(2 outside the domain "0,1": the group "other"); seeded: TEST DATA only.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget
from tests.browser import panel_dom as dom
from tests.browser.conftest import console_errors, not_blank, screenshot_dir
from tests.browser.test_app_browser import _store, serving

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def _figures(driver) -> dict[str, str]:
    """The plots on the page: alt text -> (the end of the image data, the caption)."""
    pairs = driver.execute_script(
        dom._BOOT + "const h = window.__dpFind(document, 'dp-plots');"
        "if (!h) return [];"
        "function all(r){let out=[...r.querySelectorAll('figure')];"
        "for(const e of r.querySelectorAll('*'))"
        "{if(e.shadowRoot) out=out.concat(all(e.shadowRoot));}"
        "return out;}"
        "return all(h.shadowRoot || h).map(f => {const i = f.querySelector('img');"
        "const c = f.querySelector('figcaption');"
        "return [i.alt, i.complete && i.naturalWidth > 100 ? i.src.slice(-60) : '',"
        " c ? c.textContent : ''];});"
    )
    return {alt: (src, caption) for alt, src, caption in pairs}


@pytest.fixture(scope="module")
def grouped_app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grouped-app")
    store = _store(folder / "x.zarr")
    labels = np.random.default_rng(4).choice([0, 1, 2], 2000, p=[0.6, 0.3, 0.1])  # test data
    z = zarr.open_array(str(folder / "site.zarr"), mode="w", shape=(2000,), dtype="i8")
    z[:] = labels
    ledger = str(folder / "study.ledger")
    PrivacyBudget(4.0, 1e-5, ledger=ledger, create=True)
    with serving(ledger, store, folder) as url:
        yield url, ledger, store, str(folder / "site.zarr"), folder


def test_a_grouped_release_through_the_page_and_a_cli_release_after_reload(
    grouped_app, browser, capsys
):
    url, ledger, store, site, folder = grouped_app
    shots = screenshot_dir()
    browser.get(url)
    dom.wait_for(lambda: "n = 2000" in dom.text(browser, "dp-store-info"), 60, "the store")
    dom.set_value(browser, "dp-group-labels", site)
    dom.set_value(browser, "dp-group-domain", "0,1")
    dom.set_value(browser, "dp-epsilon", 1.5)
    dom.wait_for(lambda: "epsilon=1.5," in dom.text(browser, "dp-cost"), 20, "the cost")
    dom.release_and_wait(browser, "the grouped release")
    assert dom.text(browser, "dp-error") == ""
    saved = sorted(os.listdir(ledger + ".releases"))
    assert len(saved) == 1
    result = PrivateAnalysis.load(os.path.join(ledger + ".releases", saved[0]))
    assert result.score_map.groups == ("0", "1", "other")
    assert any("noisy group sizes" in r["release"] for r in result.privacy)
    sizes = result.score_map.group_sizes()
    assert sizes["0"] > sizes["1"] > 0  # 60 % and 30 % of the rows, noisy
    figures = dom.wait_for(lambda: _figures(browser), 30, "the plots")
    assert {"score map", "score map per group", "synthetic points"} <= set(figures)
    assert all(src for src, _ in figures.values()), figures
    assert "colours by group" in figures["synthetic points"][1]
    if shots is not None:
        browser.set_window_size(1400, 2600)
        (shots / "app-groups.png").write_bytes(browser.get_screenshot_as_png())
    spent = PrivacyBudget.open(ledger).as_dict()

    # -- free: a palette recolours the synthetic points; "groups" off: one colour, no panels
    before = _figures(browser)["synthetic points"][0]
    dom.set_value(browser, "dp-palette", "greys (print)")
    dom.wait_for(
        lambda: _figures(browser).get("synthetic points", ("", ""))[0] not in ("", before),
        30,
        "the recoloured synthetic points",
    )
    dom.click(browser, "dp-groups", "input")
    dom.wait_for(
        lambda: "score map per group" not in _figures(browser), 30, "the map without groups"
    )
    caption = _figures(browser)["synthetic points"][1]
    assert "colours by group" not in caption
    if shots is not None:
        (shots / "app-groups-off.png").write_bytes(browser.get_screenshot_as_png())
        browser.set_window_size(1280, 1000)
    assert PrivacyBudget.open(ledger).as_dict() == spent  # post-processing: nothing charged

    # -- a release by the CLI on the same ledger is listed after a reload ------------------
    from dask_dppca.cli import main

    code = main(
        [
            "analyze",
            store,
            "-k",
            "2",
            "--epsilon",
            "0.7",
            "--scheduler",
            "synchronous",
            "--budget",
            ledger,
            "--output",
            str(folder / "cli.json"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert len(os.listdir(ledger + ".releases")) == 2
    browser.refresh()
    dom.wait_for(lambda: "n = 2000" in dom.text(browser, "dp-store-info"), 60, "the reload")
    dom.wait_for(
        lambda: "epsilon=0.7," in dom.text(browser, "dp-past"), 30, "the CLI release listed"
    )
    options = dom.text(browser, "dp-past")
    assert "epsilon=1.5," in options
    assert console_errors(browser) == []
    assert not_blank(browser.get_screenshot_as_png()) > 0.05
