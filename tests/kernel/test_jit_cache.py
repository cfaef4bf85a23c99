"""numba's cache stays out of the package, works when numba was imported first, and a
second process loads the kernel from it instead of compiling again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

import dask_dppca

PACKAGE = Path(dask_dppca.__file__).parent

# numba imported (and configured) before dask_dppca, as in a user's session.
_RUN_KERNEL = """
import json, numba, numpy as np
from dask_dppca.kernel import block_pair_sum, tiles
from dask_dppca.kernel.pair_sum import compiled_on_this_machine
before = compiled_on_this_machine()
block_pair_sum(np.arange(60.0).reshape(20, 3) ** 1.5)
stats = tiles._unit_sphere_weights.stats  # the pass clean rows on the sphere take
print(json.dumps({"path": stats.cache_path, "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values()), "before": before,
                  "after": compiled_on_this_machine()}))
"""


def _run_kernel(env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    done = subprocess.run(
        [sys.executable, "-c", _RUN_KERNEL],
        capture_output=True,
        text=True,
        env={**env, **env_changes},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _numba_files_beside_the_package(since):
    return [
        p for p in PACKAGE.rglob("*") if p.suffix in (".nbi", ".nbc") and p.stat().st_mtime >= since
    ]


@pytest.mark.slow
def test_the_cache_lives_in_the_user_cache_and_a_second_process_loads_it(tmp_path):
    started = time.time() - 1
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = _run_kernel(env)
    second = _run_kernel(env)
    expected = tmp_path / "cache" / "dask-dppca" / "numba"
    assert Path(first["path"]).is_relative_to(expected)
    assert list(expected.rglob("*.nbi")) and list(expected.rglob("*.nbc"))
    assert first["misses"] >= 1 and first["hits"] == 0  # compiled and saved
    assert second["hits"] >= 1 and second["misses"] == 0  # loaded, not compiled
    # what the command line's first-run line is said on: an empty cache, then a warm one
    assert (first["before"], first["after"], second["before"]) == (False, True, True)
    assert not _numba_files_beside_the_package(started)


@pytest.mark.slow
def test_numba_cache_dir_of_the_user_is_honoured(tmp_path):
    chosen = tmp_path / "numba-cache"
    result = _run_kernel(
        {"NUMBA_CACHE_DIR": str(chosen), "XDG_CACHE_HOME": str(tmp_path / "unused")}
    )
    assert Path(result["path"]).is_relative_to(chosen)
    assert not (tmp_path / "unused").exists()


def test_the_users_own_numba_functions_keep_numbas_default():
    import numba

    from dask_dppca import kernel  # noqa: F401  (decorates the kernel's functions)

    assert numba.config.CACHE_DIR == os.environ.get("NUMBA_CACHE_DIR", "")


def test_the_first_run_says_it_compiles_once_and_a_refusal_never(monkeypatch, capsys, tmp_path):
    """The first compute on this machine, when numba's cache lacks the kernel, says why it
    waits, once a process, on the command line's stderr; a warm cache says nothing, and a
    command refused before any compute never says it (the issue's errors stay one line)."""
    from dask_dppca.cli import main
    from dask_dppca.compute import first_compile
    from dask_dppca.kernel import pair_sum

    store = tmp_path / "x.zarr"
    rows = np.random.default_rng().standard_normal((200, 3))  # any rows
    zarr.open_array(str(store), mode="w", shape=rows.shape, dtype="f8")[:] = rows
    fit = ["fit", str(store), "-k", "1", "--scheduler", "threads", "--no-progress"]
    for compiled, said in ((False, True), (True, False)):
        monkeypatch.setattr(pair_sum, "compiled_on_this_machine", lambda c=compiled: c)
        monkeypatch.setitem(first_compile._state, "said", False)  # a new process
        assert main([*fit, "--epsilon", "-1", "--output", str(tmp_path / "a.json")]) == 2
        refused = capsys.readouterr().err
        assert first_compile.FIRST_COMPILE not in refused and refused.count("\n") == 1, refused
        out = str(tmp_path / f"{compiled}.json")
        assert main([*fit, "--output", out]) == 0
        err = capsys.readouterr().err
        assert (first_compile.FIRST_COMPILE in err) is said, err
        assert main([*fit, "--output", out, "--force"]) == 0  # the same process: said once
        assert first_compile.FIRST_COMPILE not in capsys.readouterr().err
