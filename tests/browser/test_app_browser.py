"""``dask-dppca app`` in a real headless Chromium: a real app process on a free loopback
port (started and stopped here, its whole process group ended), the default compute
path (the embedded cluster).

What is asserted on the ledger FILE (``PrivacyBudget.open``), not on the page: a
release charges exactly its parts; post-processing (k shown, PVE, colours, re-sampling)
charges nothing; a release larger than what remains is refused and charges nothing.
Data: a 2000 x 6 Zarr store (seeded: test data only).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import time

import numpy as np
import pytest
import zarr

from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget
from dask_dppca.privacy.mechanisms.parts import part_from_dict
from tests.browser import panel_dom as dom
from tests.browser.conftest import console_errors, not_blank, screenshot_dir
from tests.cli import CONSOLE_SCRIPT

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _store(path) -> str:
    z = zarr.open_array(str(path), mode="w", shape=(2000, 6), chunks=(500, 6), dtype="f8")
    rng = np.random.default_rng(3)  # test data only
    z[:] = rng.standard_normal((2000, 6)) * np.sqrt([9.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    return str(path)


@contextlib.contextmanager
def serving(ledger: str, store: str, folder):
    """A real ``dask-dppca app`` process on a free loopback port; its URL.  The whole
    process group (the app and the cluster it starts) is ended on exit."""
    port = _free_port()
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "app", "--ledger", ledger, store, "--port", str(port)],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the cluster it starts ends with it
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a bounded wait
        assert ready, "the app printed nothing in 120 s"
        line = proc.stdout.readline()  # the app prints its URL once it listens
        assert f"http://127.0.0.1:{port}/" in line, line + (proc.stdout.read() or "")
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the group's cluster processes gone too
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("app")
    store = _store(folder / "x.zarr")
    ledger = str(folder / "study.ledger")
    PrivacyBudget(4.0, 1e-5, ledger=ledger, create=True)
    with serving(ledger, store, folder) as url:
        yield url, ledger, store, folder


def _ledger(path: str) -> dict:
    return PrivacyBudget.open(path).as_dict()


def _parts_key(parts) -> list[tuple[str, float]]:
    out = []
    for p in parts:
        out.append(("gaussian", p.mu) if hasattr(p, "mu") else ("pure", p.epsilon))
    return sorted(out)


def _remaining_on_page(driver) -> float:
    return float(dom.text(driver, "dp-remaining-epsilon"))


def _images(driver) -> list:
    return driver.execute_script(
        dom._BOOT + "const h = window.__dpFind(document, 'dp-plots');"
        "const root = h.shadowRoot || h;"
        "function all(r){let out=[...r.querySelectorAll('img')];"
        "for(const e of r.querySelectorAll('*'))"
        "{if(e.shadowRoot) out=out.concat(all(e.shadowRoot));}"
        "return out;}"
        "return all(root).map(i => [i.complete, i.naturalWidth, i.src.slice(-40)]);"
    )


def test_the_app_releases_within_the_ledger_and_explores_for_free(app, browser):
    url, ledger, store, folder = app
    shots = screenshot_dir()
    start = time.monotonic()
    browser.get(url)
    dom.wait_for(lambda: "n = 2000" in dom.text(browser, "dp-store-info"), 60, "the store's n")
    load_s = time.monotonic() - start
    assert "d = 6" in dom.text(browser, "dp-store-info")
    # a bad storage option: one clear line; then the store as a URL with its options
    dom.set_value(browser, "dp-options", "{not json")
    dom.click(browser, "dp-open")
    error = dom.wait_for(lambda: dom.text(browser, "dp-error"), 30, "the error line")
    assert error.startswith("Check the inputs: storage options: not JSON"), error
    dom.set_value(browser, "dp-options", '{"auto_mkdir": false}')
    dom.set_value(browser, "dp-store", "file://" + store)
    dom.click(browser, "dp-open")
    dom.wait_for(lambda: not dom.text(browser, "dp-error"), 30, "the error to clear")
    assert "n = 2000" in dom.text(browser, "dp-store-info")
    before = _ledger(ledger)
    assert _remaining_on_page(browser) == pytest.approx(float(f"{before['remaining']['1']:.6g}"))
    # the cost is on the page before the press
    dom.set_value(browser, "dp-epsilon", 2)
    dom.wait_for(lambda: "epsilon=2," in dom.text(browser, "dp-cost"), 20, "the cost")
    assert "fits what remains" in dom.text(browser, "dp-cost")

    # -- release: the ledger is charged exactly the release's parts ----------------------
    clock = time.monotonic()
    dom.click(browser, "dp-release")
    seen = set()

    def released() -> bool:
        status = dom.text(browser, "dp-status")
        seen.add(status)
        return "Released in" in status or bool(dom.text(browser, "dp-error"))

    dom.wait_for(released, 300, "the release")
    release_s = time.monotonic() - clock
    # while it ran, the page kept answering: the elapsed time ticked on it
    ticks = {s for s in seen if re.search(r"(?<!\d)[1-9]\d* s so far", s)}
    assert ticks or release_s < 3.0, seen
    assert dom.text(browser, "dp-error") == ""
    after = _ledger(ledger)
    new = [r for r in after["releases"] if r["id"] not in {x["id"] for x in before["releases"]}]
    assert new and all(r["state"] == "committed" for r in new)
    charged = []
    for row in new:
        charged += [part_from_dict({"kind": _kind(p), **p}) for p in row["parts"]] or [
            part_from_dict({"kind": "gaussian", "mu": row["mu"]})
        ]
    saved = sorted(os.listdir(ledger + ".releases"))
    assert len(saved) == 1
    from dask_dppca.analysis.result import PrivateAnalysis

    result = PrivateAnalysis.load(os.path.join(ledger + ".releases", saved[0]))
    expected = [part_from_dict(p) for p in result.meta["parts"]]
    assert len(charged) == len(expected)
    for (k1, v1), (k2, v2) in zip(_parts_key(charged), _parts_key(expected)):
        assert k1 == k2 and v1 == pytest.approx(v2, rel=1e-9)
    assert after["remaining"]["1"] < before["remaining"]["1"]
    dom.wait_for(
        lambda: _remaining_on_page(browser) == float(f"{after['remaining']['1']:.6g}"),
        20,
        "the page's remaining budget to equal the ledger's",
    )
    images = dom.wait_for(lambda: _images(browser), 30, "the plots")
    assert all(done and width > 100 for done, width, _ in images), images
    assert "directions" in dom.text(browser, "dp-table")
    _hover_reads_a_released_count(browser, result)
    if shots is not None:
        (shots / "app.png").write_bytes(browser.get_screenshot_as_png())

    # -- post-processing: the ledger does not change ------------------------------------
    first = _images(browser)
    dom.click(browser, "dp-kind", "button:not(.bk-active)")
    dom.wait_for(lambda: _images(browser) != first, 30, "the PVE plot")
    dom.set_value(browser, "dp-show-k", 1)
    second = _images(browser)
    dom.wait_for(lambda: _images(browser) != second, 30, "the plot with k = 1")
    dom.click(browser, "dp-resample")
    dom.set_value(browser, "dp-palette", "greys (print)")
    time.sleep(1.0)
    assert "spend NO privacy budget" in dom.text(browser, "dp-free")
    assert _ledger(ledger) == after

    # -- a release larger than what remains: refused, nothing charged --------------------
    dom.set_value(browser, "dp-epsilon", 5.0)
    dom.wait_for(lambda: "does NOT fit" in dom.text(browser, "dp-cost"), 20, "the warning")
    dom.click(browser, "dp-release")
    error = dom.wait_for(lambda: dom.text(browser, "dp-error"), 120, "the refusal")
    assert error.startswith("Refused, nothing charged") and "\n" not in error, error
    assert _ledger(ledger) == after
    assert len(os.listdir(ledger + ".releases")) == 1

    # -- reload: the past release is listed and reopens (free) ---------------------------
    browser.refresh()
    dom.wait_for(lambda: "n = 2000" in dom.text(browser, "dp-store-info"), 60, "the reload")
    options = dom.text(browser, "dp-past")
    assert "x.zarr, k=2, epsilon=2," in options, options
    dom.click(browser, "dp-reopen")
    dom.wait_for(lambda: _images(browser), 30, "the reopened release")
    assert _ledger(ledger) == after
    assert console_errors(browser) == []
    png = browser.get_screenshot_as_png()
    assert not_blank(png) > 0.05
    print(f"page load {load_s:.2f} s, release to plots {release_s:.2f} s")
    _a_table_with_a_text_column(browser, folder, ledger, shots)


def _hover_reads_a_released_count(browser, result) -> None:
    """The explorable plots: a scree plot and the score map, each a Bokeh canvas; the
    mouse over the map's middle shows a cell's noisy count as released (one of the
    release's own cells, pooled over groups), and the scree's hover a released value."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvases = dom.wait_for(
        lambda: [c for c in dom.all_inner(browser, "dp-explorable", "canvas") if c.size["width"]],
        60,
        "the explorable plots",
    )
    assert len(canvases) >= 2, canvases  # the scree values and the score map
    hist = result.score_map.histogram()
    mx, my = hist.bins
    pooled = np.asarray(hist.counts)[:, : mx * my].sum(axis=0)
    shown = {f"{v:.1f}" for v in pooled}

    def hovered_count() -> str:
        # in view, a move onto the plot, then to its middle: the hover follows a moving mouse
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", canvases[-1])
        actions = ActionChains(browser).move_to_element_with_offset(canvases[-1], 20, 20)
        actions.pause(0.2).move_to_element(canvases[-1]).pause(0.5).perform()
        text = dom.deep_text(browser, "[class*='tooltip']")
        found = re.search(r"noisy count\s*:?\s*(-?[\d.]+)", text)
        return found.group(1) if found else ""

    count = dom.wait_for(hovered_count, 30, "the score map's hover")
    assert count in shown, (count, sorted(shown)[:10])
    ActionChains(browser).move_to_element(canvases[0]).perform()  # the scree: no crash
    assert console_errors(browser) == []


def _table(path) -> str:
    """A Parquet table in mixed units with a text column (seeded: test data only)."""
    import pandas as pd

    rng = np.random.default_rng(5)  # test data only
    n = 20000
    pd.DataFrame(
        {
            "age": rng.integers(18, 90, n).astype(float),
            "income": rng.lognormal(10, 1, n),
            "hours": np.where(rng.random(n) < 0.3, 0.0, rng.normal(40, 10, n)),
            "visits": np.where(rng.random(n) < 0.7, 0, rng.poisson(3, n)).astype(float),
            "region": rng.choice(["north", "south", "east", "west"], n),
        }
    ).to_parquet(path)
    return str(path)


def _click_label(driver, cls: str, label: str) -> None:
    """Click the checkbox (or button) of a Panel choice widget whose text is ``label``."""
    done = driver.execute_script(
        dom._BOOT + "const h = window.__dpFind(document, arguments[0]);"
        "const root = h.shadowRoot || h;"
        "function all(r){let out=[...r.querySelectorAll('label, button')];"
        "for(const e of r.querySelectorAll('*'))"
        "{if(e.shadowRoot) out=out.concat(all(e.shadowRoot));}return out;}"
        "const hit = all(root).find(e => e.textContent.trim() === arguments[1]);"
        "if (!hit) return false;"
        "(hit.querySelector('input') || hit).click(); return true;",
        cls,
        label,
    )
    assert done, (cls, label)


def _a_table_with_a_text_column(browser, folder, ledger, shots) -> None:
    """A Parquet table with a text column opens: its numeric columns picked, groups from
    its text column; an empty number field disables Release with a reason; a grouped,
    robustly scaled release shows the loadings by column name and the released scale.
    """
    table = _table(folder / "people.parquet")
    dom.set_value(browser, "dp-store", table)
    dom.click(browser, "dp-open")
    dom.wait_for(lambda: "d = 4" in dom.text(browser, "dp-store-info"), 30, "the table")
    info = dom.text(browser, "dp-store-info")
    assert "region (string)" in info and "age, income, hours, visits" in info, info
    assert dom.text(browser, "dp-error") == ""
    _click_label(browser, "dp-columns", "visits")  # the picker: three features
    dom.wait_for(lambda: "d = 3" in dom.text(browser, "dp-store-info"), 30, "d = 3")
    _click_label(browser, "dp-columns", "visits")
    dom.wait_for(lambda: "d = 4" in dom.text(browser, "dp-store-info"), 30, "d = 4")
    dom.set_value(browser, "dp-group-column", "region")
    dom.wait_for(
        lambda: "PUBLIC labels" in dom.text(browser, "dp-release-why"), 20, "the domain asked"
    )
    dom.set_value(browser, "dp-group-domain", "north,south,east")
    dom.set_value(browser, "dp-epsilon", "")  # an empty field: refused in the widget
    dom.wait_for(
        lambda: "Release disabled: epsilon" in dom.text(browser, "dp-release-why"),
        20,
        "the reason",
    )
    assert dom.inner(browser, "dp-release", "button").get_attribute("disabled") is not None
    dom.set_value(browser, "dp-epsilon", 1.0)
    dom.wait_for(lambda: "fits what remains" in dom.text(browser, "dp-cost"), 20, "the cost")
    _click_label(browser, "dp-scale", "robust")
    dom.wait_for(lambda: "scale=" in dom.text(browser, "dp-cost"), 20, "the scale share")
    before = _ledger(ledger)
    dom.release_and_wait(browser, "the table's release")
    assert dom.text(browser, "dp-error") == ""
    assert _ledger(ledger)["remaining"]["1"] < before["remaining"]["1"]
    directions = dom.wait_for(lambda: dom.text(browser, "dp-directions"), 30, "the loadings")
    assert all(name in directions for name in ("age", "income", "hours", "visits"))
    assert "centre" in dom.text(browser, "dp-table")  # the released centre and scale
    assert "2 analyses" in dom.text(browser, "dp-remaining")  # one press, one analysis
    assert "groups region, scaled" in dom.text(browser, "dp-past")
    dom.wait_for(
        lambda: dom.inner(browser, "dp-release", "button").get_attribute("disabled") is None,
        20,
        "Release enabled again",
    )
    assert console_errors(browser) == []
    if shots is not None:
        browser.set_window_size(1280, 2400)
        (shots / "app-table.png").write_bytes(browser.get_screenshot_as_png())
        browser.execute_script("arguments[0].scrollIntoView();", dom.host(browser, "dp-directions"))
        (shots / "app-loadings.png").write_bytes(browser.get_screenshot_as_png())
        browser.set_window_size(1280, 1000)


def _kind(part: dict) -> str:
    if "mu" in part:
        return "gaussian"
    return "approximate" if "delta" in part else "pure"


def test_app_errors_are_one_line(tmp_path, capsys):
    from dask_dppca.cli import EXIT_USAGE, main

    assert main(["app", "--ledger", str(tmp_path / "missing.ledger")]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert "budget create" in err and len(err.splitlines()) == 1
    assert main(["app", "--port", "70000"]) == EXIT_USAGE
    assert "--port" in capsys.readouterr().err
