"""Storage options, missing backends, and result files on any fsspec URL.

The S3 end-to-end tests (a real server, worker processes without credentials) are in
tests/system/test_object_storage.py; these cover the pieces on the client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import fsspec
import numpy as np
import pytest
import zarr

from dask_dppca.cli import EXIT_USAGE, main
from dask_dppca.cli.fit import storage_options
from dask_dppca.compute import cluster
from dask_dppca.io import check_writable, write_json
from dask_dppca.io.storage import describe_error, display_location

SECRET = "s3cr3t-VALUE-never-shown"


def test_storage_option_entries_nest_and_override_the_json_file(tmp_path):
    options_file = tmp_path / "options.json"
    options_file.write_text(
        json.dumps({"key": "id", "secret": "old", "client_kwargs": {"region_name": "eu-west-1"}})
    )
    options = storage_options(
        str(options_file),
        [
            f"secret={SECRET}",
            "client_kwargs.endpoint_url=http://127.0.0.1:9000",
            "anon=false",
            "config_kwargs.retries.max_attempts=2",
            'token="123"',
        ],
    )
    assert options == {
        "key": "id",
        "secret": SECRET,
        "anon": False,
        "token": "123",
        "client_kwargs": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000"},
        "config_kwargs": {"retries": {"max_attempts": 2}},
    }


@pytest.mark.parametrize(
    "entries, file_text, needle",
    [
        ([SECRET], None, "KEY=VALUE"),
        ([f"={SECRET}"], None, "non-empty KEY"),
        ([f"a..b={SECRET}"], None, "non-empty KEY"),
        ([f"key={SECRET}", f"key.inner={SECRET}"], None, "'key' is already set"),
        ([], f'["{SECRET}"]', "JSON object"),
        ([], f'{{"secret": "{SECRET}"', "cannot read"),
    ],
)
def test_bad_storage_options_are_named_without_their_values(tmp_path, entries, file_text, needle):
    json_file = None
    if file_text is not None:
        json_file = tmp_path / "options.json"
        json_file.write_text(file_text)
    with pytest.raises(ValueError) as error:
        storage_options(json_file and str(json_file), entries)
    assert needle in str(error.value) and SECRET not in str(error.value)


def test_messages_mask_secrets_and_url_passwords():
    error = PermissionError(f"denied for secret {SECRET}\nsecond line")
    text = describe_error(error, {"client_kwargs": {"aws_secret_access_key": SECRET}})
    assert text == "PermissionError: denied for secret ***"
    assert display_location("s3://user:pw@bucket/x.zarr") == "s3://***@bucket/x.zarr"
    assert display_location("simplecache::s3://bucket/x") == "simplecache::s3://bucket/x"


@pytest.mark.parametrize(
    "url, extra",
    [
        ("s3://bucket/x.zarr", "s3"),
        ("simplecache::s3://bucket/x.zarr", "s3"),
        ("s3://bucket/table.parquet", "s3"),  # a table: dask's read, not Zarr's
        ("gs://bucket/table.csv", "gcs"),
    ],
)
@pytest.mark.slow
def test_a_missing_backend_names_the_extra(url, extra, tmp_path):
    """s3fs hidden from a fresh interpreter: the API and the CLI name dask-dppca[s3]."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["s3fs"] = None          # as if s3fs were not installed
        sys.modules["gcsfs"] = None         # nor gcsfs
        from dask_dppca.cli import main
        from dask_dppca.io import open_records
        try:
            open_records({url!r})
        except ValueError as error:
            print("API:", error)
        sys.exit(main(["fit", {url!r}, "--scheduler", "synchronous",
                       "--output", {str(tmp_path / "r.json")!r}]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    install = f"pip install 'dask-dppca[{extra}]'"
    assert install in done.stdout
    assert done.stderr.count("\n") == 1 and install in done.stderr, done.stderr
    assert not (tmp_path / "r.json").exists()


def test_results_to_an_fsspec_url():
    url = "memory://results/run-1/result.json"
    check_writable(url)
    assert not fsspec.filesystem("memory").find("/results")  # the probe is gone
    write_json(url, {"sigma": np.float64(0.5), "components": np.eye(2)})
    with fsspec.open(url, "r") as stream:
        assert json.load(stream) == {"sigma": 0.5, "components": [[1.0, 0.0], [0.0, 1.0]]}


def test_local_results_are_written_whole_and_replaced_only_when_asked(tmp_path):
    target = tmp_path / "result.json"
    check_writable(target)
    assert not target.exists()  # the check creates nothing
    assert write_json(target, {"a": 1}) == str(target)
    with pytest.raises(ValueError, match="exists; pass overwrite=True"):
        check_writable(target)
    check_writable(target, overwrite=True)
    write_json(f"file://{target}", {"a": 2}, overwrite=True)
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


@pytest.mark.parametrize(
    "where, needle", [("folder", "a folder is in the way"), ("under-a-file", "is not a folder")]
)
def test_unwritable_local_results_are_refused(tmp_path, where, needle):
    (tmp_path / "file.txt").write_text("x")
    target = tmp_path if where == "folder" else tmp_path / "file.txt" / "result.json"
    with pytest.raises(ValueError) as error:
        check_writable(target, name="--output")
    assert str(error.value).startswith(f"--output: cannot write {str(target)!r}")
    assert needle in str(error.value)


def test_cli_refuses_the_output_before_reading_data_or_starting_a_cluster(tmp_path, capsys):
    """A store whose chunks are gone would fail when read: the output error comes first,
    and the default compute target (the embedded cluster) is never started."""
    z = zarr.open_array(
        str(tmp_path / "x.zarr"), mode="w", shape=(300, 3), chunks=(100, 3), dtype="f8"
    )  # metadata only: reading any chunk would fail
    (tmp_path / "file.txt").write_text("x")
    cluster.close_embedded_cluster()
    code = main(
        [
            "fit",
            str(tmp_path / "x.zarr"),
            "--no-progress",
            "--output",
            str(tmp_path / "file.txt" / "result.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith("dask-dppca: error: --output: cannot write") and err.count("\n") == 1
    assert str(tmp_path / "file.txt" / "result.json") in err
    assert "client" not in cluster._embedded
    assert z.nchunks_initialized == 0


def test_cli_storage_options_need_a_url(tmp_path, capsys):
    code = main(
        [
            "fit",
            str(tmp_path / "x.zarr"),
            "--storage-option",
            f"secret={SECRET}",
            "--output",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "neither STORE nor --output is one" in err and SECRET not in err


@pytest.mark.parametrize(
    "url, shown",
    [
        (
            "https://acct.blob.core.windows.net/c/x.zarr?sv=2024-05&se=2030&sig=SIGVALUE",
            "https://acct.blob.core.windows.net/c/x.zarr?sv=***&se=***&sig=***",
        ),
        (
            "https://b.s3.amazonaws.com/x.zarr?X-Amz-Credential=AKIA&X-Amz-Signature=abc123",
            "https://b.s3.amazonaws.com/x.zarr?X-Amz-Credential=***&X-Amz-Signature=***",
        ),
        ("simplecache::https://h/x.zarr?token=TOK", "simplecache::https://h/x.zarr?token=***"),
        ("https://u:pw@h/x.zarr?sig=S#frag", "https://***@h/x.zarr?sig=***#***"),
        ("https://h/x.zarr?opaqueSAS", "https://h/x.zarr?***"),
        ("s3://bucket/x.zarr", "s3://bucket/x.zarr"),
        ("/local/path?not-a-query", "/local/path?not-a-query"),
    ],
)
def test_url_query_strings_are_masked_where_a_location_is_shown(url, shown):
    assert display_location(url) == shown
    # ... and inside any message that quotes the URL (a backend's error text).
    assert (
        describe_error(OSError(f"cannot open {url}: 403")) == f"OSError: cannot open {shown}: 403"
    )


def test_a_presigned_url_reaches_neither_errors_nor_the_ledger(tmp_path):
    """The signature of a URL input is masked in the errors about it and in the ledger's
    dataset column (an in-memory fsspec store stands for the presigned URL)."""
    import sqlite3
    import warnings

    import dask_dppca as dd
    from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

    signature = "SeCrEt-sig-Value"
    url = f"memory://presigned/data.zarr?sv=2024&sig={signature}"
    z = zarr.open_array(url, mode="w", shape=(40, 3), chunks=(20, 3), dtype="f8")
    z[:] = np.random.default_rng(0).standard_normal((40, 3))  # test data only
    ledger = tmp_path / "study.ledger"
    budget = dd.PrivacyBudget(epsilon=2, delta=1e-5, ledger=str(ledger), create=True)
    with budget, warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        est = dd.DPPCA(scheduler="synchronous", random_state=0).fit(url)
    with sqlite3.connect(ledger) as db:
        rows = db.execute("select * from releases").fetchall()
    assert len(rows) == 1 and signature not in repr(rows)
    assert "memory://presigned/data.zarr?sv=***&sig=***" in repr(rows)
    assert signature not in budget.describe() and signature not in json.dumps(est.privacy_)
    with pytest.raises(ValueError) as error:
        dd.DPPCA(scheduler="synchronous").fit(f"memory://presigned/none.zarr?sig={signature}")
    assert signature not in str(error.value) and "sig=***" in str(error.value)
