"""The score map inside dd.analyze: one split, one ledger, free post-processing.

Small data on the synchronous scheduler (fast, private default noise); seeds make TEST
DATA only.  The ledger's figures are checked against an independent dp-accounting
computation (privacy loss distributions, pessimistic) over every part of the analysis.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import zarr
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld

import dask_dppca as dd
from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.analysis.stages import default_shares
from dask_dppca.analysis.stages.score_map import PrivateScoreMapStage, resolve_groups
from dask_dppca.analysis.stages.scree import scree_parts as _scree_plan
from dask_dppca.privacy.mechanisms.accounting import PlannedPart, split_budget
from dask_dppca.privacy.mechanisms.parts import (
    ApproxDPPart,
    GaussianPart,
    PureDPPart,
    part_from_dict,
    part_to_dict,
)
from dask_dppca.privacy.mechanisms.score_map import ScoreMap

#: The analysis's default shares of its three stages (the stage registry's).
SHARES = default_shares(("directions", "scree", "score_map"))

N, DOMAIN = 3000, ("a", "b", "c")
TOTAL, BUDGET, DELTA = 3.0, 5.0, 1e-5
_GRID = 1e-3  # dp-accounting's discretization (pessimistic: its epsilons are upper bounds)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)  # test data only
    x = rng.standard_t(3, (N, 5)) * np.sqrt([16.0, 4.0, 1.0, 1.0, 1.0])
    labels = np.array(DOMAIN, dtype=object)[rng.integers(0, 3, N)]
    x[labels == "b", 0] += 8.0
    labels[:25] = "unlisted"  # outside the public domain: the group "other"
    return x, labels


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    x, labels = data
    path = tmp_path_factory.mktemp("analysis-map") / "study.ledger"
    budget = dd.PrivacyBudget(BUDGET, DELTA, ledger=path, create=True)
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with budget:
            result = dd.analyze(
                x,
                n_components=2,
                epsilon=TOTAL,
                delta=DELTA,
                groups=labels,
                group_domain=DOMAIN,
                score_methods=("additive", "sparse"),
                scheduler="synchronous",
                show_split=shown.append,
            )
    return result, path, shown


def _pld(part):
    if isinstance(part, GaussianPart):
        return pld.from_gaussian_mechanism(1 / part.mu, value_discretization_interval=_GRID)
    if isinstance(part, ApproxDPPart):
        return pld.from_privacy_parameters(
            common.DifferentialPrivacyParameters(part.epsilon, part.delta),
            value_discretization_interval=_GRID,
        )
    assert isinstance(part, PureDPPart)
    return pld.from_randomized_response(
        2 / (1 + math.exp(part.epsilon)), 2, value_discretization_interval=_GRID
    )


def _composed(parts):
    out = None
    for part in parts:
        one = _pld(part)
        out = one if out is None else out.compose(one)
    return out


def _spent_parts(path):
    parts = []
    for row in dd.PrivacyBudget.open(path).spent:
        parts += list(row.parts) or [GaussianPart(row.mu)]
    return parts


def test_the_default_analysis_releases_a_score_map_per_group(run, data):
    result, _, _ = run
    x, labels = data
    smap = result.score_map
    assert isinstance(smap, ScoreMap)
    assert smap.groups == ("a", "b", "c", "other") and smap.axes == (0, 1)
    assert set(smap.histograms) == {"additive", "sparse"}
    sizes = smap.group_sizes()
    exact = {g: int((labels == g).sum()) for g in DOMAIN}
    # noisy sizes only: near the exact ones, never all of them exactly equal
    assert all(abs(sizes[g] - exact[g]) < 150 for g in DOMAIN), (sizes, exact)
    assert any(sizes[g] != exact[g] for g in DOMAIN)
    # the private frame holds nearly every point (heavy tails: t_3)
    hist = smap.histogram("additive")
    assert hist.out_of_frame().sum() < 0.1 * N
    stages = [row["stage"] for row in result.privacy]
    assert stages.count("score_map") == 7  # 4 quantiles, 2 histograms, the sizes


def test_the_split_is_planned_from_public_parameters_and_shown_first(run):
    result, _, shown = run
    stage = PrivateScoreMapStage(np.zeros(1), DOMAIN, methods=("additive", "sparse"))
    plan = [
        PlannedPart("directions", "directions", "gaussian"),
        *_scree_plan(2, ("clipped", "winsorized", "huber", "robust")),
        *stage.planned_parts(2),
    ]
    again = split_budget(TOTAL, DELTA, plan, SHARES)  # no data anywhere in this call
    assert result.meta["parts"] == [part_to_dict(p) for p in again.all_parts]
    assert again.shares == {"directions": 0.5, "scree": 0.25, "score_map": 0.25}
    assert len(shown) == 1 and "score_map" in shown[0] and "sparse histogram" in shown[0]


def test_the_ledger_remaining_equals_an_independent_accounting_of_every_part(run):
    result, path, _ = run
    parts = _spent_parts(path)
    # the score map's row holds exactly its share of the split (the sparse part included)
    (row,) = [r for r in dd.PrivacyBudget.open(path).spent if "score map" in r.label]
    planned = result.meta["parts"][-7:]  # the plan's last stage: 4 quantiles, 3 histograms
    assert sorted(map(repr, row.parts)) == sorted(repr(part_from_dict(d)) for d in planned)
    assert any(isinstance(p, ApproxDPPart) for p in row.parts)
    spent = _composed(parts)
    theirs = spent.get_epsilon_for_delta(DELTA)
    # an analysis never spends more than its total
    assert result.meta["composed_epsilon"] <= TOTAL
    assert theirs <= TOTAL + 2e-2
    budget = dd.PrivacyBudget.open(path)
    assert budget.spent_epsilon <= TOTAL
    assert budget.spent_epsilon == pytest.approx(theirs, abs=2e-2)
    # remaining(): one more (epsilon, delta) Gaussian release of that epsilon fills the
    # budget exactly; its sigma found with dp-accounting alone
    left = budget.remaining()
    assert 0.0 < left < BUDGET  # more than BUDGET - TOTAL: composition is sublinear
    lo, hi = 0.1, 100.0
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        one = pld.from_gaussian_mechanism(mid, value_discretization_interval=_GRID)
        if one.get_epsilon_for_delta(DELTA) > left:
            lo = mid
        else:
            hi = mid
    more = pld.from_gaussian_mechanism(hi, value_discretization_interval=_GRID)
    assert spent.compose(more).get_epsilon_for_delta(DELTA) == pytest.approx(BUDGET, abs=3e-2)


def test_saving_plotting_resampling_and_choosing_k_cost_nothing(run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result, path, _ = run
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result.save(tmp_path / "a.json")
    again = PrivateAnalysis.load(tmp_path / "a.json")
    assert isinstance(again.score_map, ScoreMap)
    assert again.score_map.to_dict() == json.loads(result.to_json())["score_map"]
    assert "private score map of PC1 x PC2" in again._repr_html_()
    figure = again.plot_scores()  # per group by default, private only
    texts = [t.get_text() for ax in figure.axes for t in [ax.title, *ax.texts]]
    assert any("noisy n" in t for t in texts)
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    assert not legends  # nothing non-private drawn
    reference = np.zeros((10, 2))
    figure = again.plot_scores(by_group=False, reference=reference, synthetic=True)
    labels = [h.get_label() for ax in figure.axes for h in ax.collections]
    assert any("NOT PRIVATE" in label for label in labels)
    first = again.resample_synthetic(300, bandwidth_scale=0.0, rng=np.random.default_rng(1))
    second = again.resample_synthetic(300, bandwidth_scale=0.0, rng=np.random.default_rng(2))
    assert sum(len(p) for p in first.values()) == 300
    assert not np.array_equal(first["a"], second["a"])
    (x0, x1), (y0, y1) = again.score_map.frame.xlim, again.score_map.frame.ylim
    for points in first.values():
        assert ((points[:, 0] >= x0) & (points[:, 0] <= x1)).all()
        assert ((points[:, 1] >= y0) & (points[:, 1] <= y1)).all()
    again.plot_scree(kind="pve_topk")  # choosing k
    plt.close("all")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"groups": "LABELS"}, "group_domain"),
        ({"group_domain": DOMAIN}, "groups"),
        ({"groups": "LABELS", "group_domain": ("a", "a")}, "group_domain"),
        ({"score_axes": (0, 4)}, "score_axes"),
        ({"score_axes": (1, 1)}, "score_axes"),
        ({"score_methods": ("kde",)}, "score_methods"),
        ({"bins": (0, 10)}, "bins"),
        ({"groups": "LABELS", "group_domain": DOMAIN, "score_map": False}, "groups"),
        (
            {"groups": "LABELS", "group_domain": DOMAIN, "score_map": PrivateScoreMapStage()},
            "groups",
        ),
    ],
)
def test_bad_parameters_are_refused_by_name_before_anything_is_read(data, kwargs, needle):
    x, labels = data
    kwargs = {k: (labels if v == "LABELS" else v) for k, v in kwargs.items()}
    budget = dd.PrivacyBudget(BUDGET, DELTA)
    with budget, pytest.raises(ValueError, match=needle):
        dd.analyze(x, n_components=2, scheduler="synchronous", **kwargs)
    assert budget.releases == 0


def test_groups_by_name_from_a_dataframe_and_a_zarr_group(data, tmp_path):
    dask_dataframe = pytest.importorskip("dask.dataframe")
    x, labels = data
    frame = pd.DataFrame(x[:40], columns=[f"f{i}" for i in range(5)])
    frame["kind"] = pd.Categorical(labels[:40])
    for table in (frame, dask_dataframe.from_pandas(frame, npartitions=2)):
        records, found = resolve_groups(table, "kind")
        assert list(records.columns) == [f"f{i}" for i in range(5)]
        assert list(np.asarray(found).astype(object)) == list(labels[:40])
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("X", data=x[:40])
    codes = np.arange(40) % 3
    group.create_array("labels", data=codes)
    records, found = resolve_groups(str(tmp_path / "g.zarr"), "labels", component="X")
    assert records == str(tmp_path / "g.zarr")
    assert np.array_equal(found.compute(), codes)
    with pytest.raises(ValueError, match="groups"):
        resolve_groups(x, "no-such-column")


def test_an_approx_planned_part_takes_its_public_share_of_delta():
    plan = [
        PlannedPart("directions", "directions", "gaussian"),
        PlannedPart("score_map", "sparse", "approx", delta_share=0.1),
    ]
    split = split_budget(1.0, 1e-5, plan, {"directions": 0.5, "score_map": 0.5})
    part = split.part("score_map", "sparse")
    assert isinstance(part, ApproxDPPart) and part.delta == pytest.approx(1e-6)
    # the exact composition meets the total (dp-accounting, pessimistic)
    assert _composed(split.all_parts).get_epsilon_for_delta(1e-5) == pytest.approx(1.0, abs=2e-2)
    assert split.table()[1]["guarantee"] == "(epsilon, delta)-DP"
    for kind, share in (("approx", 0.0), ("approx", 1.0), ("pure", 0.1)):
        with pytest.raises(ValueError, match="delta_share"):
            PlannedPart("score_map", "sparse", kind, delta_share=share)


def test_the_mechanism_of_the_split_has_exactly_the_split_parts():
    stage = PrivateScoreMapStage(np.zeros(1), DOMAIN, bins=(4, 6), methods=("additive", "sparse"))
    split = split_budget(2.0, 1e-6, stage.planned_parts(2), SHARES)
    mechanism = stage.mechanism(500, split)
    assert sorted(map(repr, mechanism.parts)) == sorted(map(repr, split.all_parts))
    assert mechanism.bins == (4, 6) and mechanism.group_names == (*DOMAIN, "other")
    assert mechanism.histograms["additive"].n_groups == 4
    record = mechanism.describe()
    assert "exactly" in record["composition"] and 0.0 < record["frame_share"] < 1.0
    json.dumps(record, allow_nan=False)


@pytest.mark.parametrize(
    "k, methods, grouped, score_methods, total",
    [
        (2, ("clipped",), False, ("additive",), (1.0, 1e-6)),
        (3, ("clipped", "winsorized", "huber", "robust"), True, ("additive",), (3.0, 1e-5)),
        (5, ("robust",), True, ("additive", "sparse"), (0.5, 1e-4)),
        (4, ("huber",), False, ("sparse",), (8.0, 1e-7)),
    ],
)
def test_an_analysis_plan_never_spends_more_than_its_total(
    k, methods, grouped, score_methods, total
):
    """Every public plan's split, composed independently (dp-accounting), meets the total."""
    eps, delta = total
    stage = PrivateScoreMapStage(
        np.zeros(1) if grouped else None, DOMAIN if grouped else None, methods=score_methods
    )
    plan = [
        PlannedPart("directions", "directions", "gaussian"),
        *_scree_plan(k, methods),
        *stage.planned_parts(k),
    ]
    split = split_budget(eps, delta, plan, SHARES)
    theirs = _composed(split.all_parts).get_epsilon_for_delta(delta)
    assert split.composed_epsilon() <= eps
    assert theirs <= eps + 2e-2  # pessimistic discretization
    assert theirs == pytest.approx(eps, abs=3e-2)  # and it spends (nearly) all of it
    assert sum(split.shares.values()) == pytest.approx(1.0)
