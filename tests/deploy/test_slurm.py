"""deploy/slurm against dask-jobqueue's own defaults and job scripts, shellcheck and
distributed's command-line parser.  tests/system/test_live_recipes.py runs both recipes
with stand-in sbatch/scancel."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.deploy.recipes import require_deploy_tools

require_deploy_tools()

import dask_jobqueue
import pytest
import yaml

from tests.deploy.recipes import DEPLOY, check_tls_command, make_certs, parse_dask_command, tool

SLURM = DEPLOY / "slurm"
STANDINS = Path(__file__).with_name("standins")


def test_shell_scripts_pass_shellcheck():
    scripts = [SLURM / "launch.sh", DEPLOY / "tls" / "make-certs.sh", *STANDINS.iterdir()]
    done = subprocess.run(
        [tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout


def test_jobqueue_config_uses_only_jobqueue_keys():
    ours = yaml.safe_load((SLURM / "jobqueue.yaml").read_text())["jobqueue"]["slurm"]
    defaults = yaml.safe_load((Path(dask_jobqueue.__file__).with_name("jobqueue.yaml")).read_text())
    known = defaults["jobqueue"]["slurm"]
    assert sorted(set(ours) - set(known)) == []
    assert ours["worker-extra-args"] == []  # TLS flags come from security= (jobqueue adds them)
    assert ours["scheduler-options"]["protocol"] == "tls"


@pytest.fixture(scope="module")
def slurm_cluster_module():
    sys.path.insert(0, str(SLURM))
    try:
        import slurm_cluster

        yield slurm_cluster
    finally:
        sys.path.remove(str(SLURM))


def test_jobqueue_job_script_runs_a_tls_worker_with_the_worker_certificate(
    tmp_path, slurm_cluster_module
):
    """The job script of jobqueue's own SLURMJob, made as SLURMCluster makes it from
    slurm_cluster.py's configuration and Security (the live run starts the cluster)."""
    from dask_jobqueue.slurm import SLURMJob

    tls = make_certs(tmp_path / "tls")
    slurm_cluster_module.load_config()
    job = SLURMJob(
        scheduler="tls://login01:8786",
        name="dppca",
        protocol="tls://",
        security=slurm_cluster_module.tls_security(tls),
    )
    script = job.job_script()
    assert "#SBATCH --cpus-per-task=4" in script and "#SBATCH -t 04:00:00" in script
    assert "export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1" in script
    (line,) = [line for line in script.splitlines() if "distributed.cli.dask_worker" in line]
    argv = shlex.split(line.replace("${TMPDIR:-/tmp}", str(tmp_path)))
    assert argv[1:3] == ["-m", "distributed.cli.dask_worker"]
    for flag in ("--tls-ca-file", "--tls-cert", "--tls-key"):
        assert argv.count(flag) == 1, flag  # jobqueue's own, not a second copy overriding it
    params = parse_dask_command(["dask", "worker", *argv[3:]])
    check_tls_command(params, "worker", None)
    # One Security holds one CA file for every role (the CA certificate is public).
    assert Path(params["tls_ca_file"]) == tls / "scheduler" / "ca.pem"
    assert (Path(params["tls_cert"]), Path(params["tls_key"])) == (
        tls / "worker" / "worker.pem",
        tls / "worker" / "worker.key",
    )
    assert params["nthreads"] == 4


def test_launch_script_submits_quoted_commands(tmp_path):
    """launch.sh start, with a stand-in sbatch that only records: every job's --wrap
    text, run by /bin/sh as sbatch does, gives back the arguments intact (a path with
    spaces too), parsed by distributed's parser with each role's own certificate."""
    tls = make_certs(tmp_path / "shared fs" / "dppca tls")
    state = tmp_path / "state dir"
    state.mkdir()
    # launch.sh removes the scheduler file, submits the scheduler job and waits for the
    # file: the stand-in puts it back at every call, as the scheduler job would.
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text('{"address": "tls://10.0.0.1:8786"}')
    recorder = tmp_path / "bin"
    recorder.mkdir()
    (recorder / "sbatch").write_text(
        '#!/bin/bash\nfor a in "$@"; do case $a in --wrap=*) '
        'printf "%s\\n" "${a#--wrap=}" >> "$RECORD";; esac; done\n'
        f'cp {shlex.quote(str(scheduler_file))} "$DPPCA_STATE/"\n'
        "echo 1\n"
    )
    (recorder / "sbatch").chmod(0o755)
    record = tmp_path / "wraps"
    env = {
        "PATH": f"{recorder}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RECORD": str(record),
        "DPPCA_TLS": str(tls),
        "DPPCA_STATE": str(state),
    }
    done = subprocess.run(
        ["bash", str(SLURM / "launch.sh"), "start", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tls://10.0.0.1:8786"
    roles = []
    for looped in record.read_text().splitlines():
        # Each job runs its command again when it stops (a restarted scheduler, rejoining
        # workers), until scancel.
        loop = re.fullmatch(r"while :; do (.*); sleep 5; done", looped)
        assert loop, looped
        wrap = loop.group(1)
        argv = subprocess.run(
            ["sh", "-c", f"for a in {wrap}; do printf '%s\\0' \"$a\"; done"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split("\0")[:-1]
        params = parse_dask_command(argv)
        role = Path(params["tls_cert"]).stem
        roles.append(role)
        check_tls_command(params, role, tls / role)
    assert roles == ["scheduler", "worker", "worker", "trusted-worker"]
