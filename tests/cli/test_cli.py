"""The command line: demo, fit, and one-line errors with exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dask_dppca.cli import EXIT_USAGE, main
from tests.cli import run_cli, write_store


@pytest.mark.cluster
def test_demo_runs_on_the_embedded_cluster_and_beats_pca(tmp_path):
    done = run_cli("demo", "--n-samples", "4000", "--store", str(tmp_path / "demo.zarr"))
    assert done.returncode == 0, done.stderr
    lines = {
        line.split()[0]: line for line in done.stdout.splitlines() if "  " in line and line.strip()
    }
    dppca = float(lines["g-DPPCA"].split()[-1])
    pca = float(lines["covariance"].split()[-1])
    assert dppca < 0.3 < pca


def test_fit_writes_the_result_file(tmp_path):
    store = write_store(tmp_path / "x.zarr")
    out = tmp_path / "out" / "result.json"
    out.parent.mkdir()
    code = main(
        [
            "fit",
            store,
            "-k",
            "2",
            "--epsilon",
            "0.5",
            "--output",
            str(out),
            "--scheduler",
            "threads",
            "--no-progress",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert np.array(result["components"]).shape == (2, 4)
    assert len(result["eigenvalues"]) == 4
    assert result["privacy"]["epsilon"] == 0.5 and result["privacy"]["sigma"] > 0
    assert [p.name for p in out.parent.iterdir()] == ["result.json"]  # no temporary left


@pytest.mark.parametrize(
    "args, needle",
    [
        (["fit", "/no/such.zarr"], "does not exist"),
        (["fit", "STORE", "--epsilon", "-1"], "epsilon"),
        (["fit", "STORE", "-k", "9"], "n_components"),
        (["fit", "STORE", "--spatial-sign", "winsor"], "radius"),
        (["fit", "STORE", "--scheduler", "tcp://127.0.0.1:1"], "scheduler"),
    ],
)
@pytest.mark.slow
def test_user_errors_are_one_line_with_a_nonzero_exit(tmp_path, args, needle):
    store = write_store(tmp_path / "x.zarr")
    args = [store if a == "STORE" else a for a in args]
    if "--scheduler" not in args:
        args += ["--scheduler", "threads"]
    done = run_cli(*args, "--output", str(tmp_path / "r.json"), timeout=120)
    assert done.returncode == EXIT_USAGE
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr


def test_help_explains_every_option():
    done = run_cli("fit", "--help", timeout=60)
    assert done.returncode == 0
    for option in [
        "--component",
        "--epsilon",
        "--delta",
        "--spatial-sign",
        "--radius",
        "--design",
        "--scheduler",
        "--output",
    ]:
        assert option in done.stdout


def test_main_restores_the_warning_format(tmp_path):
    """main() shows warnings as one line, then leaves the caller's format as it was."""
    import warnings

    before = warnings.formatwarning
    main(["fit", str(tmp_path / "missing.zarr"), "--output", str(tmp_path / "r.json")])
    assert warnings.formatwarning is before
