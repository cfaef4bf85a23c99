"""The examples run: examples/quickstart.ipynb (executed with nbclient) and examples/cluster.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    pytest.importorskip("ipywidgets")  # the progress widget of DPPCA(progress=True)
    notebook = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    # The kernel inherits this environment: a LocalCluster, small data, no display.
    monkeypatch.delenv("DASK_DPPCA_SCHEDULER", raising=False)
    monkeypatch.setenv("DASK_DPPCA_EXAMPLE_N", "2000")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot was drawn"
    text = "".join(o.get("text", "") for o in outputs)
    assert "sin theta to the truth" in text and "remaining epsilon" in text


def test_cluster_script_runs(tmp_path):
    pytest.importorskip("matplotlib")
    env = {k: v for k, v in os.environ.items() if k != "DASK_DPPCA_SCHEDULER"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "cluster.py"), "--n-samples", "2000",
         "--store", str(tmp_path / "data.zarr"), "--plot", str(tmp_path / "plot.png")],
        capture_output=True, text=True, timeout=150, env={**env, "MPLBACKEND": "Agg"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sin theta to the true subspace" in done.stdout
    assert (tmp_path / "plot.png").stat().st_size > 0
