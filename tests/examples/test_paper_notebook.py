"""Execute a fresh copy of examples/paper_experiments.ipynb (the reduced experiments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.test_notebooks import execute_fresh, shown_text

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "paper_experiments.ipynb"


@pytest.mark.slow
def test_paper_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    outputs = execute_fresh(NOTEBOOK, tmp_path)
    assert "g-DPPCA sphere" in shown_text(outputs) and "'k':" in shown_text(outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot was drawn"
