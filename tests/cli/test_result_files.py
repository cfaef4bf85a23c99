"""``dask-dppca fit --output``: no file you did not ask for, and errors that name the
problem on one line.

Most runs call ``dask_dppca.cli.main`` in this process with the local ``synchronous``
scheduler (fast); where the point is the command as a user types it (a home folder,
the embedded cluster, ``/dev/stdout``) the console module runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.cli import EXIT_USAGE, main
from tests.cli import run_cli, write_store

FAST = ["--scheduler", "synchronous", "--no-progress"]


def fit(capsys, store: str, output, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["fit", store, *FAST, "--output", str(output), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- where the result goes -----------------------------------------------------------------


def test_a_missing_folder_is_refused_and_never_created(tmp_path, capsys):
    """--output /nonexistent/dir/r.json returned rc 0 and created /nonexistent/dir."""
    store = write_store(tmp_path / "x.zarr")
    target = tmp_path / "no" / "such" / "dir" / "r.json"
    code, out, err = fit(capsys, store, target)
    assert code == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and "does not exist; create it first" in err
    assert str(target.parent) in err
    assert not (tmp_path / "no").exists()


@pytest.mark.slow
def test_an_existing_result_is_never_overwritten_without_force(tmp_path, capsys):
    store = write_store(tmp_path / "x.zarr")
    target = tmp_path / "r.json"
    assert fit(capsys, store, target)[0] == 0
    first = target.read_text()
    code, _, err = fit(capsys, store, target)
    assert code == EXIT_USAGE and "exists; pass --force to replace it" in err
    assert err.count("\n") == 1 and target.read_text() == first
    code, out, _ = fit(capsys, store, target, "--force")
    assert code == 0 and target.read_text() != first  # a new release (new noise)
    assert out.startswith(f"wrote {target}: ")  # where it went, as an absolute path


def test_the_default_output_is_not_overwritten_by_the_next_fit(tmp_path, monkeypatch, capsys):
    store = write_store(tmp_path / "x.zarr")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["fit", store, *FAST]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'result.json'}: ")  # absolute: where it went
    first = (tmp_path / "result.json").read_text()
    assert main(["fit", store, *FAST]) == EXIT_USAGE
    assert "'result.json' exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "result.json").read_text() == first


def test_a_new_file_is_0600_and_a_replaced_one_keeps_its_mode(tmp_path, capsys):
    store = write_store(tmp_path / "x.zarr")
    target = tmp_path / "r.json"
    assert fit(capsys, store, target)[0] == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    target.chmod(0o644)
    assert fit(capsys, store, target, "--force")[0] == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_symlink_is_written_through_and_stays_a_symlink(tmp_path, capsys):
    """The rename replaced the link itself with a regular file."""
    store = write_store(tmp_path / "x.zarr")
    (tmp_path / "results").mkdir()
    real = tmp_path / "results" / "r.json"
    link = tmp_path / "latest.json"
    link.symlink_to(real)  # dangling: the target is made through it
    code, out, _ = fit(capsys, store, link)
    assert code == 0 and link.is_symlink() and real.is_file()
    assert out.startswith(f"wrote {real}: ")
    assert json.loads(link.read_text())["components"]
    code, _, err = fit(capsys, store, link)  # now it points at an existing file
    assert code == EXIT_USAGE and "exists; pass --force" in err
    assert fit(capsys, store, link, "--force")[0] == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert sorted(p.name for p in real.parent.iterdir()) == ["r.json"]  # no temporary left


def test_a_named_pipe_is_written_in_place(tmp_path, capsys):
    store = write_store(tmp_path / "x.zarr")
    pipe = tmp_path / "result.fifo"
    os.mkfifo(pipe)
    received = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()), daemon=True)
    reader.start()
    code, out, err = fit(capsys, store, pipe)
    reader.join(timeout=30)
    assert code == 0, err
    assert stat.S_ISFIFO(pipe.stat().st_mode)  # still the pipe, not a file put there
    assert json.loads(received[0])["format"] == "dask-dppca-result"
    assert out == "" and err.startswith(f"wrote {pipe}: ")  # the summary leaves stdout alone


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_dev_stdout_is_written_in_place_in_a_private_mount_namespace(tmp_path):
    """As root, --output /dev/stdout replaced the /dev/stdout symlink with a file.  Run in
    a mount namespace of its own with a fresh /dev, so a regression harms nothing."""
    if os.geteuid() != 0:
        pytest.skip("needs root for unshare -m")
    store = write_store(tmp_path / "x.zarr")
    script = textwrap.dedent(f"""\
        set -eu
        keep={tmp_path}/keep
        mkdir -p "$keep"
        for f in null zero urandom random; do
            touch "$keep/$f"; mount --bind /dev/$f "$keep/$f"
        done
        mount -t tmpfs tmpfs /dev
        for f in null zero urandom random; do touch /dev/$f; mount --bind "$keep/$f" /dev/$f; done
        ln -s /proc/self/fd /dev/fd
        ln -s /proc/self/fd/0 /dev/stdin
        ln -s /proc/self/fd/1 /dev/stdout
        ln -s /proc/self/fd/2 /dev/stderr
        mkdir /dev/shm && mount -t tmpfs tmpfs /dev/shm
        {sys.executable} -m dask_dppca.cli fit {store} {" ".join(FAST)} --output /dev/stdout \\
            > {tmp_path}/stdout.json 2> {tmp_path}/stderr.txt
        if [ -L /dev/stdout ]; then echo link-kept; else echo link-replaced; fi
        ls -A /dev
    """)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
    )
    stderr = (tmp_path / "stderr.txt").read_text() if (tmp_path / "stderr.txt").exists() else ""
    assert done.returncode == 0, done.stderr + stderr
    lines = done.stdout.split()
    assert lines[0] == "link-kept", done.stdout
    assert not [name for name in lines[1:] if name.startswith(".stdout")]  # no temporary
    assert json.loads((tmp_path / "stdout.json").read_text())["format"] == "dask-dppca-result"
    assert stderr.startswith("wrote /dev/stdout: ")


@pytest.mark.slow
def test_home_folders_are_expanded_for_the_store_and_the_output(tmp_path):
    """`~/x.zarr` was "does not exist" (nothing expands ~ inside one argument)."""
    write_store(tmp_path / "x.zarr")
    done = run_cli(
        "fit",
        "~/x.zarr",
        *FAST,
        "--output=~/r.json",
        env={**os.environ, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {tmp_path / 'r.json'}: ")
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["input"]["location"] == str(tmp_path / "x.zarr")
    assert dd.load_result(tmp_path / "r.json").n_samples_ == 300


# -- the result file ----------------------------------------------------------------------


def test_the_result_file_holds_provenance_and_loads_back(tmp_path, capsys):
    store = write_store(tmp_path / "x.zarr")
    target = tmp_path / "r.json"
    assert fit(capsys, store, target, "-k", "3", "--epsilon", "0.5")[0] == 0
    payload = json.loads(target.read_text())
    assert payload["format"] == "dask-dppca-result" and payload["format_version"] == 1
    assert payload["library_version"] == dd.__version__ and payload["created"]
    assert payload["input"]["location"] == store and payload["input"]["shape"] == [300, 4]
    assert payload["parameters"]["epsilon"] == 0.5 and payload["parameters"]["n_components"] == 3
    assert payload["privacy"]["signal_to_noise"] > 1 and "explained_variance_ratio" not in payload
    est = dd.load_result(target)
    x = np.asarray(zarr.open_array(store, mode="r")[:])
    assert np.array_equal(est.transform(x), x @ np.array(payload["components"]).T)


# -- one line, naming the problem ---------------------------------------------------------


@pytest.mark.cluster
def test_a_missing_chunk_on_the_default_path_is_one_line(tmp_path):
    """The embedded cluster's worker printed distributed's 7-line "Compute Failed" block
    (and CancelledError warnings as it closed) before the CLI's own line."""
    z = zarr.open_array(str(tmp_path / "h.zarr"), mode="w", shape=(600, 4), chunks=(200, 4))
    z[:400] = np.random.default_rng(0).standard_normal((400, 4))  # test data; last chunk unwritten
    done = run_cli("fit", str(tmp_path / "h.zarr"), "--output", str(tmp_path / "r.json"))
    assert done.returncode == EXIT_USAGE
    assert done.stderr.count("\n") == 1, done.stderr
    assert "chunk 'c/2/0'" in done.stderr and "pass --allow-fill-values" in done.stderr
    assert "allow_fill_values=True" not in done.stderr  # the CLI names its flag
    assert not (tmp_path / "r.json").exists()


def test_a_flat_options_file_for_a_chained_url_says_to_nest_them(tmp_path, capsys):
    options = tmp_path / "s3.json"
    options.write_text(json.dumps({"key": "AKIA", "secret": "s3cr3t-never-shown"}))
    capsys.readouterr()
    code = main(
        [
            "fit",
            "simplecache::s3://bucket/x.zarr",
            "--storage-options-json",
            str(options),
            "--output",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and err.count("\n") == 1
    assert "chained URL" in err and '"s3": {...}' in err and "s3cr3t" not in err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--epsilon", "-inf"], "epsilon: must be finite and > 0, got -inf"),
        (["--delta", "-1e-6"], "delta: must satisfy 0 < delta < 1, got -1e-06"),
        (["-k", "-2"], "n_components: must be an integer >= 1, got -2"),
        (["--radius", "-1e3", "--spatial-sign", "winsor"], "radius"),
    ],
)
@pytest.mark.slow
def test_negative_numbers_are_values_not_options(tmp_path, capsys, args, needle):
    """argparse read `--epsilon -inf` as two options: "expected one argument"."""
    store = write_store(tmp_path / "x.zarr", n=30)
    code, _, err = fit(capsys, store, tmp_path / "r.json", *args)
    assert code == EXIT_USAGE and err.count("\n") == 1
    assert needle in err and "expected one argument" not in err
