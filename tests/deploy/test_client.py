"""tests/deploy/client.py (the client of the live recipe runs) leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.deploy.live import CLIENT


def test_the_live_client_needs_the_shared_data_folder_and_never_writes_to_tmp(tmp_path):
    """Runs without DASK_DPPCA_DATA_DIR (the SLURM driver's) left /tmp/dppca-live-*
    folders behind, one store each."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DASK_DPPCA_DATA_DIR"}
    done = subprocess.run(
        [sys.executable, str(CLIENT), "--workers", "1", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "TMPDIR": str(scratch), "PYTHONPATH": str(CLIENT.parents[2])},
    )
    assert done.returncode != 0
    assert "DASK_DPPCA_DATA_DIR must name an existing folder" in done.stderr
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "result.json").exists()
