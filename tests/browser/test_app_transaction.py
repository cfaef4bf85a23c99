"""The app's releases are transactions: concurrent pages with room for two release exactly
two and charge the others nothing; one budget a process without a ledger; no secret in any
file the app writes.  Small data on the synchronous scheduler; seeds make TEST DATA only.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter

import numpy as np
import pytest
import zarr

pn = pytest.importorskip("panel")

import dask_dppca as dd  # noqa: E402
from dask_dppca import app as app_module  # noqa: E402
from dask_dppca.app import build_app, process_budget  # noqa: E402
from dask_dppca.app.page import AppPage  # noqa: E402
from dask_dppca.app.releases import releases_folder  # noqa: E402
from dask_dppca.privacy.mechanisms.accounting import compose  # noqa: E402
from dask_dppca.privacy.mechanisms.parts import GaussianPart  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def store(tmp_path) -> str:
    path = str(tmp_path / "x.zarr")
    rng = np.random.default_rng(4)  # test data only
    zarr.save_array(path, rng.standard_normal((500, 4)) * np.array([3.0, 2.0, 1.0, 0.5]))
    return path


def _page(ledger, store) -> AppPage:
    page = AppPage(ledger=str(ledger), store=store, scheduler="synchronous")
    page._open()
    assert page.records_meta is not None, page.error.object
    return page


def _release(page: AppPage):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return page._run_release()


def _parts(ledger) -> list:
    return [
        p
        for row in dd.PrivacyBudget.open(ledger).spent
        for p in (list(row.parts) or [GaussianPart(row.mu)])
    ]


def test_five_pages_releasing_at_once_with_room_for_two_release_two(tmp_path, store):
    probe = tmp_path / "probe.ledger"
    dd.PrivacyBudget(50.0, 1e-4, ledger=probe, create=True)
    _release(_page(probe, store))
    one = _parts(probe)
    two, three = (compose(one * m).epsilon(1e-4) for m in (2, 3))
    ledger = tmp_path / "study.ledger"
    dd.PrivacyBudget((two + three) / 2, 1e-4, ledger=ledger, create=True)
    pages = [_page(ledger, store) for _ in range(5)]
    outcomes: list[str] = []
    start = threading.Barrier(5)

    def press(page: AppPage) -> None:
        start.wait(timeout=60)
        try:
            result = _release(page)
            page.releases.add(result)
            outcomes.append("released")
        except dd.BudgetExceededError:
            outcomes.append("refused")

    threads = [threading.Thread(target=press, args=(page,)) for page in pages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert Counter(outcomes) == {"released": 2, "refused": 3}
    rows = dd.PrivacyBudget.open(ledger)._ledger.rows()
    assert {row.state for row in rows} == {"committed"}
    assert len({row.fit_id.rsplit(".", 1)[0] for row in rows}) == 2
    # each saved release names its own rows, not another page's
    saved = [pages[0].releases.load(key) for key in pages[0].releases.keys()]
    assert len(saved) == 2
    for result in saved:
        ids = {row.id for row in rows if row.fit_id.startswith(result.meta["analysis_id"])}
        assert set(result.meta["app"]["ledger_rows"]) == ids and len(ids) == 3


def test_no_file_the_app_writes_holds_a_secret_of_the_store_url(tmp_path, store, monkeypatch):
    from dask_dppca.analysis import run as analysis

    ledger = tmp_path / "study.ledger"
    dd.PrivacyBudget(10.0, 1e-4, ledger=ledger, create=True)
    page = _page(ledger, store)
    real = analysis.analyze

    def reading_the_local_copy(X, *args, **kwargs):  # the URL's secret stays in the widget
        return real(store, *args, **kwargs)

    monkeypatch.setattr(analysis, "analyze", reading_the_local_copy)
    local = page._open_input()  # the records opened from the local copy, too
    monkeypatch.setattr(page, "_open_input", lambda: local)
    page.store.value = "s3://bucket/x.zarr?token=SECRET123"
    result = _release(page)
    page.releases.add(result)
    written = list((tmp_path).rglob("*"))
    assert any(p.suffix == ".json" for p in written)
    for path in written:
        if path.is_file() and "x.zarr" not in path.parts:
            assert b"SECRET123" not in path.read_bytes(), path
    assert result.meta["app"]["store"] == "s3://bucket/x.zarr?token=***"
    assert releases_folder(str(ledger)) in {str(p.parent) for p in written}


def test_an_app_without_a_ledger_keeps_one_budget_for_the_process(monkeypatch):
    monkeypatch.setattr(app_module, "_PROCESS_BUDGET", [])
    build_app()
    budget = process_budget(3.0, 1e-5)
    from dask_dppca.privacy.budget.privacy_budget import GaussianCharge

    budget.spend(GaussianCharge(1.0, 2.0), label="page 1")
    build_app()  # a notebook cell run again
    assert process_budget(3.0, 1e-5) is budget and budget.releases == 1
    with pytest.raises(ValueError, match="epsilon, delta: this process's app budget"):
        build_app(epsilon=1.0)
