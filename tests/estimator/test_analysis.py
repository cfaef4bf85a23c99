"""dask_dppca.analyze: one budget for directions and scree, the result object, its plots.

Small data on the synchronous scheduler (fast); seeds make TEST DATA only, and the one
run with ``random_state`` says NOT PRIVATE.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

import dask_dppca as dd
from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.privacy.mechanisms.parts import GaussianPart, PureDPPart

SPECTRUM = np.array([16.0, 4.0, 1.0, 1.0, 1.0])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)  # test data only
    return rng.standard_normal((4000, 5)) * np.sqrt(SPECTRUM)


@pytest.fixture(scope="module")
def ledger_run(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("analysis") / "study.ledger"
    budget = dd.PrivacyBudget(3.0, 1e-5, ledger=path, create=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with budget:
            result = dd.analyze(
                data, n_components=2, epsilon=3.0, delta=1e-5, scheduler="synchronous"
            )
    return result, path


def _pld_epsilon(parts, delta):
    out = None
    for p in parts:
        if isinstance(p, GaussianPart):
            one = pld.from_gaussian_mechanism(1 / p.mu, value_discretization_interval=1e-3)
        else:
            assert isinstance(p, PureDPPart)
            one = pld.from_randomized_response(
                2 / (1 + math.exp(p.epsilon)), 2, value_discretization_interval=1e-3
            )
        out = one if out is None else out.compose(one)
    return out.get_epsilon_for_delta(delta)


def test_analysis_releases_directions_and_every_scree_method(ledger_run):
    result, _ = ledger_run
    assert result.directions.shape == (2, 5)
    assert set(result.scree["values"]) == {"clipped", "winsorized", "huber", "robust"}
    for values in result.scree["values"].values():
        assert len(values) == 2
    # the top scree value is near 16 whatever the method (n = 4000, total epsilon 3)
    for name, values in result.scree["values"].items():
        assert 8.0 < values[0] < 32.0, (name, values)
    assert 0.3 < result.scree["pve_total"][0] < 1.0  # over all d: 16 / 23
    assert sum(result.scree["pve_topk"]["clipped"]) == pytest.approx(1.0)
    stages = [row["stage"] for row in result.privacy]
    assert stages[0] == "directions" and stages.count("scree") >= 4


def test_the_ledger_holds_exactly_the_analysis_and_never_more_than_its_total(ledger_run):
    result, path = ledger_run
    budget = dd.PrivacyBudget.open(path)
    parts = []
    for row in budget.spent:
        parts += list(row.parts) or [GaussianPart(row.mu)]
    theirs = _pld_epsilon(parts, 1e-5)  # independent, pessimistic
    assert budget.spent_epsilon <= 3.0
    assert budget.spent_epsilon == pytest.approx(theirs, abs=2e-2)
    assert theirs <= 3.0 + 2e-2
    assert budget.remaining() == pytest.approx(0.0, abs=1e-3)
    assert result.meta["composed_epsilon"] <= 3.0


def test_an_analysis_that_does_not_fit_is_refused_before_anything_is_read(data):
    budget = dd.PrivacyBudget(1.0, 1e-5)
    with budget, pytest.raises(dd.BudgetExceededError):
        dd.analyze(data, n_components=2, epsilon=3.0, delta=1e-5, scheduler="synchronous")
    assert budget.releases == 0


def test_save_load_json_and_plots_cost_nothing(ledger_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    result, path = ledger_run
    spent = dd.PrivacyBudget.open(path).releases
    result.save(tmp_path / "a.json")
    again = PrivateAnalysis.load(tmp_path / "a.json")
    assert np.array_equal(again.directions, result.directions)
    assert again.scree["values"] == json.loads(result.to_json())["scree"]["values"]
    ax = again.plot_scree()
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels and all("(private)" in label for label in labels)
    ax = again.plot_scree(["clipped"], kind="pve_topk", reference=[0.8, 0.2])
    assert "reference: NOT PRIVATE" in [line.get_label() for line in ax.get_lines()]
    assert "Private PCA analysis" in again._repr_html_()
    assert "directions" in again.privacy_table()
    assert dd.PrivacyBudget.open(path).releases == spent


def test_parameters_are_checked_with_their_names(data):
    with pytest.raises(ValueError, match="methods"):
        dd.analyze(data, methods=("median",), scheduler="synchronous")
    with pytest.raises(ValueError, match="shares"):
        dd.analyze(data, split={"directions": 1.0}, scheduler="synchronous")
    with pytest.raises(ValueError, match="epsilon"):
        dd.analyze(data, epsilon=-1, scheduler="synchronous")


def test_the_fitted_estimator_keeps_working(data):
    est = dd.DPPCA(n_components=2, epsilon=1.0, scheduler="synchronous").fit(data)
    assert est.components_.shape == (2, 5)


class _StubScoreMap:
    """A score-map stage as the score-map mechanisms will plug in: its own parts."""

    name = "score_map"

    def planned_parts(self, n_components, n_features):
        from dask_dppca.privacy.mechanisms.accounting import PlannedPart

        return [PlannedPart("score_map", "histogram", "gaussian")]

    def run(self, context):
        from dask_dppca.analysis.stage import StageOutput

        part = context.split.part("score_map", "histogram")
        assert context.released_directions.shape[0] == 2 and context.blocks is not None
        row = {"stage": "score_map", "release": "histogram", "guarantee": "mu-GDP", "mu": part.mu}
        return StageOutput({"bins": [1, 2]}, [row])


def test_a_score_map_stage_plugs_in_with_its_own_parts(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dd.analyze(
            data,
            n_components=2,
            methods=("clipped",),
            score_map=_StubScoreMap(),
            scheduler="synchronous",
        )
    assert result.score_map == {"bins": [1, 2]}
    assert result.meta["shares"] == pytest.approx(
        {"directions": 0.5, "scree": 0.25, "score_map": 0.25}
    )
    assert result.privacy[-1]["stage"] == "score_map"
    assert result.meta["composed_epsilon"] <= 3.0


def test_the_scree_design_follows_a_regular_kendall_design_and_dask_chunks(data):
    import dask.array as da

    from dask_dppca.design import plan_blocks
    from dask_dppca.kernel.scree_stats import scree_design

    design = dd.RegularDesign(k=2, block_size=700)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dd.analyze(
            da.from_array(data, chunks=(900, 5)),
            n_components=2,
            methods=("clipped",),
            design=design,
            scheduler="synchronous",
        )
    _, plan = plan_blocks(4000, 5, (900,) * 4 + (400,), design, 1)
    assert result.scree["design"] == dict(
        zip(("n_pairs", "max_degree"), scree_design(plan.block_sizes, plan.block_pairs))
    )
    assert 8.0 < result.scree["values"]["clipped"][0] < 32.0
