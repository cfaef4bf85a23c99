"""No behaviour change across the stage refactor: four seeded analyses pinned at commit
70c799d, before ``analyze`` became a loop over registered stages (threads and the
embedded cluster; groups, sparse histograms, monotone scree, the winsor sign without a
score map, a given split).

tests/estimator/data/pinned_analyses.json holds their records (``to_dict()``) less ids
and worker addresses; the script beside it made them.  Every pinned key must be there
with its value: strings, integers and the discrete releases exactly, floats to 1e-10
relative (the directions are BLAS and LAPACK output; on the machine that pinned them
every value is bitwise the same).  Keys may only be added where the mechanism contract
added them to a mechanism's record (:data:`ADDED`).  Seeds: TEST noise only (NOT private).
"""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import pytest

from dask_dppca.privacy.notices import ACCURACY_NOTICE, GROUPS_NOTICE, UNITS_NOTICE

DATA = Path(__file__).parent / "data"
PINNED = json.loads((DATA / "pinned_analyses.json").read_text())
#: Keys added to mechanisms' records by the mechanism contract (each record now states
#: its sensitivity and noise scale, so the privacy table reads them from every one); by
#: the scale stage: the analysis's ``scaling`` ("none" for these) and its quantile
#: stages' public ``accuracy``; every private quantile's public rank bound.
ADDED = {
    "sensitivity",
    "sensitivity_units",
    "laplace_scale_counts",
    "scaling",
    "accuracy",
    "rank_error_95",
    "non_finite",  # the analysis's sentence on non-finite values (the same in every result)
}


def _maker():
    spec = importlib.util.spec_from_file_location(
        "make_pinned_analyses", DATA / "make_pinned_analyses.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _differences(pinned, now, path=""):
    if path == "/notices" and isinstance(now, list):
        # The scale stage's notices may be added: single-column directions (these
        # analyses' data have axis-aligned scatter) and the frame's accuracy statement.
        # Every pinned notice must stay.
        # The group domain's advice (public: n, the domain, the split) may be added too.
        added = (UNITS_NOTICE, ACCURACY_NOTICE, GROUPS_NOTICE)
        now = [n for n in now if not str(n).startswith(added)]
    if isinstance(pinned, dict):
        if not isinstance(now, dict):
            return [f"{path}: not a record"]
        out = [f"{path}/{k}: missing" for k in pinned if k not in now]
        out += [f"{path}/{k}: added" for k in now if k not in pinned and k not in ADDED]
        for key in (k for k in pinned if k in now):  # in the pinned record's order
            out += _differences(pinned[key], now[key], f"{path}/{key}")
        return out
    if isinstance(pinned, list):
        if not isinstance(now, list) or len(now) != len(pinned):
            return [f"{path}: length"]
        return [
            d
            for i, (a, b) in enumerate(zip(pinned, now))
            for d in _differences(a, b, f"{path}[{i}]")
        ]
    if isinstance(pinned, float) and isinstance(now, float):
        same = math.isclose(pinned, now, rel_tol=1e-10, abs_tol=1e-12) or pinned == now
        return [] if same else [f"{path}: {pinned!r} != {now!r}"]
    return [] if pinned == now else [f"{path}: {pinned!r} != {now!r}"]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_seeded_analysis_is_the_pinned_one(name):
    maker = _maker()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        now = json.loads(json.dumps(maker.pinned_record(name)))
    assert _differences(PINNED[name], now) == []


def test_the_comparison_sees_a_moved_value_a_lost_key_and_an_unknown_one():
    record = {"a": [1.0, 2.0], "b": {"c": "x", "sensitivity": 1}}
    assert _differences(record, record) == []
    assert _differences(record, {"a": [1.0, 2.0 + 1e-6], "b": {"c": "x"}}) == [
        "/a[1]: 2.0 != 2.000001",
        "/b/sensitivity: missing",
    ]
    assert _differences(record, {**record, "new": 1}) == ["/new: added"]
