"""examples/private_analysis.ipynb runs (a fresh copy, saved outputs cleared)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.test_notebooks import ROOT, execute_fresh

pytestmark = pytest.mark.cluster


def test_private_analysis_notebook_runs(tmp_path: Path):
    outputs = execute_fresh(ROOT / "examples" / "private_analysis.ipynb", tmp_path)
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "privacy split of the total (epsilon=3, delta=1e-05)" in text
    assert "directions (noisy Kendall matrix)" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # the private scree, the PVE over all d, the labelled reference
    assert (tmp_path / "analysis.json").exists()
