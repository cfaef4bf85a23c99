"""``fit`` and ``analyze`` on Parquet and CSV tables, with ``--columns`` and ``--groups
COLUMN``: the same release as the same records in Zarr (same design, same statistics),
feature names in the result; a text column refused by name before anything runs.

In process, on the synchronous scheduler.  Seeds make TEST DATA; the noise is seeded
(``random_state``, tests only, never private) so that two releases compare bit for bit.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from dask_dppca.analysis import run as analysis
from dask_dppca.cli import EXIT_USAGE, main
from dask_dppca.decomposition import estimator
from dask_dppca.privacy.mechanisms.noise import SeededSampler

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)

N, FEATURES = 600, ["a", "b", "c"]
#: Keys that differ by construction between two runs on two inputs.
PER_RUN = {"analysis_id", "directions_fit_id", "fit_id", "dataset", "created", "fit_seconds"}


def _table() -> pd.DataFrame:
    """Three numeric columns, a text column and group labels (test data, fixed seed)."""
    rng = np.random.default_rng(11)
    frame = pd.DataFrame(rng.standard_normal((N, 3)) * [1.0, 2.0, 0.5], columns=FEATURES)
    frame.insert(1, "city", np.where(np.arange(N) % 3 == 0, "Lyon", "Oslo"))
    frame["group"] = rng.integers(0, 3, N)
    return frame


def write_inputs(folder: Path) -> dict[str, str]:
    """The same records as Zarr (+ a label array), Parquet and CSV, in ``folder``."""
    frame = _table()
    zarr.open_array(str(folder / "x.zarr"), mode="w", shape=(N, 3), chunks=(N, 3))[:] = frame[
        FEATURES
    ].to_numpy()
    labels = zarr.open_array(str(folder / "labels.zarr"), mode="w", shape=(N,), dtype="i8")
    labels[:] = frame["group"].to_numpy()
    frame.to_parquet(folder / "x.parquet")
    frame.to_csv(folder / "x.csv", index=False)
    return {
        "zarr": str(folder / "x.zarr"),
        "labels": str(folder / "labels.zarr"),
        "parquet": str(folder / "x.parquet"),
        "csv": str(folder / "x.csv"),
    }


@pytest.fixture
def seeded(monkeypatch):
    """Seeded noise in every stage (tests only): two runs on the same rows are equal."""
    monkeypatch.setattr(analysis, "analyze", functools.partial(analysis.analyze, random_state=0))
    monkeypatch.setattr(estimator, "_noise_sampler", lambda d, random_state: SeededSampler(0))


def _without(record, keys=PER_RUN):
    """``record`` without the keys that differ by construction (nested)."""
    if isinstance(record, dict):
        return {k: _without(v, keys) for k, v in record.items() if k not in keys}
    if isinstance(record, list):
        return [_without(v, keys) for v in record]
    return record


def run_both(source: str, out: Path, *flags: str, labels: list[str]) -> tuple[dict, dict]:
    """``analyze`` (with groups) and ``fit`` of ``source``: their result files."""
    common = ["-k", "2", "--scheduler", "synchronous", "--no-progress", *flags]
    domain = ["--group-domain", "0,1"]
    assert main(["analyze", source, *common, *labels, *domain, "--output", f"{out}-a.json"]) == 0
    assert main(["fit", source, *common, "--output", f"{out}-f.json"]) == 0
    return (
        json.loads(Path(f"{out}-a.json").read_text()),
        json.loads(Path(f"{out}-f.json").read_text()),
    )


def assert_same_release(table: tuple[dict, dict], store: tuple[dict, dict]) -> None:
    """The same records: the same design, n, statistics and noise, bit for bit."""
    (analysed, fitted), (analysed_zarr, fitted_zarr) = table, store
    assert analysed["meta"]["feature_names"] == FEATURES == fitted["feature_names"]
    assert analysed_zarr["meta"]["feature_names"] is None is fitted_zarr["feature_names"]
    assert fitted["privacy"]["design"] == fitted_zarr["privacy"]["design"]
    assert fitted["privacy"]["n_samples"] == N == analysed["meta"]["n_samples"]
    names = {"feature_names", "input", *PER_RUN}
    named = dict(analysed)
    for j, name in enumerate(FEATURES):  # notices name columns: the store's are x0, x1, ...
        named["notices"] = [n.replace(repr(name), repr(f"x{j}")) for n in named["notices"]]
    assert _without(named, names) == _without(analysed_zarr, names)
    assert _without(fitted, names) == _without(fitted_zarr, names)
    assert analysed["score_map"]["groups"] == ["0", "1", "other"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_table_gives_the_release_of_the_same_records_in_zarr(tmp_path, seeded, kind):
    inputs = write_inputs(tmp_path)
    store = run_both(inputs["zarr"], tmp_path / "zarr", labels=["--groups", inputs["labels"]])
    table = run_both(
        inputs[kind],
        tmp_path / kind,
        "--columns",
        ",".join(FEATURES),
        labels=["--groups", "group"],
    )
    assert_same_release(table, store)
    assert table[1]["input"]["type"] == {"parquet": "Parquet table", "csv": "CSV table"}[kind]
    assert table[1]["input"]["location"] == inputs[kind]


@pytest.mark.parametrize("kind", ["parquet", "csv"])
@pytest.mark.parametrize("command", ["fit", "analyze"])
def test_a_text_column_is_refused_by_name_before_anything_runs(tmp_path, capsys, kind, command):
    inputs = write_inputs(tmp_path)
    code = main([command, inputs[kind], "--columns", "a,city,b", "--output", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE and not out  # no split table, no cluster started
    assert err.count("\n") == 1 and "not numeric" in err and "'city'" in err
    assert "'a'" not in err and "--columns a,b,c" in err  # the CLI's spelling
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["STORE", "--columns", "a,b"], "--columns: chooses the features of a Parquet or CSV"),
        (["CSV", "--component", "X"], "--component"),
        (["CSV", "--columns", "a,zz"], "['zz'] not in"),
        (["CSV", "--columns", "a,group", "--groups", "group"], "cannot also be a feature"),
        (["CSV", "--groups", "nolabels", "--group-domain", "0"], "['nolabels'] not in"),
        (["CSV", "--storage-option", "anon=true"], "--storage-option"),
    ],
)
def test_table_flags_are_checked_in_one_line(tmp_path, capsys, args, needle):
    inputs = write_inputs(tmp_path)
    args = [{"STORE": inputs["zarr"], "CSV": inputs["csv"]}.get(a, a) for a in args]
    extra = ["--group-domain", "0"] if "--groups" in args and "--group-domain" not in args else []
    code = main(["analyze", *args, *extra, "--output", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE and not out and err.count("\n") == 1, err
    assert needle in err


# -- object storage ------------------------------------------------------------------
# The suite's loopback S3 server (moto's server mode on 127.0.0.1, IAM authentication on):
# the fixture tests/system/test_object_storage.py starts, shared rather than copied.
from tests.system.test_object_storage import BUCKET, s3  # noqa: E402, F401


@pytest.mark.slow
def test_tables_on_s3_give_the_release_of_the_local_zarr_store(tmp_path, seeded, s3):  # noqa: F811
    inputs = write_inputs(tmp_path)
    for kind in ("parquet", "csv"):
        s3["fs"].put(inputs[kind], f"{BUCKET}/tables/x.{kind}")
    options = tmp_path / "options.json"
    options.write_text(json.dumps(s3["options"]))
    store = run_both(inputs["zarr"], tmp_path / "zarr", labels=["--groups", inputs["labels"]])
    for kind in ("parquet", "csv"):
        url = f"s3://{BUCKET}/tables/x.{kind}"
        table = run_both(
            url,
            tmp_path / kind,
            "--columns",
            ",".join(FEATURES),
            "--storage-options-json",
            str(options),
            labels=["--groups", "group"],
        )
        assert_same_release(table, store)
        assert table[1]["input"]["location"] == url
        for record in table:  # the secret travels in the graph, never into a result
            assert s3["secret"] not in json.dumps(record)
