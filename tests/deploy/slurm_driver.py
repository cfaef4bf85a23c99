"""The SLURM recipes, run on a 'login node' with stand-in sbatch/scancel (for tests).

    python slurm_driver.py TLS_DIR STATE_DIR RESULTS_DIR

Run by tests/system/test_live_recipes.py inside a loopback-only namespace with the
stand-ins first on PATH.  Two runs, each followed by a client fit (tests/deploy/client.py
with the client certificate from the Dask configuration that commands.json's
client_env names):

1. ``deploy/slurm/launch.sh start 2`` as documented (scheduler, 2 workers, the trusted
   worker with ``DPPCA_TRUSTED_SBATCH``), then ``launch.sh stop``;
2. ``deploy/slurm/slurm_cluster.py``: a ``dask_jobqueue.SLURMCluster`` from
   jobqueue.yaml scaled to 2 jobs, plus ``launch.sh trusted ADDRESS``; then close and stop.

Writes RESULTS_DIR/{launch,jobqueue}/result.json and RESULTS_DIR/runs.json (the trusted
job's sbatch flags, and any job process still alive after its run was stopped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.deploy.live import client_tls_env  # PYTHONPATH is the repository root

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ["bash", str(ROOT / "deploy" / "slurm" / "launch.sh")]
CLIENT = Path(__file__).with_name("client.py")
TIMEOUT = 120


def fit(address: str, tls: Path, results: Path) -> None:
    results.mkdir()
    # The store goes into the run's own results folder (inside the test's tmp_path, on
    # the "shared file system" of this one node), not into this machine's /tmp.
    env = {
        **os.environ,
        **client_tls_env(tls / "client"),
        "DASK_DPPCA_DATA_DIR": str(results),
    }
    subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            "--scheduler",
            address,
            "--workers",
            "3",
            "--results",
            str(results),
        ],
        env=env,
        check=True,
        timeout=TIMEOUT,
    )


def jobs_alive(standin_state: Path) -> list[str]:
    """Job ids whose process group still exists (after a stop, there should be none)."""
    alive = []
    deadline = time.monotonic() + 15
    for pid_file in sorted(standin_state.glob("*.pid")):
        pid = int(pid_file.read_text())
        while True:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            if time.monotonic() > deadline:
                alive.append(pid_file.stem)
                break
            time.sleep(0.1)
    return alive


def launch_run(tls: Path, state: Path, results: Path, standin_state: Path) -> dict:
    env = {
        **os.environ,
        "DPPCA_TLS": str(tls),
        "DPPCA_STATE": str(state),
        "DPPCA_TRUSTED_SBATCH": "--nodelist=secure01",
    }
    started = subprocess.run(
        [*LAUNCH, "start", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    address = started.stdout.strip().splitlines()[-1]
    job_ids = (state / "jobs").read_text().split()
    try:
        fit(address, tls, results / "launch")
    finally:
        subprocess.run([*LAUNCH, "stop"], env=env, timeout=TIMEOUT, check=True)
    trusted_flags = (standin_state / f"{job_ids[-1]}.flags").read_text().split("\n")
    return {
        "address": address,
        "jobs": job_ids,
        "trusted_flags": [f for f in trusted_flags if f],
        "left_running": jobs_alive(standin_state),
    }


def jobqueue_run(tls: Path, state: Path, results: Path, standin_state: Path) -> dict:
    sys.path.insert(0, str(ROOT / "deploy" / "slurm"))
    from slurm_cluster import slurm_cluster

    env = {**os.environ, "DPPCA_TLS": str(tls), "DPPCA_STATE": str(state)}
    with slurm_cluster(tls) as cluster:
        cluster.scale(2)
        address = cluster.scheduler_address
        subprocess.run([*LAUNCH, "trusted", address], env=env, timeout=TIMEOUT, check=True)
        try:
            fit(address, tls, results / "jobqueue")
        finally:
            subprocess.run([*LAUNCH, "stop"], env=env, timeout=TIMEOUT, check=True)
            job_script = cluster.job_script()
    return {"address": address, "job_script": job_script, "left_running": jobs_alive(standin_state)}


def main() -> None:
    tls, state, results = (Path(arg) for arg in sys.argv[1:4])
    standin_state = Path(os.environ["SBATCH_STANDIN_STATE"])
    runs = {"launch": launch_run(tls, state, results, standin_state)}
    # jobqueue writes the TLS paths of its job scripts unquoted: give it one without spaces.
    plain = Path(os.environ["HOME"]).parent / "tls-link"
    plain.symlink_to(tls)
    runs["jobqueue"] = jobqueue_run(plain, state, results, standin_state)
    (results / "runs.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
