"""Bad parameters and inputs: the table of docs/robustness.md, kept true.

``test_error_table_api`` and ``test_error_table_cli`` parse the markdown table
(``case | input | outcome | message contains | CLI``) and run every row: through
``DPPCA(**params).fit(X, component=...)`` and, where the CLI column gives an exit code,
through ``dask_dppca.cli.main`` with the array written to a Zarr store.  The table is
the authoritative list; tests/estimator/test_estimator.py keeps a few historical cases.
"""

from __future__ import annotations

import ast
import json
import math
import socket
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import dask.array as da
import dask.dataframe as ddf
import numpy as np
import pytest
import scipy.sparse
import xarray as xr
import zarr

import dask_dppca as dd
from dask_dppca.cli import main
from dask_dppca.compute import cluster
from dask_dppca.kernel.spatial_sign import custom
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

DOC = Path(__file__).resolve().parents[2] / "docs" / "robustness.md"
SECTION = "## Bad parameters and inputs"
COLUMNS = ["case", "input", "outcome", "message contains", "CLI"]
CONNECT_TIMEOUT = 1  # seconds, for the unanswered-address rows
HANG_LIMIT = 12  # seconds for a fresh interpreter to import, time out twice and report
#: Rows whose fix is pending elsewhere, by test: strict xfails (none at present).
PENDING: dict[str, set[str]] = {"api": set(), "cli": set()}
#: Rows run in a subprocess with a hard timeout, because the bug they check is a hang.
MAY_HANG = {"scheduler-silent"}
CLI_FLAGS = {
    "epsilon": "--epsilon",
    "delta": "--delta",
    "n_components": "-k",
    "spatial_sign": "--spatial-sign",
    "radius": "--radius",
    "calibration": "--calibration",
    "design": "--design",
    "scheduler": "--scheduler",
    "component": "--component",
    "allow_fill_values": "--allow-fill-values",
}
#: Keyword arguments of ``fit`` (the others go to ``DPPCA(...)``).
FIT_KEYWORDS = ("component", "storage_options", "allow_fill_values")


def parse_table(text: str | None = None) -> list[dict]:
    """Rows of the first table after SECTION, as dicts keyed by COLUMNS."""
    text = DOC.read_text() if text is None else text
    body = text.split(SECTION, 1)[1]
    lines = [line.strip() for line in body.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("| case |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    assert header == COLUMNS, header
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in _split_cells(line)]
        assert len(cells) == len(COLUMNS), line
        rows.append(dict(zip(COLUMNS, cells)))
    return rows


def _split_cells(line: str) -> list[str]:
    """Split a table row on the pipes that are not inside backticks."""
    cells, current, in_code = [], "", False
    for char in line.strip()[1:-1]:
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current)
            current = ""
        else:
            current += char
    cells.append(current)
    return cells


ROWS = parse_table()
BY_CASE = {row["case"]: row for row in ROWS}


def _needles(row) -> list[str]:
    return [needle.strip() for needle in row["message contains"].split(",") if needle.strip()]


def _silent_address() -> str:
    """A TCP port that accepts connections (kernel backlog) and never says anything."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    _SILENT.append(server)  # kept open for the test session
    return f"tcp://127.0.0.1:{server.getsockname()[1]}"


_SILENT: list[socket.socket] = []


def _data_files(root: Path, x: np.ndarray) -> None:
    array = zarr.open_array(
        str(root / "array.zarr"), mode="w", shape=x.shape, chunks=(20, 2), dtype="f8"
    )
    array[:] = x
    group = zarr.open_group(str(root / "group.zarr"), mode="w")
    group.create_array("records", shape=x.shape, chunks=(30, 4), dtype="f8")[:] = x
    group.create_array("other", shape=(3,), dtype="f8")[:] = 1.0
    group.create_group("sub").create_array("records", shape=x.shape, chunks=(30, 4), dtype="f8")[
        :
    ] = x
    holes = zarr.open_array(
        str(root / "holes.zarr"), mode="w", shape=x.shape, chunks=(20, 4), dtype="f8"
    )
    holes[:40] = x[:40]  # the last chunk was never written
    corrupt = zarr.create_array(
        str(root / "corrupt.zarr"),
        shape=x.shape,
        chunks=(20, 4),
        dtype="f8",
        compressors=zarr.codecs.ZstdCodec(),
        overwrite=True,
    )
    corrupt[:] = x
    (root / "corrupt.zarr" / "c" / "1" / "0").write_bytes(b"not zstd" * 8)  # damaged
    (root / "not-zarr.txt").write_text("not a store\n")


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((60, 4))  # test data only


def evaluate_input(source: str, root: Path) -> dict:
    """The row's ``input`` cell as keyword arguments (may raise: custom() validates)."""
    namespace = {
        "np": np,
        "da": da,
        "sparse": scipy.sparse,
        "nan": math.nan,
        "inf": math.inf,
        "custom": custom,
        "x": _x(),
        "xr": xr,
        "frame": lambda a: ddf.from_array(a, chunksize=20),
        "path": lambda name: str(root / name),
        "silent_address": _silent_address,
    }
    # Only a call of dict(...) with keyword arguments is accepted from the document.
    tree = ast.parse(f"dict({source.strip('`')})", mode="eval")
    assert isinstance(tree.body, ast.Call) and not tree.body.args, source
    return eval(compile(tree, "<robustness.md>", "eval"), namespace)


def _fit(kwargs: dict):
    kwargs = dict(kwargs)
    data = kwargs.pop("X", _x())
    fit_kwargs = {name: kwargs.pop(name) for name in FIT_KEYWORDS if name in kwargs}
    kwargs.setdefault("scheduler", "synchronous")
    kwargs.setdefault("random_state", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(**kwargs).fit(data, **fit_kwargs)


def run_api(row: dict, root: Path) -> tuple[str, str]:
    """(outcome, message): 'fits' or the exception type name, and its text."""
    try:
        est = _fit(evaluate_input(row["input"], root))
    except Exception as error:
        return type(error).__name__, str(error)
    assert np.all(np.isfinite(est.components_)) and np.all(np.isfinite(est.eigenvalues_))
    return "fits", ""


def _store_for(data, root: Path, case: str) -> str:
    if isinstance(data, str):
        return data
    array = np.asarray(data)
    store = zarr.open_array(
        str(root / f"{case}.zarr"),
        mode="w",
        shape=array.shape,
        dtype=array.dtype if array.dtype.kind != "U" else str,
    )
    if array.size:
        store[...] = array
    return str(root / f"{case}.zarr")


def cli_args(row: dict, root: Path) -> list[str]:
    kwargs = evaluate_input(row["input"], root)
    args = ["fit", _store_for(kwargs.pop("X", _x()), root, row["case"])]
    for name, value in kwargs.items():
        args += [CLI_FLAGS[name]] if value is True else [CLI_FLAGS[name], str(value)]
    if "scheduler" not in kwargs:
        args += ["--scheduler", "synchronous"]
    return args + ["--no-progress", "--output", str(root / "result.json")]


def run_cli(row: dict, root: Path, capsys) -> tuple[int, str]:
    args = cli_args(row, root)
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as stop:  # argparse refuses before main's handlers
        code = stop.code
    return code, capsys.readouterr().err


def _run_in_subprocess(case: str, root: Path, which: str):
    """Run one row in a fresh interpreter with a hard timeout (the bug may be a hang)."""
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from dask_dppca.compute import cluster
        cluster.CONNECT_TIMEOUT = {CONNECT_TIMEOUT}
        from tests.estimator import test_parameters as t
        row, root = t.BY_CASE[{case!r}], Path({str(root)!r})
        t._data_files(root, t._x())
        if {which!r} == "api":
            print(json.dumps(t.run_api(row, root)))
        else:
            import io, contextlib
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    code = t.main(t.cli_args(row, root))
                except SystemExit as stop:
                    code = stop.code
            print(json.dumps([code, err.getvalue()]))
    """)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_LIMIT
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: still running after {HANG_LIMIT} s: it hangs")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", CONNECT_TIMEOUT)
    _data_files(tmp_path, _x())
    return tmp_path


def _marks(which):
    return {
        case: pytest.mark.xfail(strict=True, reason="needs the patch in the report")
        for case in PENDING[which]
    }


def _params(which, only_cli=False):
    marks = _marks(which)
    return [
        pytest.param(
            row["case"],
            id=row["case"],
            marks=([marks[row["case"]]] if row["case"] in marks else [])
            # A case that may hang runs in its own interpreter: out of the fast lane.
            + ([pytest.mark.slow] if row["case"] in MAY_HANG else []),
        )
        for row in ROWS
        if not only_cli or row["CLI"] != "-"
    ]


def test_table_is_well_formed():
    assert len(ROWS) >= 40
    assert len(BY_CASE) == len(ROWS), "duplicate case names"
    for row in ROWS:
        assert row["outcome"] in {
            "ValueError",
            "TypeError",
            "MissingChunkError",
            "CorruptChunkError",
            "fits",
        }, row
        assert row["CLI"] in {"-", "0", "2", "3"}, row
        assert (row["outcome"] == "fits") == (row["CLI"] in {"0", "-"} and not _needles(row)), row
        if row["outcome"] != "fits":
            assert row["CLI"] in {"-", "2"}, row
    for required in [
        "epsilon-zero",
        "epsilon-nan",
        "delta-zero",
        "delta-one",
        "n_components-zero",
        "n_components-above-d",
        "radius-zero",
        "spatial-sign-unknown",
        "custom-xi-unbounded",
        "X-1-D",
        "X-3-D",
        "X-no-columns",
        "X-one-record",
        "X-strings",
        "zarr-missing",
        "zarr-group-wrong-name",
        "columns-chunked",
        "scheduler-refused",
        "scheduler-silent",
    ]:
        assert required in BY_CASE, required


@pytest.mark.parametrize("case", _params("api"))
def test_error_table_api(case, root):
    row = BY_CASE[case]
    if case in MAY_HANG:
        outcome, message = _run_in_subprocess(case, root, "api")
    else:
        outcome, message = run_api(row, root)
    assert outcome == row["outcome"], f"{case}: {outcome}: {message}"
    for needle in _needles(row):
        assert needle in message, f"{case}: {needle!r} not in {message!r}"
    assert "\n" not in message


@pytest.mark.slow
@pytest.mark.parametrize("case", _params("cli", only_cli=True))
def test_error_table_cli(case, root, capsys):
    row = BY_CASE[case]
    if case in MAY_HANG:
        code, stderr = _run_in_subprocess(case, root, "cli")
    else:
        code, stderr = run_cli(row, root, capsys)
    assert code == int(row["CLI"]), f"{case}: exit {code}: {stderr}"
    if code == 0:
        assert json.loads((root / "result.json").read_text())["components"]
        return
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"{case}: {len(lines)} lines on stderr:\n{stderr}"
    message = lines[0]
    assert message.startswith("dask-dppca"), message
    # argparse names the flag (--epsilon, --spatial-sign, -k) where the API names the
    # parameter (epsilon, spatial_sign, n_components)
    for needle in _needles(row):
        flag = needle.replace("n_components", "-k").replace("_", "-")
        assert needle in message or flag in message, f"{case}: {needle!r} not in {message!r}"


def test_parser_reads_pipes_inside_code_and_rejects_a_bad_header():
    text = (
        f"{SECTION}\n\n| case | input | outcome | message contains | CLI |\n|---|---|---|---|---|\n"
        "| a | `X=np.array([1 | 2])` | ValueError | X | - |\n\nafter\n"
    )
    (row,) = parse_table(text)
    assert row["input"] == "`X=np.array([1 | 2])`" and row["CLI"] == "-"
    with pytest.raises(AssertionError):
        parse_table(text.replace("| CLI |", "| exit |"))


def test_validation_happens_before_any_data_is_read(root):
    """A bad parameter is refused even when reading X would fail: nothing is computed."""
    poisoned = da.from_delayed(_explode(), shape=(60, 4), dtype=float)
    with pytest.raises(ValueError, match="epsilon"):
        _fit({"X": poisoned, "epsilon": -1})


def _explode():
    import dask

    @dask.delayed
    def read():
        raise AssertionError("data was read before the parameters were validated")

    return read()


def test_columns_chunked_input_gives_the_same_release_as_one_chunk():
    x = _x()
    whole = _fit({"X": x})
    split = _fit({"X": da.from_array(x, chunks=(60, 1))})
    np.testing.assert_allclose(split.eigenvalues_, whole.eigenvalues_, rtol=1e-10, atol=1e-12)
