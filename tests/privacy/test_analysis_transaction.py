"""An analysis is one transaction: every part charged wherever a budget is named, all
reserved together, the stages never started given back.

Small data on the synchronous scheduler (the admission is the ledger's, whatever the
scheduler); one cell runs the CLI as typed (its default embedded cluster).  Seeds make
TEST DATA only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.analysis.stages.score_map import PrivateScoreMapStage
from dask_dppca.compute.budget_config import LEDGER_KEY, REQUIRED_KEY
from dask_dppca.compute.trusted.site_ledger import RELEASE_LEDGER_KEY
from dask_dppca.privacy.budget.charging import BudgetRequiredError
from dask_dppca.privacy.budget.privacy_budget import BudgetExceededError
from dask_dppca.privacy.mechanisms.accounting import compose
from dask_dppca.privacy.mechanisms.parts import GaussianPart, part_from_dict

pytestmark = pytest.mark.timeout(300)

TOTAL = (1.0, 1e-5)


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(5)  # test data only
    return rng.standard_normal((600, 4)) * np.array([3.0, 2.0, 1.0, 0.5])


def _analyze(data: np.ndarray, **kwargs) -> dd.PrivateAnalysis:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-n advice
        return dd.analyze(
            data,
            n_components=2,
            epsilon=TOTAL[0],
            delta=TOTAL[1],
            scheduler=kwargs.pop("scheduler", "synchronous"),
            **kwargs,
        )


def _charged(path: Path, analysis: dd.PrivateAnalysis | None = None) -> list:
    """Every part counted in the ledger at ``path`` (Gaussian rows as their mu)."""
    parts = []
    for row in dd.PrivacyBudget.open(path).spent:
        parts += list(row.parts) or [GaussianPart(row.mu)]
    return parts


def _planned(result: dd.PrivateAnalysis) -> list:
    return [part_from_dict(p) for p in result.meta["parts"]]


def _assert_every_part(path: Path, result: dd.PrivateAnalysis) -> None:
    """The ledger counts the analysis's every part: as many, of the same kinds, and a
    composition no smaller than the analysis's own (the directions' mu is its fit's)."""
    charged, planned = _charged(path), _planned(result)
    kinds = Counter(type(p).__name__ for p in charged)
    assert kinds == Counter(type(p).__name__ for p in planned), (kinds, len(planned))
    assert compose(charged).epsilon(TOTAL[1]) >= compose(planned).epsilon(TOTAL[1]) * (1 - 1e-6)


def _ledger(tmp_path: Path, name: str = "study.ledger", epsilon: float = 10.0) -> Path:
    path = tmp_path / name
    dd.PrivacyBudget(epsilon, 1e-4, ledger=path, create=True)
    return path


# -- item 5: every way of naming a budget is charged for every stage --------------------


def test_a_with_block_is_charged_every_part(data, tmp_path):
    path = _ledger(tmp_path)
    with dd.PrivacyBudget.open(path):
        result = _analyze(data)
    _assert_every_part(path, result)


def test_the_default_budget_is_charged_every_part(data, tmp_path):
    path = _ledger(tmp_path)
    dd.set_default_budget(path)
    try:
        result = _analyze(data)
    finally:
        dd.set_default_budget(None)
    _assert_every_part(path, result)


def test_the_dask_configuration_key_is_charged_every_part(data, tmp_path):
    path = _ledger(tmp_path)
    with dask.config.set({LEDGER_KEY: str(path)}):
        result = _analyze(data)
    _assert_every_part(path, result)


def test_the_environment_variable_is_charged_every_part(data, tmp_path, monkeypatch):
    path = _ledger(tmp_path)
    monkeypatch.setenv("DASK_DASK_DPPCA__LEDGER", str(path))
    result = _analyze(data)
    _assert_every_part(path, result)


def test_the_release_site_ledger_is_charged_every_part(data, tmp_path):
    path = _ledger(tmp_path)
    with dask.config.set({RELEASE_LEDGER_KEY: str(path)}):
        result = _analyze(data)
    _assert_every_part(path, result)


def test_the_required_flag_refuses_an_analysis_with_no_budget_before_anything(data, tmp_path):
    with dask.config.set({REQUIRED_KEY: True}), pytest.raises(BudgetRequiredError):
        _analyze(data)
    path = _ledger(tmp_path)
    with dask.config.set({REQUIRED_KEY: True}), dd.PrivacyBudget.open(path):
        result = _analyze(data)
    _assert_every_part(path, result)


@pytest.mark.cluster
def test_the_cli_budget_flag_as_typed_is_charged_every_part(data, tmp_path):
    store = tmp_path / "records.zarr"
    zarr.save_array(str(store), data)
    path = _ledger(tmp_path)
    out = tmp_path / "analysis.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_DASK_DPPCA")}
    run = subprocess.run(
        [
            *(sys.executable, "-m", "dask_dppca"),
            *("analyze", str(store), "--budget", str(path), "--output", str(out)),
            *("-k", "2", "--epsilon", "1", "--delta", "1e-5"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = dd.PrivateAnalysis.load(out)
    _assert_every_part(path, result)
    rows = dd.PrivacyBudget.open(path).spent
    assert {row.fit_id.rsplit(".", 1)[0] for row in rows} == {result.meta["analysis_id"]}


# -- item 1: reserved together, admitted whole or refused whole ------------------------


def _room_for_two(data: np.ndarray, tmp_path: Path) -> Path:
    """A ledger whose total admits exactly two of these analyses (found from one probe)."""
    probe = _ledger(tmp_path, "probe.ledger", epsilon=50.0)
    with dd.PrivacyBudget.open(probe):
        _analyze(data)
    one = _charged(probe)
    two, three = (compose(one * m).epsilon(1e-4) for m in (2, 3))
    return _ledger(tmp_path, "two.ledger", epsilon=(two + three) / 2)


@pytest.mark.cluster
def test_concurrent_analyses_with_room_for_two_two_finish_and_the_rest_charge_nothing(
    data, tmp_path, cluster_client
):
    """Four at once, each way a user runs one: the CLI as typed (its embedded cluster),
    the API on the embedded default, and two on a real cluster of worker processes."""
    path = _room_for_two(data, tmp_path)
    store = tmp_path / "records.zarr"
    zarr.save_array(str(store), data)
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def api(scheduler) -> None:
        start.wait(timeout=60)
        try:
            with dd.PrivacyBudget.open(path):
                _analyze(data, scheduler=scheduler)
            outcomes.append("done")
        except BudgetExceededError:
            outcomes.append("refused")

    def cli() -> None:
        start.wait(timeout=60)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_DASK_DPPCA")}
        run = subprocess.run(
            [
                *(sys.executable, "-m", "dask_dppca"),
                *("analyze", str(store), "--budget", str(path)),
                *("--output", str(tmp_path / "cli.json")),
                *("-k", "2", "--epsilon", str(TOTAL[0]), "--delta", str(TOTAL[1])),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        refused = run.returncode != 0 and "nothing was reserved" in run.stderr
        refused = refused and run.stderr.startswith("dask-dppca: error: BudgetExceededError: needs")
        outcomes.append("done" if run.returncode == 0 else "refused" if refused else run.stderr)

    threads = [
        threading.Thread(target=cli),
        threading.Thread(target=api, args=(None,)),
        *(threading.Thread(target=api, args=(cluster_client,)) for _ in range(2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert sorted(outcomes) == ["done", "done", "refused", "refused"]
    rows = dd.PrivacyBudget.open(path)._ledger.rows()
    by_state = Counter(row.state for row in rows)
    analyses = {row.fit_id.rsplit(".", 1)[0] for row in rows}
    assert len(analyses) == 2  # the refused ones left no row at all
    assert by_state == {"committed": len(rows)}


def test_a_stage_never_started_is_given_back_and_a_started_one_stays(data, tmp_path):
    class Broken:
        """A score map stage that fails before it reads anything."""

        name = "score_map"

        def planned_parts(self, k, d):
            return PrivateScoreMapStage(None, None).planned_parts(k, d)

        def run(self, context):
            raise RuntimeError("the stage broke before its release")

    path = _ledger(tmp_path)
    with dd.PrivacyBudget.open(path), pytest.raises(RuntimeError, match="broke"):
        _analyze(data, score_map=Broken())
    rows = dd.PrivacyBudget.open(path)._ledger.rows()
    states = {row.fit_id.rsplit(".", 1)[1]: row.state for row in rows}
    assert states == {"directions": "committed", "scree": "committed", "score_map": "cancelled"}
    dispatched = {row.fit_id.rsplit(".", 1)[1]: row.stage for row in rows}
    assert dispatched["directions"] == dispatched["scree"] == "dispatched"
    assert dispatched["score_map"] == "reserved"


def test_a_stage_that_fails_before_its_dispatch_is_given_back(data, tmp_path, monkeypatch):
    from dask_dppca.analysis.stages import scree

    def broken(*args, **kwargs):
        raise RuntimeError("the scree graph failed before any release")

    monkeypatch.setattr(scree, "scree_histogram_graph", broken)
    path = _ledger(tmp_path)
    with dd.PrivacyBudget.open(path), pytest.raises(RuntimeError, match="scree graph"):
        _analyze(data)
    states = {
        row.fit_id.rsplit(".", 1)[1]: row.state
        for row in dd.PrivacyBudget.open(path)._ledger.rows()
    }
    assert states == {"directions": "committed", "scree": "cancelled", "score_map": "cancelled"}


def test_reserve_together_is_all_or_nothing(tmp_path):
    budget = dd.PrivacyBudget(1.0, 1e-5, ledger=tmp_path / "l.ledger", create=True)
    small, large = GaussianPart(0.1), GaussianPart(5.0)
    from dask_dppca.privacy.budget.privacy_budget import PartsCharge

    with pytest.raises(BudgetExceededError, match=r"^needs epsilon=") as refused:
        budget.reserve_together(
            [("a.x", PartsCharge((small,)), "x"), ("a.y", PartsCharge((large,)), "y")]
        )
    assert "nothing was reserved" in str(refused.value)
    assert budget._ledger.rows() == []
    done = budget.reserve_together([("b.x", PartsCharge((small,)), "x")])
    assert [r.release.stage for r in done] == ["reserved"]


def test_the_ledger_shows_an_analysis_as_one_line_with_its_stages(data, tmp_path):
    path = _ledger(tmp_path)
    with dd.PrivacyBudget.open(path):
        first, second = _analyze(data), _analyze(data)
    text = dd.PrivacyBudget.open(path).describe()
    assert "6 counted (6 committed, 0 reserved), 0 cancelled; 2 analyses (6 of them)" in text
    table = text.split("\n\n", 1)[1].splitlines()
    assert len(table) == 3  # the header and one line per analysis
    for line, result in zip(table[1:], (first, second)):
        assert f"analysis {result.meta['analysis_id']}: directions, scree, score map" in line
    assert "stated at the ledger's delta" in text
