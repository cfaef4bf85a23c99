"""The scale stage: private robust scaling first, under the analysis's one budget.

On a table in its own units (age, income, hours) the unscaled private directions follow
income and a notice says so; ``scale="robust"`` releases a centre and a scale per column
first, every later stage reads ``(x - centre) / scale`` (the directions are exactly a
fit of the scaled rows), the directions land near PCA of the standardised table, and the
stage is charged to every budget in the one transaction.  A stage that draws without
claiming its reservation is refused; a quantile stage whose accuracy bound is useless
is refused before anything is reserved.  ``dask-dppca analyze --scale robust`` on a CSV
table runs as typed on the embedded cluster.  Seeds make TEST DATA and seed the noise of
the in-process tests only (NOT private).
"""

from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.analysis.stages.score_map import PrivateScoreMapStage
from dask_dppca.privacy.budget.ledger_rows import LedgerError
from dask_dppca.privacy.mechanisms.scale import LEVELS
from dask_dppca.privacy.notices import UNITS_NOTICE
from tests.cli import CONSOLE_SCRIPT

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


def mixed_units(n: int, seed: int = 0) -> np.ndarray:
    """Age in years, income in dollars (rising with age), hours a week: test data."""
    rng = np.random.default_rng(seed)
    age = rng.normal(40.0, 12.0, n)
    income = 50_000.0 + 1_200.0 * (age - 40.0) + rng.normal(0.0, 15_000.0, n)
    hours = 40.0 + 0.4 * (age - 40.0) + rng.normal(0.0, 10.0, n)
    return np.column_stack([age, income, hours])


def _standardised_pca(x: np.ndarray, k: int) -> np.ndarray:
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    return np.linalg.eigh(np.cov(z, rowvar=False))[1][:, ::-1][:, :k].T


@pytest.fixture(scope="module")
def table():
    return mixed_units(20_000)


def _analyze(x, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dd.analyze(
            x, 2, epsilon=2.0, delta=1e-9, scheduler="threads", random_state=3, **kwargs
        )


@pytest.fixture(scope="module")
def scaled(table):
    return _analyze(table, scale="robust")


def test_unscaled_directions_follow_income_and_a_notice_says_so(table):
    plain = _analyze(table, score_map=False)
    assert abs(plain.directions[0, 1]) > 0.999
    assert dd.sin_theta(plain.directions.T, _standardised_pca(table, 2).T) > 0.8
    assert any(n.startswith(UNITS_NOTICE) and "'x1'" in n for n in plain.notices)
    assert plain.meta["scaling"] == "none" and "scale" not in plain.stages


def test_scaled_directions_are_near_standardised_pca(table, scaled):
    assert dd.sin_theta(scaled.directions.T, _standardised_pca(table, 2).T) < 0.15
    assert not any(n.startswith(UNITS_NOTICE) for n in scaled.notices)
    assert scaled.meta["scaling"] == "robust"


def test_the_released_centre_and_scale_are_each_column_s_median_and_iqr(table, scaled):
    released = scaled.stages["scale"]
    assert released["rule"] == ["q75-q25"] * 3 and released["private"] is False
    median = np.median(table, axis=0)
    iqr = np.subtract(*np.quantile(table, [0.75, 0.25], axis=0))
    assert np.allclose(released["centre"], median, rtol=0.05)
    assert np.allclose(released["scale"], iqr, rtol=0.15)
    assert list(scaled.stages) == ["scale"]  # released first, kept as a further stage
    (row,) = [r for r in scaled.privacy if r["stage"] == "scale"]
    assert row["count"] == len(LEVELS) * 3 and row["guarantee"] == "epsilon-DP"
    assert set(row["rank_error_95"]) == {f"q{round(q * 100)}" for q in LEVELS}


def test_every_later_stage_reads_the_scaled_rows(table, scaled):
    """The directions are exactly a fit of (x - centre) / scale at the stage's budget and
    seed: the analysis read the released scaling inside its block reads."""
    released = scaled.stages["scale"]
    rows = (table - np.asarray(released["centre"])) / np.asarray(released["scale"])
    (row,) = [r for r in scaled.privacy if r["stage"] == "directions"]
    fit = dd.DPPCA(
        2, epsilon=row["epsilon"], delta=row["delta"], scheduler="threads", random_state=3
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit.fit(rows)
    assert np.allclose(fit.components_, scaled.directions, rtol=1e-10, atol=1e-12)
    loadings = scaled.original_loadings()
    assert np.allclose(np.linalg.norm(loadings, axis=1), 1.0)
    assert abs(loadings[0, 1]) < 1e-3  # per dollar, income weighs little in the raw units


def test_the_scale_stage_is_charged_in_the_transaction_and_round_trips(table, tmp_path):
    ledger = tmp_path / "l.ledger"
    dd.PrivacyBudget(20.0, 1e-4, ledger=ledger, create=True)
    with dd.PrivacyBudget.open(ledger):
        result = _analyze(table[:4000], scale="robust", score_map=False)
    states = {
        row.fit_id.rsplit(".", 1)[1]: row.state
        for row in dd.PrivacyBudget.open(ledger)._ledger.rows()
    }
    assert states == {"scale": "committed", "directions": "committed", "scree": "committed"}
    path = tmp_path / "a.json"
    result.save(path)
    loaded = PrivateAnalysis.load(path)
    assert loaded.stages["scale"] == result.stages["scale"]
    assert np.array_equal(loaded.original_loadings(), result.original_loadings())
    html = loaded.to_html()
    assert "scale quantiles" in html and "q75-q25" in html
    assert "id='loadings-original'" in html and "Private scale" in html


def test_parameters_are_refused_by_name(table):
    with pytest.raises(ValueError, match="scale: expected one of"):
        _analyze(table, scale="standard")


def test_a_stage_drawing_without_its_claim_is_refused_and_nothing_is_drawn(table, tmp_path):
    from dask_dppca.compute.trusted.release import release_statistic
    from dask_dppca.graph.score_stats import quantile_counts_graph
    from dask_dppca.privacy.mechanisms.median import CoordinateMedian

    drawn = []

    class Unclaimed:
        """A stage of one's own that forgets claim_stage_parts around its release."""

        name = "score_map"

        def planned_parts(self, k, d):
            return PrivateScoreMapStage(None, None).planned_parts(k, d)

        def run(self, context):
            mechanism = CoordinateMedian(context.n_samples, context.n_features, 1.0)

            def release(exact):
                drawn.append(True)
                return exact

            return release_statistic(
                context.target,
                release,
                quantile_counts_graph(context.pass_blocks(), mechanism.candidates),
                "unclaimed",
                charge=mechanism,
                stage_id=context.stage_id,
            )

    ledger = tmp_path / "l.ledger"
    dd.PrivacyBudget(20.0, 1e-4, ledger=ledger, create=True)
    with dd.PrivacyBudget.open(ledger), pytest.raises(LedgerError, match="never claimed"):
        _analyze(table[:3000], score_map=Unclaimed())
    assert drawn == []
    rows = dd.PrivacyBudget.open(ledger)._ledger.rows()
    states = {row.fit_id.rsplit(".", 1)[1]: (row.state, row.stage) for row in rows}
    assert states["score_map"] == ("cancelled", "reserved")  # never dispatched, never drawn


def test_a_useless_quantile_stage_is_refused_before_anything_is_reserved(tmp_path):
    x = np.random.default_rng(5).standard_normal((300, 4))  # test data
    ledger = tmp_path / "l.ledger"
    dd.PrivacyBudget(20.0, 1e-4, ledger=ledger, create=True)
    for asked in ({"stages": ["median"]}, {"scale": "robust"}):
        with dd.PrivacyBudget.open(ledger), pytest.raises(ValueError, match="^epsilon: at n = 300"):
            dd.analyze(x, 2, epsilon=1.0, scheduler="threads", **asked)
    assert dd.PrivacyBudget.open(ledger)._ledger.rows() == []


@pytest.mark.cluster
def test_analyze_scale_robust_on_a_csv_table_as_typed(tmp_path):
    x = mixed_units(6000, seed=1)
    header = "age,income,hours"
    np.savetxt(tmp_path / "people.csv", x, delimiter=",", header=header, comments="", fmt="%.6f")
    planned = subprocess.run(
        f"{CONSOLE_SCRIPT} plan people.csv --analysis -k 2 --scale robust".split(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert planned.returncode == 0, planned.stderr
    assert "scale: each quantile within" in planned.stdout
    assert planned.stdout.index("scale ") < planned.stdout.index("directions ")
    done = subprocess.run(
        f"{CONSOLE_SCRIPT} analyze people.csv -k 2 --scale robust --output result.json".split(),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("scale") < out.index("wrote")  # the split shows it before any read
    assert "income: centre" in out
    result = PrivateAnalysis.load(tmp_path / "result.json")
    assert result.stages["scale"]["private"] is True
    assert dd.sin_theta(result.directions.T, _standardised_pca(x, 2).T) < 0.5


@pytest.mark.slow
def test_the_app_offers_the_scale_and_shows_the_released_centre_and_scale(tmp_path):
    pytest.importorskip("panel")
    import zarr

    from dask_dppca.app.page import AppPage

    x = mixed_units(20_000, seed=4)  # n at which the quartiles are located (the plan's bound)
    zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=x.shape, chunks=(5000, 3))[:] = x
    page = AppPage(store=str(tmp_path / "x.zarr"), scheduler="synchronous", epsilon=10.0)
    assert page.scale.value == "none"  # off until chosen, its share ready beside it
    assert "scale=" not in page.cost.object
    page.scale.value = "robust"
    assert "scale=" in page.cost.object  # priced now, in the split the release makes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = page._run_release()
    assert result.stages["scale"]["rule"] == ["q75-q25"] * 3
    page._show(result)
    assert "Private scale" in page.table.object and "centre" in page.table.object


def test_the_plan_plans_the_scale_first_and_states_its_accuracy(table):
    plan = dd.plan_analysis(table, 2, epsilon=2.0, delta=1e-9, scale="robust")
    assert [s.stage for s in plan.stages][:2] == ["scale", "directions"]
    assert plan.parameters["stages"][0] == "scale"
    stated = plan.accuracy["scale"]
    assert stated["useless"] == [] and 0 < max(stated["rank_error_95"].values()) < 2000
    assert "scale: each quantile within" in str(plan)
    small = dd.plan_analysis(np.ones((300, 4)), 2, epsilon=1.0, scale="robust")
    assert small.accuracy["scale"]["useless"] and "USELESS" in str(small)


@pytest.mark.cluster
def test_the_default_path_scales_rows_kept_on_the_embedded_cluster():
    """Rows in memory, the default compute target: the rows are kept on the workers
    unscaled and every later pass reads them through the released scaling."""
    x = mixed_units(20_000, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dd.analyze(x, 2, epsilon=2.0, delta=1e-9, scale="robust", score_map=False)
    assert result.stages["scale"]["rule"] == ["q75-q25"] * 3
    assert result.stages["scale"]["private"] is True
    assert dd.sin_theta(result.directions.T, _standardised_pca(x, 2).T) < 0.3
