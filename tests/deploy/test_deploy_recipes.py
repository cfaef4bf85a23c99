"""deploy/ recipes: parsed and checked against deploy/commands.json and the code.

No Docker engine, Kubernetes or SLURM here: these checks are what can be checked
without them.  deploy/commands.json is the argument lists tests/system/test_live_cluster.py
starts its TLS cluster from; every recipe's scheduler and worker commands must carry
every flag listed there with the same literal values (placeholders are free).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from dask_dppca.cluster import DEFAULT_SCHEDULER_PORT
from dask_dppca.privacy.release import TRUSTED_RESOURCE

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMMANDS = json.loads((DEPLOY / "commands.json").read_text())
BLAS_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _flags(template: list[str]) -> dict[str, str | None]:
    """{flag: literal value or None when it is a placeholder} of a commands.json list."""
    flags, args = {}, template[2:]
    for k, arg in enumerate(args):
        if arg.startswith("--"):
            value = args[k + 1] if k + 1 < len(args) and not args[k + 1].startswith("--") else ""
            flags[arg] = None if "{" in value else value
    return flags


def check_command(argv: list[str], kind: str) -> None:
    """``argv`` runs `dask scheduler` / `dask worker` with commands.json's flags."""
    template = COMMANDS[kind]
    assert argv[:2] == template[:2], f"{argv[:2]} is not {template[:2]}"
    for flag, value in _flags(template).items():
        assert flag in argv, f"{' '.join(argv)}: missing {flag}"
        if value is not None:
            assert argv[argv.index(flag) + 1] == value, f"{flag} {argv[argv.index(flag) + 1]} != {value}"
    if kind == "worker":
        assert re.fullmatch(r"(tls://\S+:\d+|\$address|\"\$address\")", argv[2]), argv[2]
        assert argv[2].startswith("tls://") or "address" in argv[2]
        if argv[2].startswith("tls://"):
            assert argv[2].endswith(f":{DEFAULT_SCHEDULER_PORT}")
    else:
        port = argv[argv.index("--port") + 1]
        assert port in (str(DEFAULT_SCHEDULER_PORT), '"$PORT"', "$PORT")


def is_trusted(argv: list[str]) -> bool:
    extra = COMMANDS["trusted_worker_extra"]
    return any(argv[k:k + len(extra)] == extra for k in range(len(argv)))


def test_commands_file_agrees_with_the_code():
    assert COMMANDS["scheduler_port"] == DEFAULT_SCHEDULER_PORT == 8786
    assert COMMANDS["trusted_resource"] == TRUSTED_RESOURCE
    assert COMMANDS["trusted_worker_extra"] == ["--resources", f"{TRUSTED_RESOURCE}=1"]
    assert _flags(COMMANDS["scheduler"])["--protocol"] == "tls"
    for kind in ("scheduler", "worker"):
        assert {"--tls-ca-file", "--tls-cert", "--tls-key"} <= set(_flags(COMMANDS[kind]))


def test_the_live_cluster_test_uses_the_commands_file():
    source = (ROOT / "tests" / "system" / "test_live_cluster.py").read_text()
    assert 'command("scheduler"' in source and 'command("worker"' in source
    assert 'COMMANDS["trusted_worker_extra"]' in source


# -- docker --------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = path.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
            for line in lines if line and not line.startswith("#")]


def test_dockerfile_builds_from_the_repository_files():
    instructions = dockerfile_instructions(DEPLOY / "docker" / "Dockerfile")
    assert instructions[0][0] == "FROM"
    copies = [shlex.split(args) for op, args in instructions if op == "COPY"]
    assert copies
    for parts in copies:
        sources = [p for p in parts[:-1] if not p.startswith("--")]
        for source in sources:  # build context: the repository root
            assert (ROOT / source).exists(), f"COPY source {source} is not in the repository"
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert 'pip install ".[s3]"' in runs  # the package and s3fs, for s3:// data
    env = " ".join(args for op, args in instructions if op == "ENV")
    for name, value in BLAS_ENV.items():
        assert f"{name}={value}" in env
    exposed = " ".join(args for op, args in instructions if op == "EXPOSE").split()
    assert str(DEFAULT_SCHEDULER_PORT) in exposed


def test_compose_services_run_the_commands():
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"scheduler", "worker", "trusted-worker", "notebook"} <= set(services)
    build = services["scheduler"]["build"]
    assert (DEPLOY / "docker" / build["context"] / build["dockerfile"]).resolve() == \
        (DEPLOY / "docker" / "Dockerfile").resolve()
    check_command(services["scheduler"]["command"], "scheduler")
    assert f"{DEFAULT_SCHEDULER_PORT}:{DEFAULT_SCHEDULER_PORT}" in services["scheduler"]["ports"]
    trusted = [name for name, s in services.items()
               if s.get("command", [""])[:2] == ["dask", "worker"] and is_trusted(s["command"])]
    assert trusted == ["trusted-worker"]
    assert services["trusted-worker"].get("deploy", {}).get("replicas", 1) == 1
    for name in ("worker", "trusted-worker"):
        check_command(services[name]["command"], "worker")
        assert services[name]["environment"] == BLAS_ENV
    for name, service in services.items():  # TLS material mounted read-only
        assert any(v.endswith(":/tls:ro") for v in service["volumes"]), name
    notebook = services["notebook"]["environment"]
    assert notebook["DASK_DPPCA_SCHEDULER"] == f"tls://scheduler:{DEFAULT_SCHEDULER_PORT}"
    assert set(COMMANDS["client_env"]) <= set(notebook)


# -- kubernetes ----------------------------------------------------------------------


def test_kubernetes_operator_cluster_and_trusted_worker_group():
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "daskcluster.yaml").read_text()))
    kinds = {doc["kind"]: doc for doc in documents}
    assert set(kinds) == {"DaskCluster", "DaskWorkerGroup"}
    cluster, group = kinds["DaskCluster"], kinds["DaskWorkerGroup"]
    assert group["spec"]["cluster"] == cluster["metadata"]["name"]
    (scheduler,) = cluster["spec"]["scheduler"]["spec"]["containers"]
    check_command(scheduler["args"], "scheduler")
    ports = {p["port"] for p in cluster["spec"]["scheduler"]["service"]["ports"]}
    assert DEFAULT_SCHEDULER_PORT in ports
    (worker,) = cluster["spec"]["worker"]["spec"]["containers"]
    check_command(worker["args"], "worker")
    assert not is_trusted(worker["args"])
    (trusted,) = group["spec"]["worker"]["spec"]["containers"]
    check_command(trusted["args"], "worker")
    assert is_trusted(trusted["args"])
    assert group["spec"]["worker"]["replicas"] == 1
    assert group["spec"]["worker"]["spec"]["nodeSelector"]
    for container in (worker, trusted):
        assert {e["name"]: e["value"] for e in container["env"]} == BLAS_ENV
    service = f"{cluster['metadata']['name']}-scheduler"
    assert worker["args"][2].startswith(f"tls://{service}.")


def test_helm_values():
    values = yaml.safe_load((DEPLOY / "kubernetes" / "helm-values.yaml").read_text())
    assert values["scheduler"]["servicePort"] == DEFAULT_SCHEDULER_PORT
    check_command(values["scheduler"]["args"], "scheduler")
    check_command(values["worker"]["args"], "worker")
    assert not is_trusted(values["worker"]["args"])
    check_command(values["trustedWorker"]["args"], "worker")
    assert is_trusted(values["trustedWorker"]["args"])


# -- slurm ---------------------------------------------------------------------------


def test_jobqueue_config():
    config = yaml.safe_load((DEPLOY / "slurm" / "jobqueue.yaml").read_text())["jobqueue"]["slurm"]
    assert config["scheduler-options"]["protocol"] == "tls"
    assert config["scheduler-options"]["port"] == DEFAULT_SCHEDULER_PORT
    extra = config["worker-extra-args"]
    for flag in ("--tls-ca-file", "--tls-cert", "--tls-key", "--nthreads"):
        assert flag in extra
    assert not is_trusted(extra)  # the trusted worker is its own job (launch.sh)


def _launch_commands() -> list[list[str]]:
    """The `dask ...` command lines of launch.sh (continuation lines joined)."""
    text = (DEPLOY / "slurm" / "launch.sh").read_text().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        line = line.split(" -- ", 1)[-1].strip() if " -- " in line else line.strip()
        if line.startswith("dask "):
            commands.append(shlex.split(line.replace('"$TLS', '"TLS').replace("${", "{")))
    return commands


def test_slurm_launch_script():
    launch = DEPLOY / "slurm" / "launch.sh"
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(launch)], timeout=30).returncode == 0
    commands = _launch_commands()
    schedulers = [c for c in commands if c[:2] == ["dask", "scheduler"]]
    workers = [c for c in commands if c[:2] == ["dask", "worker"]]
    assert len(schedulers) == 1 and len(workers) == 2
    check_command(schedulers[0], "scheduler")
    assert "PORT=8786" in launch.read_text()
    for worker in workers:
        check_command(worker, "worker")
    assert [is_trusted(w) for w in workers] == [False, True]
    text = launch.read_text()
    assert "submit dppca-trusted" in text  # a job of its own
    for name, value in BLAS_ENV.items():
        assert f"{name}={value}" in text


# -- TLS material --------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line")
def test_make_certs_script_makes_a_working_chain(tmp_path):
    done = subprocess.run(["sh", str(DEPLOY / "tls" / "make-certs.sh"), str(tmp_path), "localhost",
                           "127.0.0.1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for role in ("scheduler", "worker", "client"):
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        context.load_cert_chain(tmp_path / f"{role}.pem", tmp_path / f"{role}.key")
        verified = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"),
                                   str(tmp_path / f"{role}.pem")], capture_output=True, text=True,
                                  timeout=30)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert (tmp_path / f"{role}.key").stat().st_mode & 0o077 == 0  # private keys private


def test_readme_covers_every_recipe():
    readme = (DEPLOY / "README.md").read_text()
    for recipe in ("docker/compose.yaml", "docker/Dockerfile", "kubernetes/daskcluster.yaml",
                   "kubernetes/helm-values.yaml", "slurm/jobqueue.yaml", "slurm/launch.sh",
                   "tls/make-certs.sh", "commands.json"):
        assert recipe in readme, recipe
    assert "--tls-ca-file" in readme and TRUSTED_RESOURCE in readme
