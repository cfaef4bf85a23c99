"""Stages as objects: a stage of your own runs through the plan and the analysis with no
edit to either, each old keyword of ``analyze`` and ``plan_analysis`` maps onto the stage
objects with a DeprecationWarning, and the stages run in the order their ``after`` says.
Seeds: TEST noise only (NOT private)."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.options import MOVED, Compute, chosen_stages
from dask_dppca.analysis.stage import (
    StageBase,
    StageContext,
    StageOutput,
    claim_stage_parts,
    ordered,
)
from dask_dppca.analysis.stages import default_stages
from dask_dppca.planning.machine import DEFAULT_MODEL
from dask_dppca.privacy.mechanisms.accounting import PlannedPart
from dask_dppca.privacy.mechanisms.laplace import integer_noise, integer_scale
from dask_dppca.privacy.mechanisms.parts import PureDPPart

K, D = 2, 4


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)  # TEST data
    return rng.standard_t(4, size=(1500, D)) * np.array([3.0, 2.0, 1.0, 0.5])


@dataclasses.dataclass
class PositiveCount(StageBase):
    """A toy stage of the test's own: the rows whose first value is positive, one
    discrete Laplace count (sensitivity 1), charged like every stage."""

    random_state: int | None = None
    name: str = "positive_count"
    title = "positive count"
    default_share = 0.2

    def planned_parts(self, n_components, n_features):
        return [PlannedPart(self.name, "count", "pure")]

    def run(self, context: StageContext) -> StageOutput:
        part = context.split.part(self.name, "count")
        assert isinstance(part, PureDPPart)
        s, t = integer_scale(part.epsilon)
        with claim_stage_parts(context, self.name):
            exact = int((context.pass_blocks()[:, 0] > 0).sum().compute())
            noisy = (s * exact + int(integer_noise(self.random_state).draw(t, 1)[0])) / s
        row = {"stage": self.name, "release": "count", "guarantee": "pure", "epsilon": s / t}
        return StageOutput({"count": noisy}, [row])


def test_a_stage_of_your_own_is_planned_run_and_charged_with_no_edit(data):
    mine = PositiveCount()
    plan = dd.plan_analysis(
        data, K, epsilon=2.0, stages=[dd.ScreeStage(), mine], machine=DEFAULT_MODEL
    )
    assert [s.stage for s in plan.stages] == ["directions", "scree", "positive count"]
    assert plan.stage("positive count").passes == 1 and "positive_count" in plan.split_text
    budget = dd.PrivacyBudget(2.0, 1e-5)
    with budget, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded noise; an untrusted thread pool
        result = dd.analyze(
            data, K, epsilon=2.0, stages=[mine, dd.ScreeStage()], random_state=1,
            compute=Compute("synchronous"),
        )  # fmt: skip
    assert abs(result.stages["positive_count"]["count"] - (data[:, 0] > 0).sum()) < 60
    assert result.meta["shares"] == pytest.approx(
        {"directions": 0.5 / 0.95, "scree": 0.25 / 0.95, "positive_count": 0.2 / 0.95}
    )
    # Run in the order given, after the directions it reads (its ``after``).
    assert [row["stage"] for row in result.privacy][1] == "positive_count"
    charged = {row["fit_id"].rsplit(".", 1)[1] for row in budget.as_dict()["releases"]}
    assert charged == {"directions", "scree", "positive_count"}
    assert budget.spent_epsilon == pytest.approx(result.meta["composed_epsilon"], rel=1e-3)
    assert result.score_map is None and mine.random_state is None  # bound on a copy


@pytest.mark.parametrize("old", sorted(MOVED))
def test_each_old_keyword_warns_and_names_its_stage_object(old):
    owner, attribute = MOVED[old]
    values = {"methods": ("clipped",), "mono": True, "score_axes": (1, 0), "bins": (4, 5)}
    values |= {"score_methods": ("sparse",), "group_domain": ("a",), "design": "complete"}
    values |= {"spatial_sign": "winsor", "radius": 2.0, "trusted_worker": "tcp://w:1"}
    value = values.get(old, {"require_trusted": True, "progress": True}.get(old, "x"))
    with pytest.warns(DeprecationWarning, match=rf"analyze\({old}=.*pass .*{attribute}=") as said:
        stages, compute = chosen_stages("analyze", None, None, {old: value})
    assert len(said) == 1
    if owner == "compute":
        assert (stages, compute) == (default_stages(), Compute(**{attribute: value}))
        return
    new = [
        dataclasses.replace(s, **{attribute: value}) if s.name == owner else s
        for s in default_stages()
    ]
    assert (stages, compute) == (new, Compute())


def test_the_old_stage_names_score_map_and_grouped_map_onto_objects(data):
    with pytest.warns(DeprecationWarning, match="MedianStage()"):
        stages, _ = chosen_stages("analyze", ("median",), None, {})
    assert stages == [*default_stages(), dd.MedianStage()]
    with pytest.warns(DeprecationWarning, match="score_map"):
        stages, _ = chosen_stages("analyze", None, None, {"score_map": False})
    assert [s.name for s in stages] == ["directions", "scree"]
    new = dd.plan_analysis(
        data, K, groups=True, stages=[dd.ScreeStage(), dd.ScoreMapStage(group_domain=["a"])],
        machine=DEFAULT_MODEL,
    )  # fmt: skip
    with pytest.warns(DeprecationWarning, match="grouped"):
        old = dd.plan_analysis(data, K, grouped=["a"], machine=DEFAULT_MODEL)
    assert old.split.table() == new.split.table() and old.accuracy == new.accuracy
    assert [s.describe() for s in old.stages] == [s.describe() for s in new.stages]
    assert "groups" in old.accuracy["score_map"]  # the domain given: its advice


def test_an_old_form_analysis_is_the_new_form_one(data):
    old_form = dict(methods=("clipped", "robust"), mono=True, score_methods=("sparse",))
    old_form |= dict(score_axes=(1, 0), scheduler="synchronous")
    new_form = dict(
        stages=[
            dd.ScreeStage(methods=("clipped", "robust"), mono=True),
            dd.ScoreMapStage(axes=(1, 0), methods=("sparse",)),
        ],
        compute=Compute("synchronous"),
    )
    records = []
    for keywords in (old_form, new_form):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            result = dd.analyze(data, K, epsilon=2.0, random_state=4, **keywords)
        deprecated = [w for w in said if issubclass(w.category, DeprecationWarning)]
        assert len(deprecated) == (5 if keywords is old_form else 0)
        record = result.to_dict()
        record["meta"].pop("analysis_id"), record["meta"].pop("directions_fit_id")
        records.append(_without_ids(record))
    assert records[0] == records[1]


def _without_ids(value):
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("fit_id", "stage_id")}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def test_the_stages_run_after_what_they_read_else_in_the_order_given():
    order = ordered([dd.MedianStage(), dd.ScreeStage(), dd.ScaleStage(), dd.DirectionsStage()])
    assert [s.name for s in order] == ["scale", "directions", "median", "scree"]
    with pytest.raises(ValueError, match="at most once"):
        ordered([dd.ScreeStage(), dd.ScreeStage()])


def test_the_analyze_help_groups_its_options_by_stage(capsys):
    from dask_dppca.cli import main

    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    shown = capsys.readouterr().out
    headings = ["input:", "the analysis:", "directions stage:", "scree stage:"]
    headings += ["score map stage:", "median stage:", "scale stage:", "compute and output:"]
    at = [shown.index(f"\n{heading}\n") for heading in headings]
    assert at[4] < shown.index("\n  --bins") and at[3] < shown.index("\n  --methods") < at[4]
