"""deploy/commands.json agrees with the code and the live cluster test; the README
covers every recipe and its commands run as written."""

from __future__ import annotations

import subprocess

from dask_dppca.cluster import DEFAULT_SCHEDULER_PORT
from dask_dppca.privacy.release import TRUSTED_RESOURCE
from dask_dppca.privacy.trust import TRUSTED_WORKER_COMMON_NAME
from tests.deploy.recipes import COMMANDS, DEPLOY, ROOT, check_tls_command, parse_dask_command


def test_commands_file_agrees_with_the_code(tmp_path):
    assert COMMANDS["scheduler_port"] == DEFAULT_SCHEDULER_PORT == 8786
    assert COMMANDS["trusted_resource"] == TRUSTED_RESOURCE
    assert COMMANDS["trusted_worker_extra"] == ["--resources", f"{TRUSTED_RESOURCE}=1"]
    assert COMMANDS["trusted_worker_subject"] == f"CN={TRUSTED_WORKER_COMMON_NAME}"
    # The templates, filled in, parse as the roles they are.
    (tmp_path / "x").mkdir()
    for role in ("scheduler", "worker", "trusted-worker"):
        files = {part: str(tmp_path / "x" / f"{name}") for part, name in
                 (("ca", "ca.pem"), ("cert", f"{role}.pem"), ("key", f"{role}.key"))}
        for path in files.values():
            open(path, "a").close()
        template = COMMANDS["scheduler" if role == "scheduler" else "worker"]
        argv = [arg.format(port=8786, scheduler="tls://scheduler:8786", nthreads=1, **files)
                for arg in template]
        if role == "trusted-worker":
            argv += COMMANDS["trusted_worker_extra"]
        check_tls_command(parse_dask_command(argv), role, tmp_path / "x")


def test_the_live_cluster_test_uses_the_commands_file():
    source = (ROOT / "tests" / "system" / "test_live_cluster.py").read_text()
    assert 'command("scheduler"' in source and 'command("worker"' in source
    assert 'COMMANDS["trusted_worker_extra"]' in source


def test_readme_covers_every_recipe():
    readme = (DEPLOY / "README.md").read_text()
    recipes = {str(path.relative_to(DEPLOY)) for path in DEPLOY.rglob("*")
               if path.is_file() and path.name != "README.md" and "/bin/" not in str(path)
               and "__pycache__" not in path.parts}
    missing = sorted(r for r in recipes if r not in readme and r.split("/")[-1] not in readme)
    assert missing == []
    assert "--tls-ca-file" in readme and TRUSTED_RESOURCE in readme


def test_readme_certificate_lines_run_as_written(tmp_path):
    """Every make-certs.sh line of deploy/README.md, run from a copy of the repository
    root (the lines use relative paths), makes the role folders."""
    lines = [line.strip() for line in (DEPLOY / "README.md").read_text().splitlines()
             if "deploy/tls/make-certs.sh" in line and not line.strip().startswith(("`", "#"))
             and line.strip().split()[0] in ("deploy/tls/make-certs.sh", "CA_DIR=/private/dppca-ca")]
    assert len(lines) == 3
    (tmp_path / "deploy").symlink_to(DEPLOY)
    for line in lines:
        line = line.replace("/private/dppca-ca", str(tmp_path / "private")).replace(
            "deploy/docker/tls", str(tmp_path / "compose-tls"))
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                               "DPPCA_TLS": str(tmp_path / "slurm-tls")})
        assert done.returncode == 0, (line, done.stderr)
    for out in ("compose-tls", "tls", "slurm-tls"):
        assert (tmp_path / out / "trusted-worker" / "trusted-worker.key").exists(), out
