"""Quiet, early output: a bad input fails in one line before the split table and before any
cluster starts; no third-party warning on the README's lines (explicit legend places, rows
in memory scattered rather than embedded in a graph); an analysis file read by the wrong
loader says which one reads it.  Seeds make TEST DATA only.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import dask
import matplotlib.axes
import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.analysis import run as analysis
from dask_dppca.cli import EXIT_USAGE, main
from tests.cli import write_store

ROOT = Path(__file__).resolve().parents[2]
#: Text a third party's warning shows: a warning class, a source path, Dask's and
#: matplotlib's known lines.  The command's own warnings read "dask-dppca: warning: ...".
THIRD_PARTY = re.compile(
    r"\w+Warning\b|site-packages|warnings\.warn|Sending large graph|Creating legend|"
    r"Traceback|Exception ignored"
)


@pytest.mark.parametrize("path", ["/no/such/data.zarr", "/no/such/table.parquet", "notes.txt"])
def test_analyze_on_a_bad_path_fails_in_one_line_before_the_split_and_any_cluster(
    tmp_path, capsys, monkeypatch, path
):
    def no_cluster(*args, **kwargs):
        raise AssertionError("a compute target was made for a bad input")

    monkeypatch.setattr(analysis, "compute_target", no_cluster)
    (tmp_path / "notes.txt").write_text("not records\n")
    monkeypatch.chdir(tmp_path)
    code = main(["analyze", path, "--output", str(tmp_path / "a.json")])  # default scheduler
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE and out == ""  # no split table
    assert err.count("\n") == 1 and ("does not exist" in err or "Parquet" in err), err


def test_load_result_on_an_analysis_file_names_its_reader(tmp_path):
    write_store(tmp_path / "x.zarr")
    args = ["analyze", str(tmp_path / "x.zarr"), "-k", "2", "--no-score-map"]
    assert main([*args, "--scheduler", "synchronous", "--output", str(tmp_path / "a.json")]) == 0
    with pytest.raises(ValueError, match=r"analysis file .*PrivateAnalysis\.load\("):
        dd.load_result(tmp_path / "a.json")
    assert dd.PrivateAnalysis.load(tmp_path / "a.json").directions.shape == (2, 4)


def test_every_legend_of_the_plots_has_an_explicit_place(tmp_path, monkeypatch):
    """loc="best" makes matplotlib search the data, and warn when that is slow."""
    places: list = []
    legend = matplotlib.axes.Axes.legend

    def recorded(self, *args, **kwargs):
        places.append(kwargs.get("loc"))
        return legend(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", recorded)
    rng = np.random.default_rng(5)  # test data
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("X", data=rng.standard_normal((600, 3)))
    group.create_array("labels", data=np.arange(600) % 2)
    flags = ["--component", "X", "--groups", "labels", "--group-domain", "0,1", "-k", "2"]
    assert (
        main(
            ["analyze", str(tmp_path / "g.zarr"), *flags, "--plots", str(tmp_path / "plots")]
            + ["--scheduler", "synchronous", "--output", str(tmp_path / "a.json")]
        )
        == 0
    )
    assert len(places) >= 4 and None not in places and "best" not in places, places


@pytest.mark.cluster
def test_rows_in_memory_sent_once_without_dask_s_large_graph_warning(tmp_path):
    """Persisted once from a graph that holds them (a lost worker's blocks are computed
    again from it), Dask's warning about that graph not shown (its threshold lowered here
    so that a small array crosses it)."""
    x = np.random.default_rng(6).standard_normal((4000, 4))  # 128 kB, test data
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "16kB"}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dd.DPPCA(n_components=2).fit(x)
            dd.analyze(x, n_components=2, score_map=False)
    assert not [w for w in caught if "large graph" in str(w.message)]


def _readme_lines() -> list[list[str]]:
    """docs/usage.md's fit and analyze lines (continuations joined), split as a shell
    would.  The README's own analyze line (survey.parquet) runs, checked the same way, in
    tests/cli/test_readme.py."""
    text = "\n".join((ROOT / name).read_text() for name in ("README.md", "docs/usage.md"))
    text = text.replace("\\\n", " ")
    lines = [
        line
        for line in text.splitlines()
        if line.startswith(
            (
                "dask-dppca fit data.zarr",
                "dask-dppca analyze data.zarr -k 5",
            )
        )
        and "--budget" not in line
    ]
    assert len(lines) == 2, lines
    return [shlex.split(line)[1:] for line in lines]


@pytest.mark.cluster
def test_the_readme_lines_print_no_third_party_warning(tmp_path):
    x = np.random.default_rng(8).standard_t(3, size=(3000, 6))  # test data
    zarr.open_array(str(tmp_path / "data.zarr"), mode="w", shape=x.shape, chunks=(1000, 6))[:] = x
    labels = np.array(["a", "b", "c", "d"])[np.arange(3000) % 4]
    zarr.open_array(str(tmp_path / "labels.zarr"), mode="w", shape=(3000,), dtype=str)[:] = labels
    for argv in _readme_lines():
        done = subprocess.run(
            [sys.executable, "-m", "dask_dppca", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=280,
        )
        assert done.returncode == 0, done.stderr
        found = THIRD_PARTY.findall(done.stderr)
        assert not found, done.stderr
