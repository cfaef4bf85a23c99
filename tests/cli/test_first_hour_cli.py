"""A curator's first hour with her own table: ``plan`` reads the table as
``analyze`` does, and her typical mistakes are refused in the project's words, before
anything is printed or reserved.

The table is TEST data (a fixed seed): six numeric columns and a ``site`` column of text
labels.  The end-to-end tests run the console script as typed, with default flags; the
messages' cases run ``main`` in this process (the same parser and runner, faster).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from dask_dppca.cli import EXIT_USAGE, main
from dask_dppca.planning import machine
from dask_dppca.privacy.notices import GROUPS_NOTICE
from tests.cli import CONSOLE_SCRIPT, write_store

N, D = 3000, 6
FEATURES = [f"c{i}" for i in range(D)]


def write_tables(folder: Path) -> dict[str, str]:
    """table.parquet and table.csv: six numeric columns and the text column ``site``."""
    rng = np.random.default_rng(46)
    frame = pd.DataFrame(rng.standard_normal((N, D)) * np.arange(1, D + 1), columns=FEATURES)
    frame["site"] = rng.choice(["north", "south", "west"], N)
    frame.to_parquet(folder / "table.parquet")
    frame.to_csv(folder / "table.csv", index=False)
    return {"parquet": str(folder / "table.parquet"), "csv": str(folder / "table.csv")}


@pytest.fixture
def model_folder(tmp_path, monkeypatch):
    """The machine model and the plan's kept calibration in this test's folder (the
    console script reads the environment variable, this process the configuration), and
    the calibration's kernel run replaced by a stand-in rate in this process.
    """
    path = str(tmp_path / "config" / "machine.json")
    monkeypatch.setenv("DASK_DASK_DPPCA__MACHINE_MODEL", path)
    monkeypatch.setattr(machine, "_calibration_rate", lambda: 1.3e8)
    with dask.config.set({machine.MODEL_PATH_KEY: path}):
        yield


# -- plan reads every input analyze reads --------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_issue_s_plan_line_plans_the_table_as_typed(tmp_path, model_folder):
    """``dask-dppca plan table.parquet --analysis -k 4 --groups site``: the six numeric
    columns (site is the labels, not a feature), rows counted in one pass."""
    write_tables(tmp_path)
    done = subprocess.run(
        [CONSOLE_SCRIPT, "plan", "table.parquet", "--analysis", "-k", "4", "--groups", "site"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"analysis plan for {tmp_path / 'table.parquet'}: {N} x {D}, k=4,")
    assert f"{N} x {D} float64, 1 row chunks (largest {N}), parquet on local" in done.stdout
    assert "noisy group sizes" in done.stdout  # the grouped score map's split


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_plan_takes_analyze_s_input_flags(tmp_path, model_folder, capsys, kind):
    tables = write_tables(tmp_path)
    argv = ["plan", tables[kind], "--analysis", "-k", "2", "--columns", "c0,c2,c4", "--json"]
    assert main([*argv, "--groups", "site", "--group-domain", "north,south"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["directions"]["input"]["shape"] == [N, 3]
    assert (
        planned["directions"]["input"]["type"]
        == f"{'Parquet' if kind == 'parquet' else 'CSV'} table"
    )
    assert planned["parameters"]["grouped"] is True
    assert main(["plan", tables[kind], "-k", "2", "--groups", "site", "--json"]) == 2  # a fit's
    assert "go with --analysis" in capsys.readouterr().err
    assert main(["plan", tables[kind], "--json"]) == 2  # site is text: choose the features
    assert "not numeric" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["TABLE", "-k", "30", "--columns", ",".join(FEATURES)], "n_components: must be in 1..6"),
        (["TABLE", "--analysis", "-k", "30", "--columns", "c0,c1"], "must be in 1..2 (d = 2)"),
        (["TABLE", "--analysis", "--groups", "nolabels"], "['nolabels'] not in"),
        (["TABLE", "--analysis", "--storage-option", "anon=true"], "--storage-option"),
        (["TABLE", "--analysis", "--group-domain", "a", "--columns", "c0,c1"], "without --groups"),
        (["STORE", "--columns", "c0,c1"], "--columns: chooses the features of a Parquet or CSV"),
    ],
)
def test_plan_refuses_a_bad_input_flag_in_one_line(tmp_path, model_folder, capsys, args, needle):
    tables = write_tables(tmp_path)
    store = write_store(tmp_path / "data.zarr")
    args = [{"TABLE": tables["parquet"], "STORE": store}.get(a, a) for a in args]
    assert main(["plan", *args]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and needle in err, err


# -- errors in the project's words -----------------------------------------------------


@pytest.mark.parametrize(
    "case, args, line",
    [
        (
            "empty",
            ["empty.csv"],
            "X: '{folder}/empty.csv' is empty: a CSV table needs a header line naming its "
            "columns, then one record per line",
        ),
        (
            "header",
            ["header.csv"],
            "X: '{folder}/header.csv' has no rows (a header line only): nothing to analyse",
        ),
        (
            "report",
            ["table.parquet", "--report", "report.html"],
            "--report: 'report.html' exists; pass --force to replace it (or choose another "
            "--report)",
        ),
    ],
)
def test_a_curator_s_mistake_is_one_line_in_the_project_s_words(
    tmp_path, monkeypatch, capsys, case, args, line
):
    monkeypatch.chdir(tmp_path)
    write_tables(tmp_path)
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text(",".join(FEATURES) + "\n")
    (tmp_path / "report.html").write_text("an earlier report")
    assert main(["analyze", *args]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"dask-dppca: error: {line.format(folder=tmp_path)}\n"
    assert not (tmp_path / "analysis.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_too_many_components_are_refused_before_the_split_or_the_ledger(tmp_path):
    """``-k 30`` of six columns: refused before the split table prints and before the
    ledger reserves anything (the issue saw the split, then 3 cancelled rows)."""
    write_tables(tmp_path)
    assert (
        main(
            [
                "budget",
                "create",
                str(tmp_path / "study.ledger"),
                "--epsilon",
                "9",
                "--delta",
                "1e-5",
            ]
        )
        == 0
    )
    before = (tmp_path / "study.ledger").read_bytes()
    done = subprocess.run(
        [CONSOLE_SCRIPT, "analyze", "table.parquet", "--groups", "site", "--group-domain",
         "north,south", "-k", "30", "--budget", "study.ledger"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stdout == ""  # no split table
    refusal = "n_components: must be in 1..6 (d = 6), got 30"
    assert done.stderr == f"dask-dppca: error: {refusal}\n"
    assert (tmp_path / "study.ledger").read_bytes() == before  # no row, cancelled or not
    assert not (tmp_path / "analysis.json").exists()


def test_the_api_refuses_too_many_components_before_the_split_or_the_ledger(tmp_path):
    """The same through ``analyze``: nothing shown, nothing reserved (refused after its
    parameters are checked and its input opened, before the split)."""
    import dask_dppca as dd

    ledger = tmp_path / "study.ledger"
    budget = dd.PrivacyBudget(epsilon=9, delta=1e-5, ledger=ledger, create=True)
    before, shown = ledger.read_bytes(), []
    rows = np.random.default_rng(0).standard_normal((50, 3))  # test data
    with budget, pytest.raises(ValueError, match=r"^n_components: must be in 1\.\.3 \(d = 3\)"):
        dd.analyze(rows, n_components=4, show_split=shown.append, scheduler="synchronous")
    assert shown == [] and ledger.read_bytes() == before
    with pytest.raises(ValueError, match="^epsilon"):  # a bad parameter is named first
        dd.analyze(rows, n_components=4, epsilon=-1.0, scheduler="synchronous")


# -- many groups' notices: one line ---------------------------------------------------


def _record(groups: list[str], sizes: list[float]) -> dict:
    """A released record's parts the notices read (a score map of ``groups``)."""
    return {
        "privacy": [{"release": f"noisy group sizes ({len(groups)} groups)", "noise": 10.0}],
        "scree": {},
        "score_map": {
            "frame": {"centre": [0.0, 0.0], "half_width": [1.0, 1.0]},
            "groups": groups,
            "group_counts": sizes,
        },
    }


def test_many_empty_groups_notices_are_one_line_and_a_few_stay_whole():
    from dask_dppca.cli.notices import SHOWN_EACH, notice_lines
    from dask_dppca.privacy.notices import release_notices

    names = ["north", "o'brien", *[f"g{i}" for i in range(40)], "other"]
    sizes = [900.0, 3.5, *[float(i % 7 - 3) for i in range(40)], -2.0]
    notices = release_notices(_record(names, sizes))
    assert len(notices) == 42  # every group but north
    lines = notice_lines(notices, "analysis.json")
    assert lines == [
        "notice: 41 groups, e.g. \"o'brien\" (3.5), 'g0' (-3), 'g1' (-2): each one's noisy size "
        "is below 3 times its noise scale (10): it may hold no record (a label missing from "
        "the data, or a typo in the domain); its panels are noise. All 41 are listed in the "
        "notices of analysis.json.",
        f"notice: {notices[-1]}",  # 'other': a kind of its own
    ]
    few = release_notices(_record(names[: SHOWN_EACH + 1], sizes[: SHOWN_EACH + 1]))
    assert len(few) == SHOWN_EACH
    assert notice_lines(few, "analysis.json") == [f"notice: {n}" for n in few]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_large_group_domain_prints_one_notice_line_for_its_empty_groups(
    tmp_path, monkeypatch, capsys
):
    """The issue's 5000 labels printed 4992 notice lines: here 300 labels, 3 in the data."""
    monkeypatch.chdir(tmp_path)
    write_tables(tmp_path)
    domain = ",".join(["north", "south", "west", *[f"site{i}" for i in range(297)]])
    argv = ["analyze", "table.parquet", "--groups", "site", "--group-domain", domain]
    assert main([*argv, "-k", "2", "--scheduler", "synchronous", "--no-progress"]) == 0
    out = capsys.readouterr().out
    notices = [line for line in out.splitlines() if line.startswith("notice: ")]
    kept = json.loads((tmp_path / "analysis.json").read_text())["notices"]
    advice = [line for line in notices if line.startswith(f"notice: {GROUPS_NOTICE}")]
    assert len(advice) == 1, notices  # 301 groups of the 3000 rows: too many for the budget
    groups = [
        line
        for line in notices
        if line not in advice and (line.startswith("notice: Group ") or " groups, " in line)
    ]
    assert len(kept) >= 290 and len(groups) <= 2  # the result keeps every one
    (summary,) = [line for line in notices if " groups, e.g. 'site0' (" in line]
    empty = sum(notice.startswith("Group 'site") for notice in kept)
    assert summary.startswith(f"notice: {empty} groups, e.g. 'site0' (")
    where = tmp_path / "analysis.json"
    assert summary.endswith(f"All {empty} are listed in the notices of {where}.")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_parquet_folder_of_small_files_is_planned_and_analysed_with_its_groups(
    tmp_path, model_folder, monkeypatch, capsys
):
    """Dask fuses a folder's small files into fewer partitions than files when few
    columns are read: the rows and the labels are counted in those partitions (analyze
    failed after its split table: "The number of items in 'lengths' does not match the
    number of partitions. 3 != 12")."""
    monkeypatch.chdir(tmp_path)
    frame = pd.read_parquet(write_tables(tmp_path)["parquet"])
    (tmp_path / "folder.parquet").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(N), 12)):
        frame.iloc[rows].to_parquet(tmp_path / "folder.parquet" / f"part{i:02d}.parquet")
    argv = ["folder.parquet", "--columns", "c0,c1", "--groups", "site"]
    assert main(["plan", *argv, "--analysis", "-k", "2", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["directions"]["input"]
    assert planned["shape"] == [N, 2] and planned["row_chunks"]["count"] <= 12
    domain = ["--group-domain", "north,south", "-k", "2", "--scheduler", "synchronous"]
    assert main(["analyze", *argv, *domain, "--no-progress"]) == 0
    result = json.loads((tmp_path / "analysis.json").read_text())
    assert result["meta"]["n_samples"] == N
    assert result["score_map"]["groups"] == ["north", "south", "other"]
