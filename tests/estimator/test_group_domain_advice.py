"""A group domain too large for the budget: advised before anything is spent (the plan,
the split analyze shows), said again in the result's notices, and refused above
``MAX_GROUP_DOMAIN`` labels; and every result says how non-finite values were treated."""

from __future__ import annotations

import html
import math

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.stages.score_map import MAX_GROUP_DOMAIN
from dask_dppca.privacy.notices import (
    GROUPS_NOTICE,
    NOISE_MULTIPLE,
    NON_FINITE_NOTE,
    notes_html,
)

N, D = 3000, 4


def _rows():
    return np.random.default_rng().standard_normal((N, D))  # the data: any rows


def _domain(size):
    return tuple(f"g{i}" for i in range(size))


def _size_noise(plan):
    """sigma of a group's noisy size from the split's own part, independently: l2
    sensitivity sqrt 2 (one record changes group), Gaussian at mu."""
    part = plan.split.part("score_map", "noisy group sizes")
    return math.sqrt(2.0) / part.mu


@pytest.mark.parametrize("size", [3, 30])
def test_the_plan_advises_exactly_when_the_average_group_is_below_its_noise(size):
    plan = dd.plan_analysis(_rows(), 2, epsilon=1.0, delta=1e-6, grouped=_domain(size))
    groups = plan.accuracy["score_map"]["groups"]
    noise = _size_noise(plan)
    assert groups["count"] == size + 1 and groups["size_noise"] == pytest.approx(noise)
    expected = N / (size + 1) < NOISE_MULTIPLE * noise
    assert groups["below_noise"] is expected
    assert expected is (size == 30)  # the two cases are on both sides of the line
    assert (GROUPS_NOTICE in str(plan)) is expected


def test_a_plan_without_the_domain_states_nothing_about_the_groups():
    plan = dd.plan_analysis(_rows(), 2, epsilon=1.0, delta=1e-6, grouped=True)
    assert "groups" not in plan.accuracy["score_map"]
    assert GROUPS_NOTICE not in str(plan)


def test_analyze_shows_the_advice_with_the_split_and_keeps_it_in_the_notices():
    x = _rows()
    labels = np.array(_domain(30))[np.arange(N) % 30]
    shown = []
    result = dd.analyze(
        x,
        2,
        epsilon=1.0,
        delta=1e-6,
        groups=labels,
        group_domain=_domain(30),
        methods=("clipped",),
        scheduler="threads",
        show_split=shown.append,
    )
    assert any(GROUPS_NOTICE in text for text in shown), shown
    assert any(n.startswith(GROUPS_NOTICE) for n in result.notices), result.notices
    # every result says how non-finite values were treated, and so does its report
    assert result.meta["non_finite"] == NON_FINITE_NOTE
    assert html.escape(NON_FINITE_NOTE) in notes_html(result)  # the report's notes block


@pytest.mark.parametrize("how", ["analyze", "plan"])
def test_a_domain_above_the_stated_size_is_refused_by_name_before_anything(how):
    x = _rows()
    domain = _domain(MAX_GROUP_DOMAIN + 1)
    with pytest.raises(ValueError, match=f"group_domain: {MAX_GROUP_DOMAIN + 1} labels"):
        if how == "analyze":
            labels = np.array(domain)[np.arange(N) % len(domain)]
            dd.analyze(x, 2, groups=labels, group_domain=domain, scheduler="threads")
        else:
            dd.plan_analysis(x, 2, grouped=domain)
    # at the stated size itself: accepted (the plan is enough to show it)
    dd.plan_analysis(x, 2, grouped=_domain(MAX_GROUP_DOMAIN))
