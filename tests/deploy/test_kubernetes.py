"""deploy/kubernetes against the real tools: the dask-kubernetes operator's CRDs and its
own pod builders, the dask Helm chart rendered by helm, Kubernetes object schemas and
distributed's command-line parser.  tests/system/test_live_recipes.py runs the pods."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

from tests.deploy.recipes import require_deploy_tools

require_deploy_tools()

import dask_kubernetes
import jsonschema
import pytest
import yaml

from tests.deploy.recipes import (
    BLAS_ENV,
    CHART,
    COMMANDS,
    DEPLOY,
    HELM_VALUES,
    NAMESPACE,
    ROLE_FILES,
    check_tls_command,
    helm,
    helm_binary,
    image_config,
    kubernetes_validate,
    make_certs,
    operator_built_objects,
    operator_documents,
    parse_dask_command,
    render_helm_chart,
    strict_schema,
)

CRDS = (
    Path(dask_kubernetes.__file__).parent
    / "operator"
    / "deployment"
    / "helm"
    / "dask-kubernetes-operator"
    / "crds"
)
IMAGE = "dask-dppca:0.1.0"
TLS_ENV = {
    "ca": "DASK_DISTRIBUTED__COMM__TLS__CA_FILE",
    "cert": "DASK_DISTRIBUTED__COMM__TLS__{ROLE}__CERT",
    "key": "DASK_DISTRIBUTED__COMM__TLS__{ROLE}__KEY",
}


def image_commands() -> set[str]:
    """The commands the image built from deploy/docker/Dockerfile has on its PATH for
    Dask: the console scripts of dask, distributed and dask-dppca (pip install .), and
    the files it copies into /usr/local/bin."""
    scripts = {
        entry.name
        for name in ("dask", "distributed", "dask-dppca")
        for entry in importlib.metadata.distribution(name).entry_points
        if entry.group == "console_scripts"
    }
    return scripts | image_config()["bin"]


def secret_role(secret: str) -> str:
    role = secret.removeprefix("dppca-tls-")
    assert secret.startswith("dppca-tls-") and role in ROLE_FILES and role != "client", secret
    return role


def pod_role(pod: dict) -> str:
    """The one role whose secret the pod reads (volumes or environment), and only its files."""
    secrets = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    for container in pod["containers"]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secrets.add(ref["name"])
                assert ref["key"] in ROLE_FILES[secret_role(ref["name"])], ref
    (secret,) = secrets
    return secret_role(secret)


# -- the operator ------------------------------------------------------------------------


def crd_validator(kind: str, api_version: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((CRDS / f"{kind.lower()}.yaml").read_text())
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = served["schema"]["openAPIV3Schema"]
    # Every object has these; the API server checks them, not the CRD.
    schema["properties"] = {
        "apiVersion": {"enum": [api_version]},
        "kind": {"enum": [kind]},
        "metadata": {"type": "object"},
        **schema["properties"],
    }
    return jsonschema.Draft7Validator(strict_schema(schema))


def test_operator_manifests_are_valid_under_the_operators_crds():
    for kind, document in operator_documents().items():
        validator = crd_validator(kind, document["apiVersion"])
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(document)]
        assert errors == [], kind
    broken = operator_documents()["DaskWorkerGroup"]
    broken["spec"]["worker"]["spec"]["containers"][0]["argz"] = []
    assert list(crd_validator("DaskWorkerGroup", broken["apiVersion"]).iter_errors(broken))


@pytest.fixture(scope="module")
def operator_objects() -> list[dict]:
    return operator_built_objects()


def test_operator_objects_are_valid_kubernetes(operator_objects):
    kubernetes_validate(operator_objects)


def test_operator_pods_run_the_commands_with_their_own_secret(operator_objects, tmp_path):
    tls = make_certs(tmp_path / "tls")
    (service,) = [o for o in operator_objects if o["kind"] == "Service"]
    scheduler_host = f"{service['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
    deployments = [o for o in operator_objects if o["kind"] == "Deployment"]
    roles = []
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        role = pod_role(pod)
        roles.append(role)
        (container,) = pod["containers"]
        assert container["image"] == IMAGE
        assert container["args"][0] in image_commands()
        (mount,) = container["volumeMounts"]
        assert mount["readOnly"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        # Kubernetes expands $(VAR) in args from the container's environment.
        args = [
            arg.replace("$(DASK_WORKER_NAME)", env.get("DASK_WORKER_NAME", "$(DASK_WORKER_NAME)"))
            for arg in container["args"]
        ]
        assert "$(" not in " ".join(args)
        params = parse_dask_command(args, {mount["mountPath"]: tls / role})
        check_tls_command(params, role, tls / role)
        if role == "scheduler":
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert (
                {p["targetPort"]: p["port"] for p in service["spec"]["ports"]}["tcp-comm"]
                == ports["tcp-comm"]
                == COMMANDS["scheduler_port"]
            )
        else:
            assert params["scheduler"] == f"tls://{scheduler_host}:{COMMANDS['scheduler_port']}"
            assert {k: env[k] for k in BLAS_ENV} == BLAS_ENV
    assert sorted(roles) == ["scheduler", "trusted-worker", "worker"]
    trusted = deployments[roles.index("trusted-worker")]["spec"]["template"]["spec"]
    assert trusted["nodeSelector"] == {"dask-dppca/trusted": "true"}
    assert operator_documents()["DaskWorkerGroup"]["spec"]["worker"]["replicas"] == 1


def test_readme_image_step_replaces_every_image_of_the_operator_manifest():
    """deploy/README.md's sed line, run as written: no pod keeps the local image name."""
    readme = (DEPLOY / "README.md").read_text()
    (line,) = [
        line for line in readme.splitlines() if line.startswith("sed ") and "daskcluster" in line
    ]
    command = line.split(" | kubectl")[0]
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=DEPLOY.parent,
        env={"IMAGE": "registry.example/team/dask-dppca:0.1.0", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    images = [
        c["image"]
        for doc in yaml.safe_load_all(done.stdout)
        for c in (doc["spec"].get("worker") or {}).get("spec", {}).get("containers", [])
        + doc["spec"].get("scheduler", {}).get("spec", {}).get("containers", [])
    ]
    assert images and set(images) == {"registry.example/team/dask-dppca:0.1.0"}


# -- the dask Helm chart -----------------------------------------------------------------


@pytest.fixture(scope="module")
def helm_path(tmp_path_factory) -> Path:
    return helm_binary(tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def rendered(helm_path) -> list[dict]:
    return render_helm_chart(helm_path)


def unknown_keys(ours: dict, chart: dict, templates: str, path: str = "") -> list[str]:
    """Keys of ``ours`` that the chart neither declares in its values.yaml nor reads in a
    template (the chart has no values schema: helm ignores them silently).  Free-form
    maps (empty in the chart, e.g. resources, nodeSelector) and lists are not looked
    into, except each group of additional_worker_groups, read as ``$worker.KEY``."""
    unknown = []
    for key, value in ours.items():
        read = f".Values.{path}{key}" in templates
        if path.startswith("additional_worker_groups"):
            read = f"$worker.{key}" in templates
        if key not in chart and not read:
            unknown.append(path + key)
        elif key == "additional_worker_groups":
            for group in value:
                unknown += unknown_keys(
                    group, {**chart["worker"], "name": None}, templates, f"{path}{key}[]."
                )
        elif isinstance(value, dict) and isinstance(chart.get(key), dict) and chart[key]:
            unknown += unknown_keys(value, chart[key], templates, f"{path}{key}.")
    return unknown


def test_helm_values_use_only_keys_the_chart_reads(helm_path):
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    templates = "".join(path.read_text() for path in (CHART / "templates").iterdir())
    assert unknown_keys(yaml.safe_load(HELM_VALUES.read_text()), chart_values, templates) == []
    # What an ignored key looks like (the keys an earlier version of this file used).
    ignored = {"scheduler": {"args": [], "mounts": {}}, "trustedWorker": {}, "worker": {"args": []}}
    assert unknown_keys(ignored, chart_values, templates) == [
        "scheduler.args",
        "scheduler.mounts",
        "trustedWorker",
        "worker.args",
    ]
    helm(helm_path, "lint", str(CHART), "-f", str(HELM_VALUES))


def test_rendered_chart_is_valid_kubernetes(rendered):
    assert {doc["kind"] for doc in rendered} == {"Deployment", "Service"}
    kubernetes_validate(rendered)


def test_rendered_pods_run_image_commands_with_tls_from_their_own_secret(rendered):
    (service,) = [
        d
        for d in rendered
        if d["kind"] == "Service" and d["spec"]["selector"].get("component") == "scheduler"
    ]
    (scheduler_port,) = [p for p in service["spec"]["ports"] if p["name"].endswith("-scheduler")]
    deployments = {}
    for deployment in [d for d in rendered if d["kind"] == "Deployment"]:
        pod = deployment["spec"]["template"]["spec"]
        role = pod_role(pod)
        deployments.setdefault(role, []).append(deployment)
        (container,) = pod["containers"]
        assert container["image"] == IMAGE and "command" not in container
        args = container["args"]
        assert args[0] in image_commands(), f"{args[0]} is not a command of the image"
        env = {e["name"]: e for e in container["env"]}
        tls_role = "SCHEDULER" if role == "scheduler" else "WORKER"
        for part, variable in TLS_ENV.items():
            key = env[variable.format(ROLE=tls_role)]["valueFrom"]["secretKeyRef"]["key"]
            assert key == (
                "ca.pem" if part == "ca" else f"{role}.{'pem' if part == 'cert' else 'key'}"
            )
        assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"]["value"] == "True"
        params = parse_dask_command(args)
        check_tls_command(params, role, None)
        if role == "scheduler":
            assert int(params["port"]) == scheduler_port["targetPort"]
        else:
            assert (
                params["scheduler"]
                == f"tls://{service['metadata']['name']}:{scheduler_port['port']}"
            )
            assert {k: env[k]["value"] for k in BLAS_ENV} == BLAS_ENV
    assert sorted(deployments) == ["scheduler", "trusted-worker", "worker"]
    (trusted,) = deployments["trusted-worker"]
    assert trusted["spec"]["replicas"] == 1
    assert trusted["spec"]["template"]["spec"]["nodeSelector"] == {"dask-dppca/trusted": "true"}
