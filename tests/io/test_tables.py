"""Parquet and CSV tables: which paths are tables, their columns checked by name, read
lazily and exactly.  Seeds make TEST DATA only.
"""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.io import open_records
from dask_dppca.io.records import records_of_table
from dask_dppca.io.tables import FORMATS_READ, open_table, parse_columns, table_format
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

N, D = 240, 3


@pytest.fixture
def frame():
    """Numeric columns a, b, c, a text column and integer group labels (test data)."""
    rng = np.random.default_rng(7)
    table = pd.DataFrame(rng.standard_normal((N, D)) * [1.0, 1e-7, 3e5], columns=["a", "b", "c"])
    table["city"] = np.where(np.arange(N) % 2 == 0, "Lyon", "Oslo")
    table["g"] = np.arange(N) % 3
    return table


def _write(frame, folder, kind):
    path = folder / f"t.{kind}"
    if kind == "parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "location, kind",
    [
        ("x.parquet", "parquet"),
        ("data/X.PQ", "parquet"),
        ("s3://bucket/folder.parquet/", "parquet"),
        ("simplecache::s3://b/part-*.parquet", "parquet"),
        ("x.csv", "csv"),
        ("x.csv.gz", "csv"),
        ("gs://b/x.csv.zst", "csv"),
        ("x.zarr", None),
        ("x.csv.zarr", None),
        ("table", None),
        (3, None),
    ],
)
def test_a_table_is_known_by_its_name(location, kind):
    assert table_format(location) == kind


def test_columns_are_parsed_and_an_empty_choice_refused():
    assert parse_columns(" a, b ,c,") == ["a", "b", "c"] and parse_columns(None) is None
    with pytest.raises(ValueError, match="--columns"):
        parse_columns(" , ")


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_table_gives_its_chosen_columns_exactly_and_lazily(tmp_path, frame, kind):
    table = open_table(_write(frame, tmp_path, kind), ["c", "a"], label_column="g")
    assert table.feature_names == ("c", "a") and table.kind == kind
    records = records_of_table(table)
    assert records.frame is not None and records.shape[0] != records.shape[0]  # n not counted
    with dask.config.set(scheduler="synchronous"):
        rows = records.frame.to_dask_array(lengths=True).compute()
        labels = table.labels.compute()
    # Bit for bit the values written (CSV fields parsed as Python parses them).
    np.testing.assert_array_equal(rows, frame[["c", "a"]].to_numpy())
    assert rows.dtype == np.float64
    assert [str(v) for v in labels] == [str(v) for v in frame["g"]]


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_text_column_among_the_features_is_refused_by_name(tmp_path, frame, kind):
    path = _write(frame, tmp_path, kind)
    with pytest.raises(ValueError, match=r"not numeric .*'city'") as raised:
        open_table(path, ["a", "city"])
    assert "'a'" not in str(raised.value).split("not numeric")[1]  # only the text column
    with pytest.raises(ValueError, match="'city'"):  # every column by default: refused too
        open_records(path)


@pytest.mark.parametrize(
    "columns, label, needle",
    [
        (["a", "nope"], None, r"\['nope'\] not in"),
        (["a"], "nolabel", r"\['nolabel'\] not in"),
        (["a", "g"], "g", "cannot also be a feature"),
        (["a", "a"], None, "more than once"),
    ],
)
def test_column_choices_are_checked_by_name(tmp_path, frame, columns, label, needle):
    with pytest.raises(ValueError, match=needle):
        open_table(_write(frame, tmp_path, "parquet"), columns, label_column=label)


def test_missing_tables_and_other_files_name_the_formats_read(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        open_table(tmp_path / "none.csv")
    (tmp_path / "notes.txt").write_text("hello\n")
    for path in (tmp_path / "notes.txt", tmp_path / "none"):
        with pytest.raises(ValueError) as raised:
            open_records(str(path))
        assert FORMATS_READ in str(raised.value)
    with pytest.raises(ValueError, match="component"):
        open_records(str(tmp_path / "none.csv"), component="X")


def test_a_missing_csv_field_is_a_non_finite_record_counted_in_n(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1.5,2\n,3\n4,nan\n5,6\n")
    records = open_records(tmp_path / "t.csv")
    with dask.config.set(scheduler="synchronous"):
        rows = records.frame.to_dask_array(lengths=True).compute()
    assert rows.shape == (4, 2) and np.isnan(rows[1, 0]) and np.isnan(rows[2, 1])


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_fit_on_a_table_records_its_feature_names_and_equals_the_zarr_fit(tmp_path, frame, kind):
    """Same rows, same seeded noise (tests only): the same release; names saved."""
    zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=(N, D), chunks=(N, D))[:] = frame[
        ["a", "b", "c"]
    ].to_numpy()
    path = _write(frame.drop(columns=["city", "g"]), tmp_path, kind)
    with pytest.warns(NonPrivateRandomStateWarning):
        from_table = dd.DPPCA(n_components=2, random_state=1, scheduler="synchronous").fit(path)
        from_zarr = dd.DPPCA(n_components=2, random_state=1, scheduler="synchronous").fit(
            str(tmp_path / "x.zarr")
        )
    np.testing.assert_array_equal(from_table.components_, from_zarr.components_)
    assert list(from_table.feature_names_in_) == ["a", "b", "c"]
    assert not hasattr(from_zarr, "feature_names_in_")
    shown = {"parquet": "Parquet table", "csv": "CSV table"}[kind]
    assert from_table.provenance_["input"]["type"] == shown
    assert from_table.provenance_["input"]["location"] == str(path)
    from_table.save(tmp_path / "r.json")
    assert list(dd.load_result(tmp_path / "r.json").feature_names_in_) == ["a", "b", "c"]
    # A refit on a store forgets the table's names.
    with pytest.warns(NonPrivateRandomStateWarning):
        from_table.fit(str(tmp_path / "x.zarr"))
    assert not hasattr(from_table, "feature_names_in_")


def test_an_analysis_of_a_table_path_records_its_feature_names(tmp_path, frame):
    """A table's path where a store's goes (the app, ``dd.analyze``): all its columns."""
    path = _write(frame.drop(columns=["city", "g"]), tmp_path, "parquet")
    with pytest.warns(NonPrivateRandomStateWarning):
        result = dd.analyze(str(path), 2, score_map=False, scheduler="synchronous", random_state=0)
    assert result.meta["feature_names"] == ["a", "b", "c"]
    assert result.meta["dataset"] == str(path) and result.meta["n_samples"] == N


# -- empty tables, and the rows counted for a plan ---------------------------------------


def test_an_empty_csv_and_a_header_only_csv_say_so(tmp_path, frame):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(
        ValueError, match=r"^X: '.*empty\.csv' is empty: a CSV table needs a header"
    ):
        open_table(empty)
    header = tmp_path / "header.csv"
    frame.iloc[:0].to_csv(header, index=False)
    with pytest.raises(ValueError, match=r"^X: '.*header\.csv' has no rows \(a header line only\)"):
        open_table(header, ["a", "b"])
    text = tmp_path / "text.csv"  # rows, and a text column: still the column's message
    frame.to_csv(text, index=False)
    with pytest.raises(ValueError, match="not numeric .*'city'"):
        open_table(text, ["a", "city"])


def _many_files(folder, frame, files=12):
    """A Parquet folder of ``files`` small files (row groups of 50): dask fuses them."""
    folder.mkdir()
    rows = np.array_split(np.arange(len(frame)), files)
    for i, index in enumerate(rows):
        frame.iloc[index].to_parquet(folder / f"part{i:02d}.parquet", row_group_size=50)
    return folder


class _Here:
    """A compute target of this process (synchronous), as a fit's counting uses one."""

    def compute(self, collections, label):
        return dask.compute(*collections, scheduler="synchronous")


@pytest.mark.parametrize("columns", [["a"], ["a", "b", "c"], None])
def test_a_parquet_folder_s_rows_are_counted_as_dask_fuses_its_files(tmp_path, frame, columns):
    """The counts in dask's partitions (fewer than the files when few columns are read:
    small files fused) equal the counts a fit makes on its cluster."""
    from dask_dppca.io.labelled import frame_rows
    from dask_dppca.io.tables import table_row_counts

    numeric = frame.drop(columns="city")
    table = open_table(_many_files(tmp_path / "many.parquet", numeric), columns, "g")
    lengths = table_row_counts(table)
    assert sum(lengths) == N
    assert frame_rows(table.frame, _Here()).chunks[0] == lengths  # what a fit counts
    if columns == ["a"]:
        assert len(lengths) < 12  # fused: the case that must be grouped
    counted = records_of_table(table, counted=True)
    assert counted.shape == (N, len(table.feature_names)) and counted.row_chunks == lengths
    assert counted.frame is None and counted.input_type == "Parquet table"


def test_a_csv_s_rows_are_counted_in_one_pass(tmp_path, frame):
    from dask_dppca.io.tables import table_row_counts

    path = _write(frame, tmp_path, "csv")
    table = open_table(path, ["a", "c"], "g")
    assert table_row_counts(table) == (N,)
    counted = records_of_table(table, counted=True)
    assert counted.shape == (N, 2) and counted.input_type == "CSV table"
    assert np.array_equal(counted.array.compute(), frame[["a", "c"]].to_numpy())
