"""The examples run: examples/quickstart.ipynb and examples/private_analysis.ipynb (executed
with nbclient) and examples/cluster.py.

The notebooks are committed executed (a reader sees the results without running them);
the tests execute a fresh copy with every saved output cleared first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
WIDGET = "application/vnd.jupyter.widget-view+json"
pytestmark = pytest.mark.cluster


def execute(notebook: nbformat.NotebookNode, cwd: Path) -> list[dict]:
    """Execute ``notebook`` in place in a real kernel; the outputs of its code cells, none
    an error."""
    nbclient.NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    return outputs


def execute_fresh(path: Path, cwd: Path) -> list[dict]:
    """Execute ``path`` with its saved outputs cleared; the outputs of its code cells."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return execute(notebook, cwd)


def shown_text(outputs: list[dict]) -> str:
    """Printed text and the plain-text form of displayed values."""
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


def test_quickstart_notebook_runs_shows_its_results_and_cleans_up(tmp_path, monkeypatch):
    # The kernel inherits this environment: a LocalCluster, small data, inline plots, and
    # a temporary directory of its own, which must be empty at the end.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.delenv("DASK_DPPCA_SCHEDULER", raising=False)
    monkeypatch.setenv("DASK_DPPCA_EXAMPLE_N", "2000")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("TMPDIR", str(scratch))
    outputs = execute_fresh(ROOT / "examples" / "quickstart.ipynb", tmp_path)
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot was drawn"
    assert any(WIDGET in o.get("data", {}) for o in outputs), "no progress widget"
    text = shown_text(outputs)
    assert "sin theta to the truth" in text and "remaining epsilon" in text
    assert "privacy report: (1, 1e-06)-DP" in text and "noise_spectral_norm" in text
    assert "kept: " in text  # saved and loaded back
    # Nothing on stderr: no "Port 8787 is already in use", no worker log, no warning.
    assert not [o for o in outputs if o.get("name") == "stderr"], shown_text(outputs)
    # Dask keeps its (emptied) shared worker-space folder there; nothing else may remain.
    left = [p for p in scratch.iterdir() if p.name != "dask-scratch-space"]
    assert not left, f"the notebook left temporary files: {left}"


def test_private_analysis_notebook_runs_shows_the_split_first_and_spends_once(
    tmp_path, monkeypatch
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.delenv("DASK_DPPCA_SCHEDULER", raising=False)
    monkeypatch.setenv("DASK_DPPCA_EXAMPLE_N", "2000")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("TMPDIR", str(scratch))
    outputs = execute_fresh(ROOT / "examples" / "private_analysis.ipynb", tmp_path)
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3  # scree, maps, points
    text = shown_text(outputs)
    # the split is printed before the analysis reads anything (it is shown first)
    assert text.index("privacy split of the total (epsilon=3, delta=1e-05)") < text.index(
        "PrivateAnalysis(k=4"
    )
    assert "private score map of PC1 x PC2, 16 x 16 bins" in text and "noisy size" in text
    assert "composed epsilon of the analysis: 3.0000 (total 3)" in text
    assert "ledger unchanged by plotting, re-sampling, saving and loading: True" in text
    assert "remaining epsilon, one more release at delta 1e-5" in text
    assert any("text/html" in o.get("data", {}) for o in outputs)  # the result's table
    assert not [o for o in outputs if o.get("name") == "stderr"], text
    left = [p for p in scratch.iterdir() if p.name != "dask-scratch-space"]
    assert not left, f"the notebook left temporary files: {left}"


def test_committed_notebooks_are_executed():
    """A reader of the repository sees every code cell's results without running it."""
    for path in sorted((ROOT / "examples").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.execution_count for cell in code), f"{path.name}: a cell was not run"
        outputs = [o for cell in code for o in cell.outputs]
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name}: no plot"
        assert not [o for o in outputs if o.get("output_type") == "error"], path.name
        # A reader sees results, not warnings or log lines.
        stderr = [o.get("text", "") for o in outputs if o.get("name") == "stderr"]
        assert not stderr, f"{path.name}: {stderr}"
        assert "Warning" not in shown_text(outputs), path.name


def test_cluster_script_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DASK_DPPCA_SCHEDULER"}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "cluster.py"),
            "--n-samples",
            "2000",
            "--store",
            str(tmp_path / "data.zarr"),
            "--plot",
            str(tmp_path / "plot.png"),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        env={**env, "MPLBACKEND": "Agg"},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sin theta to the true subspace" in done.stdout
    assert (tmp_path / "plot.png").stat().st_size > 0
