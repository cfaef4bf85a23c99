"""``dask-dppca plan``: docs/usage.md's lines exactly as a user types them, default flags.

The store is TEST data (a fixed seed).  The plan reads no data and starts no cluster; a
plan that does not fit exits 2 with one line naming the number it needs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.cli import main
from dask_dppca.planning.machine import MachineModel, load_machine_model

ROOT = Path(__file__).resolve().parents[2]
USAGE = (ROOT / "docs" / "usage.md").read_text()
TIMEOUT = 120


def readme_plan_lines() -> list[list[str]]:
    """docs/usage.md's ``dask-dppca plan data.zarr ...`` lines, split as a shell would."""
    lines = [line for line in USAGE.splitlines() if line.startswith("dask-dppca plan data.zarr")]
    assert len(lines) == 2
    return [shlex.split(line.split("#", 1)[0]) for line in lines]


@pytest.fixture(autouse=True)
def own_model_folder(tmp_path, monkeypatch):
    """The machine model and the plan's kept calibration in this test's folder, not the
    user's (the console script reads the environment variable, this process the config).
    """
    import dask

    from dask_dppca.planning.machine import MODEL_PATH_KEY

    path = str(tmp_path / "config" / "machine.json")
    monkeypatch.setenv("DASK_DASK_DPPCA__MACHINE_MODEL", path)
    with dask.config.set({MODEL_PATH_KEY: path}):
        yield


def write_store(folder: Path, n: int = 6000, d: int = 8) -> None:
    x = np.random.default_rng(4).standard_t(1, size=(n, d))  # TEST data
    z = zarr.create_array(str(folder / "data.zarr"), shape=x.shape, chunks=(1000, d), dtype="f8")
    z[:] = x


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.slow
def test_the_readme_plan_lines_run_as_typed(tmp_path, monkeypatch, capsys):
    write_store(tmp_path)
    first, cluster = readme_plan_lines()
    done = _run(first, tmp_path)  # the console script, in a shell's working folder
    assert done.returncode == 0, done.stderr
    expected = dd.DPPCA(n_components=3, epsilon=1.0).plan(str(tmp_path / "data.zarr"))
    assert f"= {expected.n_tasks} tasks" in done.stdout
    assert "design: complete, from design='auto'" in done.stdout
    assert "fits: yes" in done.stdout and done.stderr == ""
    monkeypatch.chdir(tmp_path)
    assert main(cluster[1:]) == 0
    out = capsys.readouterr().out
    assert "cluster: 100 worker(s) x 16 thread(s), memory limit 64 GiB (given)" in out


@pytest.mark.slow
def test_a_plan_that_does_not_fit_exits_2_with_the_number_it_needs(tmp_path, capsys):
    write_store(tmp_path)
    argv = ["plan", str(tmp_path / "data.zarr"), "--workers", "1", "--threads", "2"]
    assert main([*argv, "--memory-limit", "100MiB", "--json"]) == 2
    done = capsys.readouterr()
    plan = json.loads(done.out)
    assert plan["fits"] is False
    (line,) = done.err.splitlines()
    assert line.startswith("dask-dppca: error: the plan does not fit: memory:")
    assert "a memory limit of at least" in line
    needed = line.split("a memory limit of at least ")[1].split(" per worker")[0]
    assert main([*argv, "--memory-limit", needed.replace(" ", "")]) == 0
    assert "fits: yes" in capsys.readouterr().out


def test_bench_save_writes_the_model_plan_reads(tmp_path, monkeypatch, capsys):
    from dask_dppca.cli import measure

    measured = MachineModel({8: 2e8}, {"local/zstd": 3e8}, 2e-3, 0.5, 2**28, "stand-in")
    monkeypatch.setattr(measure, "measure_machine_model", lambda quick=False: measured)
    path = tmp_path / "machine.json"
    assert main(["bench", "--save", str(path), "--quick"]) == 0
    assert f"saved to {path}" in capsys.readouterr().out
    assert load_machine_model(path) == measured
    write_store(tmp_path)
    assert main(["plan", str(tmp_path / "data.zarr"), "--machine", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time"]["machine_model"] == "stand-in"


@pytest.mark.slow
def test_bench_reads_at_a_local_folder_measures_it_and_leaves_it_empty(
    tmp_path, monkeypatch, capsys
):
    """``--reads-at FOLDER`` measures Zarr reads there (the measured figures replace the
    model's ``local/zstd``) and removes its benchmark stores; without --save it is refused."""
    from dask_dppca.cli import measure

    stand_in = MachineModel({8: 2e8}, {"local/zstd": 1.0}, 2e-3, 0.5, 2**28, "stand-in")
    monkeypatch.setattr(measure, "measure_machine_model", lambda quick=False: stand_in)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert main(["bench", "--reads-at", str(scratch)]) == 2
    assert "--reads-at" in capsys.readouterr().err and not list(scratch.iterdir())
    path = tmp_path / "machine.json"
    assert main(["bench", "--save", str(path), "--quick", "--reads-at", str(scratch)]) == 0
    model = load_machine_model(path)
    assert model.read_bytes_per_second["local/zstd"] > 1e6  # measured, not the stand-in's 1
    assert model.read_call("local/zstd") > 0
    assert not list(scratch.iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "--scheduler: give"),
        (["--design", "regular"], "--design regular needs"),
        (["--spectrum", "a,b"], "--spectrum: expected"),
        (["--workers", "2", "--threads", "2", "--memory-limit", "much"], "memory_limit:"),
    ],
)
@pytest.mark.slow
def test_bad_plan_flags_are_one_line_errors(tmp_path, capsys, argv, message):
    write_store(tmp_path, n=500, d=3)
    assert main(["plan", str(tmp_path / "data.zarr"), *argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line
