"""A paid-for analysis is never lost: written whole where asked (atomic, 0600, URLs), kept
somewhere named when the output fails after the charge, and the stages released before a
failure go out with it.  Seeds make TEST DATA only.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.analysis.stages.score_map import PrivateScoreMapStage
from dask_dppca.cli import main
from tests.cli import write_store

pytestmark = pytest.mark.timeout(300)


def _data() -> np.ndarray:
    rng = np.random.default_rng(3)  # test data only
    return rng.standard_normal((500, 4)) * np.array([3.0, 2.0, 1.0, 0.5])


def test_the_result_and_report_files_are_written_whole_with_mode_0600(tmp_path, capsys):
    store = write_store(tmp_path / "x.zarr", n=500, d=4)
    out, report = tmp_path / "a.json", tmp_path / "a.html"
    line = f"analyze {store} -k 2 --output file://{out} --report {report} --scheduler synchronous"
    assert main(line.split()) == 0, capsys.readouterr().err
    for path in (out, report):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert PrivateAnalysis.load(out).directions.shape == (2, 4)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".a.")]  # no temp


def test_a_memory_url_output_is_written_after_the_charge(tmp_path, capsys):
    import fsspec

    store = write_store(tmp_path / "x.zarr", n=500, d=4)
    line = f"analyze {store} -k 2 --output memory://kept/a.json --scheduler synchronous"
    assert main(line.split()) == 0, capsys.readouterr().err
    text = fsspec.filesystem("memory").cat_file("/kept/a.json")
    assert PrivateAnalysis.from_dict(__import__("json").loads(text)).directions.shape == (2, 4)


FULL_DISK = """
import os, subprocess, sys
folder, store, ledger = sys.argv[1:4]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", folder], check=True)
handle = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(handle, b"x" * 4096)
except OSError:
    os.close(handle)
from dask_dppca.cli import main
sys.exit(main(["analyze", store, "-k", "2", "--budget", ledger, "--scheduler", "synchronous",
               "--output", os.path.join(folder, "analysis.json")]))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"),
    reason="mounting a small tmpfs in a private mount namespace needs root",
)
def test_a_full_disk_at_the_output_keeps_the_paid_for_result_and_names_where(tmp_path):
    store = write_store(tmp_path / "x.zarr", n=500, d=4)
    ledger = tmp_path / "study.ledger"
    dd.PrivacyBudget(10.0, 1e-4, ledger=ledger, create=True)
    small = tmp_path / "small"
    small.mkdir()
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", textwrap.dedent(FULL_DISK)]
        + [str(small), store, str(ledger)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    kept = list(tmp_path.glob("dask-dppca-analysis-*.json"))
    assert len(kept) == 1, done.stderr
    assert str(kept[0]) in done.stderr and "paid for" in done.stderr
    result = PrivateAnalysis.load(kept[0])
    rows = dd.PrivacyBudget.open(ledger).spent
    assert {row.fit_id.rsplit(".", 1)[0] for row in rows} == {result.meta["analysis_id"]}
    assert all(row.state == "committed" for row in rows)
    assert "Traceback" not in done.stderr


class _BrokenMap:
    """A score map stage that fails after the directions and the scree were released."""

    name = "score_map"

    def planned_parts(self, k, d):
        return PrivateScoreMapStage(None, None).planned_parts(k, d)

    def run(self, context):
        raise RuntimeError("the cluster went away")


def test_stages_released_before_a_failure_go_out_with_the_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as failed:
            dd.analyze(_data(), 2, epsilon=2.0, scheduler="synchronous", score_map=_BrokenMap())
    partial = failed.value.partial_analysis
    assert partial.meta["released_stages"] == ["directions", "scree"]
    assert partial.directions.shape == (2, 4) and len(partial.scree["values"]["clipped"]) == 2
    assert partial.score_map is None
    assert "released directions, scree; not released: score map" in failed.value.__notes__[0]


def test_the_cli_writes_the_released_stages_of_a_failed_analysis(tmp_path, monkeypatch, capsys):
    from dask_dppca.analysis import run as analysis

    store = write_store(tmp_path / "x.zarr", n=500, d=4)
    original = analysis.analyze

    def with_broken_map(*args, **kwargs):
        kwargs["score_map"] = _BrokenMap()
        kwargs.pop("groups", None), kwargs.pop("group_domain", None)
        for key in ("score_axes", "bins", "score_methods"):
            kwargs.pop(key, None)
        return original(*args, **kwargs)

    monkeypatch.setattr(analysis, "analyze", with_broken_map)
    out = tmp_path / "a.json"
    rc = main(f"analyze {store} -k 2 --output {out} --scheduler synchronous".split())
    err = capsys.readouterr().err
    assert rc != 0
    assert f"the released stages (directions, scree) written to {out}" in err
    assert PrivateAnalysis.load(out).meta["released_stages"] == ["directions", "scree"]
