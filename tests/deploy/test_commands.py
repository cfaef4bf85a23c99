"""deploy/commands.json agrees with the code and the live cluster test; the README
covers every recipe and its commands run as written."""

from __future__ import annotations

import subprocess
import sys

from dask_dppca.compute import TRUSTED_RESOURCE
from dask_dppca.compute.cluster import DEFAULT_SCHEDULER_PORT
from dask_dppca.compute.trusted.trust import TRUSTED_WORKER_COMMON_NAME
from tests.deploy.recipes import COMMANDS, DEPLOY, check_tls_command, parse_dask_command


def test_commands_file_agrees_with_the_code(tmp_path):
    assert COMMANDS["scheduler_port"] == DEFAULT_SCHEDULER_PORT == 8786
    assert COMMANDS["trusted_resource"] == TRUSTED_RESOURCE
    assert COMMANDS["trusted_worker_extra"] == ["--resources", f"{TRUSTED_RESOURCE}=1"]
    assert COMMANDS["trusted_worker_subject"] == f"CN={TRUSTED_WORKER_COMMON_NAME}"
    # The templates, filled in, parse as the roles they are.
    (tmp_path / "x").mkdir()
    for role in ("scheduler", "worker", "trusted-worker"):
        files = {
            part: str(tmp_path / "x" / f"{name}")
            for part, name in (("ca", "ca.pem"), ("cert", f"{role}.pem"), ("key", f"{role}.key"))
        }
        for path in files.values():
            open(path, "a").close()
        template = COMMANDS["scheduler" if role == "scheduler" else "worker"]
        argv = [
            arg.format(port=8786, scheduler="tls://scheduler:8786", nthreads=1, **files)
            for arg in template
        ]
        if role == "trusted-worker":
            argv += COMMANDS["trusted_worker_extra"]
        check_tls_command(parse_dask_command(argv), role, tmp_path / "x")


def test_the_live_cluster_test_uses_the_commands_file(tmp_path, monkeypatch):
    """tests/system/test_live_cluster.py's LiveCluster starts every role from commands.json:
    its command lines (recorded, nothing is run) are the templates filled in, the trusted
    worker's extra flags, then only the test's own TEST_ONLY_FLAGS."""
    from tests.system import test_live_cluster as live

    spawned = {}

    class Running:
        def poll(self):
            return None

    def record(cluster, name, argv):
        spawned[name] = argv
        if name == "scheduler":
            (tmp_path / "scheduler.json").write_text('{"address": "tls://127.0.0.1:1"}')
        return Running()

    monkeypatch.setattr(live.LiveCluster, "_spawn", record)
    tls = {
        role: {part: str(tmp_path / f"{role}.{part}") for part in ("ca", "cert", "key")}
        for role in COMMANDS["roles"]
    }
    cluster = live.LiveCluster(tmp_path, tls)
    address = cluster.start_scheduler()
    ordinary, trusted = cluster.add_worker(), cluster.add_worker(trusted=True)
    expected = {
        "scheduler": ("scheduler", {"port": 0, **tls["scheduler"]}, []),
        ordinary: ("worker", {"scheduler": address, "nthreads": 1, **tls["worker"]}, []),
        trusted: (
            "worker",
            {"scheduler": address, "nthreads": 1, **tls["trusted-worker"]},
            COMMANDS["trusted_worker_extra"],
        ),
    }
    assert set(spawned) == set(expected)
    for name, (template, values, extra) in expected.items():
        assert COMMANDS[template][0] == "dask"
        filled = [
            sys.executable,
            "-m",
            "dask",
            *(arg.format(**values) for arg in COMMANDS[template][1:]),
            *extra,
        ]
        argv = spawned[name]
        assert argv[: len(filled)] == filled, name
        added = {arg for arg in argv[len(filled) :] if arg.startswith("--")}
        assert added and added <= set(live.TEST_ONLY_FLAGS), (name, added)


def test_readme_covers_every_recipe():
    readme = (DEPLOY / "README.md").read_text()
    recipes = {
        str(path.relative_to(DEPLOY))
        for path in DEPLOY.rglob("*")
        if path.is_file()
        and path.name != "README.md"
        and "/bin/" not in str(path)
        and "__pycache__" not in path.parts
    }
    missing = sorted(r for r in recipes if r not in readme and r.split("/")[-1] not in readme)
    assert missing == []
    assert "--tls-ca-file" in readme and TRUSTED_RESOURCE in readme


def test_readme_certificate_lines_run_as_written(tmp_path):
    """Every make-certs.sh line of deploy/README.md, run from a copy of the repository
    root (the lines use relative paths), makes the role folders."""
    lines = [
        line.strip()
        for line in (DEPLOY / "README.md").read_text().splitlines()
        if "deploy/tls/make-certs.sh" in line
        and not line.strip().startswith(("`", "#"))
        and line.strip().split()[0] in ("deploy/tls/make-certs.sh", "CA_DIR=/private/dppca-ca")
    ]
    assert len(lines) == 3
    (tmp_path / "deploy").symlink_to(DEPLOY)
    for line in lines:
        line = line.replace("/private/dppca-ca", str(tmp_path / "private")).replace(
            "deploy/docker/tls", str(tmp_path / "compose-tls")
        )
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "DPPCA_TLS": str(tmp_path / "slurm-tls"),
            },
        )
        assert done.returncode == 0, (line, done.stderr)
    for out in ("compose-tls", "tls", "slurm-tls"):
        assert (tmp_path / out / "trusted-worker" / "trusted-worker.key").exists(), out
