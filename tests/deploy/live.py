"""Live runs of the deploy recipes without their engines (tests/system/test_live_recipes.py).

A recipe's processes run with their exact command lines in a loopback-only network
namespace (tests/deploy/namespace.py): no Docker engine, Kubernetes API server or SLURM
controller is needed, only root and ``unshare``.  On CI (``CI`` set) a missing
namespace is a failure, elsewhere a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.deploy.recipes import COMMANDS, DEPLOY, ROOT, image_config

NAMESPACE = Path(__file__).with_name("namespace.py")
CLIENT = Path(__file__).with_name("client.py")
STANDINS = Path(__file__).with_name("standins")
SLURM_DRIVER = Path(__file__).with_name("slurm_driver.py")
PYTHON_BIN = str(Path(sys.executable).parent)
#: This machine's OpenBLAS settings (set on some processors: older OpenBLAS builds pick a
#: wrong kernel there).  Passed into the containers as a node's environment would be;
#: they also pick the kernel, hence the last bits the local fit must match.
MACHINE_ENV = {
    k: v for k, v in os.environ.items() if k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
}


def require_namespaces() -> None:
    """Skip (fail on CI) unless this process may make network and mount namespaces."""
    reason = None
    if os.geteuid() != 0:
        reason = "needs root for unshare -n -m"
    else:
        done = subprocess.run(
            ["unshare", "-n", "-m", "-u", "--", "true"], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            reason = f"unshare -n -m -u failed: {done.stderr.strip()}"
    if reason and os.environ.get("CI"):
        pytest.fail(f"the live recipe runs cannot run on CI: {reason}")
    if reason:
        pytest.skip(reason)


def image_paths() -> list[str]:
    """What an image holds that lives under /root or /tmp here: the interpreter, the
    environment and the project (bound into each container at the same path)."""
    paths = {sys.prefix, sys.base_prefix, str(ROOT), os.path.realpath(sys.executable)}
    return sorted({os.path.dirname(p) if os.path.isfile(p) else p for p in paths})


def image_environment() -> dict:
    """A container's environment from the image: this machine's OpenBLAS settings, the
    Dockerfile's ENV, PATH (the interpreter's folder stands for the image's
    /usr/local/bin, with the files the Dockerfile copies there) and HOME."""
    path = ":".join(
        [PYTHON_BIN, str(DEPLOY / "docker" / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]
    )
    return {**MACHINE_ENV, **image_config()["env"], "PATH": path, "HOME": "/home/dask"}


def run_plan(
    folder: Path,
    services: list[dict],
    client: dict,
    hosts: list[str],
    timeout: float,
    hostname: str = "dppca-host",
) -> dict:
    """Run ``services`` and then ``client`` in a new namespace; returns the summary."""
    plan = {
        "folder": str(folder),
        "services": services,
        "client": client,
        "hosts": hosts,
        "hostname": hostname,
        "timeout": timeout,
    }
    (folder / "plan.json").write_text(json.dumps(plan, indent=1))
    done = subprocess.run(
        [
            "unshare",
            "-n",
            "-m",
            "-u",
            "--",
            sys.executable,
            str(NAMESPACE),
            str(folder / "plan.json"),
        ],
        capture_output=True,
        text=True,
        timeout=timeout + 60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((folder / "summary.json").read_text())
    logs = {p.name: p.read_text(errors="replace")[-2500:] for p in folder.glob("*.log")}
    summary["logs"] = logs
    return summary


def compose_services(
    compose_file: Path, project: Path, data: Path, client_argv: list[str], results: Path
) -> tuple[list[dict], dict, list[str]]:
    """The services of a compose file as containers of the image of deploy/docker: each
    replica with its command, the image's ENV, USER and WORKDIR plus its environment, and
    its volumes (bind sources relative to ``project``, the named volume on ``data``).
    The notebook service becomes the client: ``client_argv`` with its environment and
    volumes (and ``results`` at /results)."""
    compose = yaml.safe_load(compose_file.read_text())
    image = image_config()
    hosts = sorted(
        {*compose["services"], *(s.get("hostname", n) for n, s in compose["services"].items())}
    )
    services, client = [], None
    for name, service in compose["services"].items():
        mounts = []
        for volume in service.get("volumes", []):
            source, target, *mode = volume.split(":")
            host = project / source if source.startswith(".") else data
            assert source.startswith(".") or source in compose.get("volumes", {}), volume
            mounts.append([str(host), target, mode == ["ro"]])
        spec = {
            "name": name,
            "container": True,
            "argv": service["command"],
            "env": {
                **image_environment(),
                **{k: str(v) for k, v in (service.get("environment") or {}).items()},
            },
            "user": list(image["user"]),
            "workdir": image["workdir"],
            "mounts": mounts,
            "hostname": service.get("hostname", name),
            "hosts": hosts,
            "image_paths": image_paths(),
            "restart": service.get("restart", "no"),
        }
        if name == "notebook":
            client = {
                **spec,
                "argv": client_argv,
                "mounts": mounts + [[str(results), "/results", False]],
            }
            continue
        services += [
            {**spec, "name": f"{name}-{k}"}
            for k in range(service.get("deploy", {}).get("replicas", 1))
        ]
    return services, client, hosts


def local_release(store: str, random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """The same fit in this process (synchronous scheduler, one BLAS thread as in the
    workers): the release a cluster must reproduce bit for bit for the same
    ``random_state`` (a TEST-ONLY fixed noise seed)."""
    import warnings

    from threadpoolctl import threadpool_limits

    import dask_dppca as dd

    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = dd.DPPCA(n_components=2, random_state=random_state, scheduler="synchronous").fit(
            store
        )
    return est.components_, est.eigenvalues_


def _expand(text: str, env: dict) -> str:
    """Kubernetes' $(VAR) expansion in a container's command and args."""
    for name, value in env.items():
        text = text.replace(f"$({name})", value)
    return text


def kubernetes_services(objects: list[dict], tls: Path, data: Path) -> tuple[list[dict], list[str]]:
    """The Deployments of ``objects`` as containers, as a kubelet would run their pods:
    the image's entry command (tini, which only execs) given the container's args, the
    image's ENV and the container's env (``secretKeyRef`` read from the role folders of
    ``tls``, a secret made with ``--from-file=tls/ROLE/``), secret volumes mounted from
    those folders, the image's user.  Service names (short and in-cluster) resolve to
    127.0.0.1.  ``data`` is mounted at /data in every pod: it stands for the storage a
    deployment gives its workers (an object store URL, a ReadWriteMany volume), which
    the recipes leave to the user (deploy/README.md).  Returns the services and the
    host names."""
    image = image_config()
    hosts = []
    for obj in objects:
        if obj["kind"] == "Service":
            name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace", "default")
            hosts += [name, f"{name}.{namespace}.svc.cluster.local"]
    services = []
    for obj in [o for o in objects if o["kind"] == "Deployment"]:
        pod = obj["spec"]["template"]["spec"]
        secret_folders = {
            v["name"]: tls / v["secret"]["secretName"].removeprefix("dppca-tls-")
            for v in pod.get("volumes", [])
            if "secret" in v
        }
        (container,) = pod["containers"]
        env = image_environment()
        for item in container.get("env", []):
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            folder = tls / ref["name"].removeprefix("dppca-tls-") if ref else None
            env[item["name"]] = (
                (folder / ref["key"]).read_text() if ref else _expand(item["value"], env)
            )
        mounts = [
            [str(secret_folders[m["name"]]), m["mountPath"], bool(m.get("readOnly"))]
            for m in container.get("volumeMounts", [])
        ] + [[str(data), "/data", False]]
        argv = [_expand(arg, env) for arg in container.get("command", []) + container["args"]]
        for k in range(obj["spec"].get("replicas", 1)):
            name = f"{obj['metadata']['name']}-{k}"
            services.append(
                {
                    "name": name,
                    "container": True,
                    "argv": argv,
                    "env": env,
                    "user": list(image["user"]),
                    "workdir": image["workdir"],
                    "mounts": mounts,
                    "hostname": name[:63],
                    "hosts": hosts,
                    "image_paths": image_paths(),
                }
            )
    return services, hosts


def client_tls_env(folder: Path) -> dict:
    """commands.json's client environment with the client folder of make-certs.sh."""
    return {
        name: value.format(
            ca=folder / "ca.pem", cert=folder / "client.pem", key=folder / "client.key"
        )
        for name, value in COMMANDS["client_env"].items()
    }
