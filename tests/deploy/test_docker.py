"""deploy/docker: the Dockerfile against hadolint and Docker's own build-context rules,
compose.yaml against the compose-spec schema and distributed's command-line parser.
tests/system/test_live_recipes.py runs the compose services."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import PurePosixPath

from tests.deploy.recipes import require_deploy_tools

require_deploy_tools()

import jsonschema
import yaml
from docker.utils.build import exclude_paths

from tests.deploy.live import client_tls_env
from tests.deploy.recipes import (
    ARTEFACTS,
    BLAS_ENV,
    COMMANDS,
    DEPLOY,
    ROOT,
    check_tls_command,
    dockerfile_instructions,
    image_config,
    make_certs,
    parse_dask_command,
    tool,
)

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
COMPOSE = DEPLOY / "docker" / "compose.yaml"
SHIMS = DEPLOY / "docker" / "bin"


def build_context() -> set[str]:
    """The files `docker build -f deploy/docker/Dockerfile .` sends, by docker-py's
    implementation of the .dockerignore rules."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return set(exclude_paths(str(ROOT), patterns, dockerfile="deploy/docker/Dockerfile"))


def test_dockerfile_passes_hadolint():
    done = subprocess.run(
        [tool("hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_build_context_has_every_copy_source_and_no_key_or_history(tmp_path):
    certs = DEPLOY / "docker" / "tls"  # where the README makes the compose certificates
    made = not certs.exists()
    if made:
        make_certs(certs)
    try:
        context = build_context()
    finally:
        if made:
            shutil.rmtree(certs)
    for op, args in dockerfile_instructions():
        if op == "COPY":
            for source in [p for p in shlex.split(args) if not p.startswith("--")][:-1]:
                assert source.rstrip("/") in context, f"COPY {source}: not in the build context"
    leaked = sorted(
        p for p in context if p.endswith((".key", ".pem")) or p.startswith(".git/") or "/tls/" in p
    )
    assert leaked == []


def test_image_runs_as_uid_1000_with_one_blas_thread_and_the_chart_commands():
    image = image_config()
    assert image["user"] == (1000, 1000)
    for name, value in BLAS_ENV.items():
        assert image["env"][name] == value
    assert image["bin"] == {"dask-scheduler", "dask-worker"}
    runs = " ".join(args for op, args in dockerfile_instructions() if op == "RUN")
    assert 'pip install "./[s3]"' in runs  # the package and s3fs, for s3:// data
    assert "chown 1000:1000 /data" in runs  # a new named volume "data" takes this owner


def test_the_chart_command_shims_run_the_dask_subcommands(tmp_path):
    done = subprocess.run(
        [tool("shellcheck"), *map(str, SHIMS.iterdir())], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout
    # Run each shim with a stand-in `dask` that prints what it was given.
    (tmp_path / "dask").write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    (tmp_path / "dask").chmod(0o755)
    for shim, subcommand in (("dask-scheduler", "scheduler"), ("dask-worker", "worker")):
        done = subprocess.run(
            [str(SHIMS / shim), "--a b", "c"],
            capture_output=True,
            text=True,
            env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
            timeout=30,
        )
        assert done.stdout == f"{subcommand}|--a b|c|"


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_is_valid_under_the_compose_spec_schema():
    schema = json.loads((ARTEFACTS / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(load_compose()), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    # The schema is strict (unknown keys are errors): a misspelt key is caught.
    broken = load_compose()
    broken["services"]["worker"]["enviroment"] = {}
    assert list(validator.iter_errors(broken))


def test_compose_services_run_the_commands_with_their_own_certificates(tmp_path):
    """Each command parsed by distributed's own parser, the TLS files resolved through
    the service's /tls mount in folders made by make-certs.sh; the TLS mount is the
    service's own role folder, read-only; the CA key is mounted nowhere."""
    tls = make_certs(tmp_path / "tls")
    services = load_compose()["services"]
    roles = {
        "scheduler": "scheduler",
        "worker": "worker",
        "trusted-worker": "trusted-worker",
        "notebook": "client",
    }
    assert set(services) == set(roles)
    for name, service in services.items():
        volumes = [v.split(":") for v in service["volumes"]]
        (tls_mount,) = [v for v in volumes if v[1] == "/tls"]
        assert tls_mount == [f"./tls/{roles[name]}", "/tls", "ro"], name
        if name == "notebook":
            continue
        params = parse_dask_command(service["command"], {"/tls": tls / roles[name]})
        check_tls_command(params, roles[name], tls / roles[name])
        if params["command"] == "worker":
            assert params["scheduler"] == f"tls://scheduler:{COMMANDS['scheduler_port']}"
            assert service["environment"] == BLAS_ENV
    assert services["trusted-worker"].get("deploy", {}).get("replicas", 1) == 1


def test_compose_publishes_ports_on_loopback_only():
    for name, service in load_compose()["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_compose_notebook_and_workers_share_the_data_volume():
    compose = load_compose()
    services = compose["services"]
    assert "data" in compose["volumes"]
    for name in ("worker", "trusted-worker", "notebook"):
        assert "data:/data" in services[name]["volumes"], name
    notebook = services["notebook"]["environment"]
    assert notebook["DASK_DPPCA_DATA_DIR"] == "/data"
    assert notebook["DASK_DPPCA_SCHEDULER"] == f"tls://scheduler:{COMMANDS['scheduler_port']}"
    client_env = client_tls_env(PurePosixPath("/tls"))
    assert {k: notebook[k] for k in client_env} == client_env
