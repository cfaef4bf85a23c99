"""The median stage, added through the stage contract alone (analysis/stages/median.py,
its registry entry, privacy/mechanisms/median.py; the counts pass reuses graph/score_stats.py).

It is off by default (a default analysis's record is unchanged), joins the split and the
one transaction when asked for, is charged to every active budget, and shows in the
result, its record, the CLI (``--median``, as typed, on the embedded cluster), the
report and the app's page through the registry.  Seeds make TEST DATA and seed the
noise of the in-process tests only (NOT private).
"""

from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.analysis.stages import REGISTRY, default_shares, optional_stages
from tests.cli import CONSOLE_SCRIPT, write_store

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)  # test data
    return rng.standard_t(3, size=(4000, 4)) * [1.0, 2.0, 5.0, 0.5] + [10.0, -3.0, 0.0, 100.0]


def _analyze(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dd.analyze(data, 2, epsilon=4.0, scheduler="synchronous", random_state=1, **kwargs)


def test_the_median_is_released_near_each_column_s_median_and_composed_in(data):
    result = _analyze(data, stages=["median"], score_map=False)
    medians = np.asarray(result.stages["median"]["values"])
    assert medians.shape == (4,)
    # Each released value is a grid value next to a rank near n / 2: the grid is 2.2 %
    # fine in magnitude (docs/privacy.md), so a column far from 0 is resolved to 2.2 %.
    step = 2 ** (1 / 32)
    low, high = np.quantile(data, 0.45, axis=0), np.quantile(data, 0.55, axis=0)
    below = np.minimum(low / step, low * step)
    above = np.maximum(high * step, high / step)
    assert np.all((below <= medians) & (medians <= above)), (medians, low, high)
    rows = [row for row in result.privacy if row["stage"] == "median"]
    assert len(rows) == 1 and rows[0]["count"] == 4 and rows[0]["guarantee"] == "epsilon-DP"
    shares = default_shares(["directions", "scree", "median"])
    total = sum(shares.values())
    assert result.meta["shares"] == pytest.approx({k: v / total for k, v in shares.items()})
    assert result.meta["composed_epsilon"] <= 4.0
    parts = [p for p in result.meta["parts"] if p.get("epsilon") and p["kind"] == "pure"]
    assert len(parts) >= 4  # the scree's quantiles and the d medians


def test_a_default_analysis_is_unchanged_and_a_median_record_round_trips(data, tmp_path):
    plain = _analyze(data, score_map=False)
    assert plain.stages == {} and "stages" not in plain.to_dict()
    assert not any(row["stage"] == "median" for row in plain.privacy)
    with_median = _analyze(data, stages=("median",), score_map=False)
    path = tmp_path / "a.json"
    with_median.save(path)
    loaded = PrivateAnalysis.load(path)
    assert loaded.stages == with_median.stages
    assert "median" in loaded.to_html()


def test_the_median_is_charged_to_every_active_budget_in_the_transaction(data, tmp_path):
    ledger = tmp_path / "l.ledger"
    dd.PrivacyBudget(20.0, 1e-4, ledger=ledger, create=True)
    outer = dd.PrivacyBudget(20.0, 1e-4)
    with dd.PrivacyBudget.open(ledger), outer:
        result = _analyze(data, stages=["median"], score_map=False)
    rows = dd.PrivacyBudget.open(ledger)._ledger.rows()
    states = {row.fit_id.rsplit(".", 1)[1]: row.state for row in rows}
    assert states == {"directions": "committed", "scree": "committed", "median": "committed"}
    in_memory = {row.fit_id.rsplit(".", 1)[1]: row for row in outer.spent}
    assert set(in_memory) == {"directions", "scree", "median"}
    medians = [p for p in result_parts(result) if p.__class__.__name__ == "PureDPPart"][-4:]
    assert in_memory["median"].parts == tuple(medians) and len(set(medians)) == 1


def result_parts(result):
    from dask_dppca.privacy.mechanisms.parts import part_from_dict

    return [part_from_dict(p) for p in result.meta["parts"]]


def test_unknown_and_always_running_stages_are_refused_by_name(data):
    with pytest.raises(ValueError, match="stages: no stage 'mean'"):
        _analyze(data, stages=["mean"])
    with pytest.raises(ValueError, match="stages: 'scree' always runs"):
        _analyze(data, stages=["scree"])


def test_the_registry_drives_the_cli_s_flags_and_split_help(capsys):
    from dask_dppca.cli import main

    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = capsys.readouterr().out
    for info in REGISTRY:
        assert f"{info.name}={info.default_share:g}" in " ".join(text.split())
    for info in optional_stages():
        assert f"--{info.name}" in text


@pytest.mark.cluster
def test_analyze_median_as_typed_prints_and_writes_the_median(tmp_path):
    write_store(tmp_path / "x.zarr", n=2000, d=3)
    done = subprocess.run(
        f"{CONSOLE_SCRIPT} analyze x.zarr -k 2 --median --output result.json "
        "--report report.html".split(),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("median") < out.index("wrote")  # the split shows it before any read
    assert "private median:" in out
    result = PrivateAnalysis.load(tmp_path / "result.json")
    values = result.stages["median"]["values"]
    assert len(values) == 3 and all(abs(v) < 0.5 for v in values)  # N(0, 1) columns
    assert result.stages["median"]["private"] is True
    assert "coordinate medians" in (tmp_path / "report.html").read_text()


@pytest.mark.slow
def test_the_app_offers_a_share_per_stage_and_shows_the_median(tmp_path):
    pytest.importorskip("panel")
    from dask_dppca.app.page import AppPage

    store = write_store(tmp_path / "x.zarr", n=1500, d=3)
    page = AppPage(store=store, scheduler="synchronous", epsilon=10.0, delta=1e-4)
    assert list(page.shares) == [info.name for info in REGISTRY]
    assert page.shares["median"].value == 0.0  # optional: off until given a share
    page.shares["median"].value = 0.1
    # the cost line shows the split the release makes: each share of all typed (scale off)
    typed = sum(w.value for name, w in page.shares.items() if name != "scale")
    assert f"median={0.1 / typed:g}" in page.cost.object
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = page._run_release()
    assert len(result.stages["median"]["values"]) == 3
    page._show(result)
    assert "Private median" in page.table.object and "coordinate medians" in page.table.object
