"""Run a deploy recipe's processes in a loopback-only network namespace, as containers would.

Started by tests/deploy/live.py as ``unshare -n -m -u -- python namespace.py PLAN``
(root only).  In that namespace only 127.0.0.1 exists, so the recipes' fixed ports
(8786, 8787) are free and nothing can leave the machine; the plan's host names (compose
service names, a SLURM node name) resolve to 127.0.0.1 through a private /etc/hosts.

A *service* of the plan with ``"container": true`` runs in its own mount and UTS
namespace (``python namespace.py --container SPEC``): a root made of the host's folders,
with fresh /tmp, /home and /root, the volumes of the recipe bind-mounted at their
container paths (read-only where the recipe says ``:ro``), the service's host name, and
the image's user (uid 1000).  So a service reads its certificates through the same
path, owner and mode as in the container, and never sees what the recipe does not
mount.  The interpreter and the project (under /root on CI) are bound in as an image
would hold them.

The plan's ``client`` runs in the foreground once the services are started; a service
whose ``restart`` policy is compose's ``always`` or ``unless-stopped`` (or
``on-failure``, for a non-zero exit) is started again when it exits, as the Docker
engine would; then every service is stopped (SIGTERM, then SIGKILL to its process
group).  This file imports
only the standard library: it is a script, not part of the test package.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

#: Top-level folders a container gets fresh (empty, or a new home), not the host's.
FRESH = {"tmp": 0o1777, "home": 0o755, "root": 0o755}


def loopback_up() -> None:
    """``ip link set lo up`` with the kernel interface (no iproute2 needed)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def write_hosts(path: str, names: list[str]) -> None:
    with open(path, "w") as hosts:
        hosts.write("127.0.0.1\tlocalhost " + " ".join(names) + "\n::1\tlocalhost\n")


def _top(path: str) -> str:
    return path.strip("/").split("/")[0]


def _bind(root: str, source: str, target: str, read_only: bool) -> None:
    destination = root + target
    if os.path.isdir(source):
        os.makedirs(destination, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(destination), mode=0o755, exist_ok=True)
        open(destination, "a").close()
    mount("--rbind", source, destination)
    if read_only:
        mount("-o", "remount,bind,ro", destination)


def enter_container(spec: dict) -> None:
    """Build the container's root, switch to it and exec the service (never returns).

    The container's own top-level folders (FRESH, and the first folder of every volume's
    path, e.g. /tls, /data) are new, empty folders in a tmpfs: mount points are only
    ever made there, never in a host folder bound in.
    """
    mount("--make-rprivate", "/")
    root = spec["root"]
    os.makedirs(root, exist_ok=True)
    mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", root)
    own = {**{_top(target): 0o755 for _, target, _ in spec["mounts"]}, **FRESH}
    for entry in sorted(set(os.listdir("/")) | set(own)):
        source, target = "/" + entry, os.path.join(root, entry)
        if entry in own:
            os.mkdir(target)
            os.chmod(target, own[entry])
        elif os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif os.path.isdir(source):
            os.mkdir(target)
            mount("--rbind", source, target)
    for path in spec["image_paths"]:  # the interpreter and the project, as an image holds them
        if _top(path) in own:
            _bind(root, path, path, read_only=True)
    for source, target, read_only in spec["mounts"]:
        _bind(root, source, target, read_only)
    hosts = os.path.join(root, "tmp", ".hosts")
    write_hosts(hosts, spec["hosts"])
    mount("--bind", hosts, os.path.join(root, "etc", "hosts"))
    uid, gid = spec["user"]
    home = spec["env"].get("HOME")
    if home and _top(home) in own:
        os.makedirs(root + home, exist_ok=True)
        os.chown(root + home, uid, gid)
    os.chroot(root)
    os.chdir(spec["workdir"])
    socket.sethostname(spec["hostname"])
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])


def start(service: dict, folder: str, index: int) -> subprocess.Popen:
    log = open(os.path.join(folder, f"{service['name']}.log"), "ab")
    if service.get("container"):
        spec_path = os.path.join(folder, f"{service['name']}.{index}.json")
        with open(spec_path, "w") as spec:
            json.dump(
                {**service, "root": os.path.join(folder, f"root-{service['name']}-{index}")}, spec
            )
        argv = ["unshare", "-m", "-u", "--", sys.executable, __file__, "--container", spec_path]
        env, cwd = {"PATH": os.environ["PATH"]}, folder  # the container chdirs to its workdir
    else:
        argv, env, cwd = service["argv"], service["env"], service.get("workdir", folder)
    process = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    return process


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the group: a nanny's worker too
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


def run_plan(plan: dict) -> dict:
    loopback_up()
    mount("--make-rprivate", "/")
    hosts = os.path.join(plan["folder"], "hosts")
    write_hosts(hosts, plan["hosts"])
    mount("--bind", hosts, "/etc/hosts")
    socket.sethostname(plan["hostname"])
    services = [start(service, plan["folder"], k) for k, service in enumerate(plan["services"])]
    restarts = {service["name"]: 0 for service in plan["services"]}
    started = time.monotonic()
    try:
        client = start(plan["client"], plan["folder"], len(services))
        deadline = started + plan["timeout"]
        while client.poll() is None and time.monotonic() < deadline:
            for k, service in enumerate(plan["services"]):
                rc = services[k].poll()
                if rc is not None and _restarts(service.get("restart", "no"), rc):
                    stop([services[k]])  # the rest of its process group
                    services[k] = start(service, plan["folder"], k)
                    restarts[service["name"]] += 1
            time.sleep(0.2)
        if client.poll() is None:
            stop([client])
            client_rc = "timeout"
        else:
            client_rc = client.returncode
        exited = {
            s["name"]: p.poll() for s, p in zip(plan["services"], services) if p.poll() is not None
        }
    finally:
        stop(services)
    return {
        "client": client_rc,
        "exited_early": exited,
        "restarts": restarts,
        "seconds": time.monotonic() - started,
    }


def _restarts(policy: str, rc: int) -> bool:
    """Whether compose's restart ``policy`` starts a service again after exit code ``rc``."""
    return policy in ("always", "unless-stopped") or (policy == "on-failure" and rc != 0)


def main() -> None:
    if sys.argv[1] == "--container":
        with open(sys.argv[2]) as spec:
            enter_container(json.load(spec))
    with open(sys.argv[1]) as plan_file:
        plan = json.load(plan_file)
    summary = run_plan(plan)
    with open(os.path.join(plan["folder"], "summary.json"), "w") as out:
        json.dump(summary, out)


if __name__ == "__main__":
    main()
