"""A TLS dask-jobqueue SLURMCluster for dask-dppca, from deploy/slurm/jobqueue.yaml.

    from slurm_cluster import slurm_cluster      # python deploy/slurm/slurm_cluster.py N
    cluster = slurm_cluster("~/dppca-tls")       # the folders made by deploy/tls/make-certs.sh
    cluster.scale(4)                             # ordinary worker jobs
    # the trusted worker, its own job: deploy/slurm/launch.sh trusted <cluster.scheduler_address>

The scheduler runs in this Python process with the scheduler's certificate; the client
of this process uses the client's; jobqueue writes the worker's into every job script.
The configuration of jobqueue.yaml beside this file is loaded under your own Dask
configuration (yours wins).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dask.config
import yaml
from distributed import Security

CONFIG = Path(__file__).with_name("jobqueue.yaml")


def tls_security(tls_dir: str | os.PathLike) -> Security:
    """Scheduler, client and (for the job scripts) worker certificates of the role
    folders of ``tls_dir``; encryption required."""
    tls = Path(tls_dir).expanduser()
    return Security(
        tls_ca_file=str(tls / "scheduler" / "ca.pem"),
        tls_scheduler_cert=str(tls / "scheduler" / "scheduler.pem"),
        tls_scheduler_key=str(tls / "scheduler" / "scheduler.key"),
        tls_worker_cert=str(tls / "worker" / "worker.pem"),
        tls_worker_key=str(tls / "worker" / "worker.key"),
        tls_client_cert=str(tls / "client" / "client.pem"),
        tls_client_key=str(tls / "client" / "client.key"),
        require_encryption=True,
    )


def load_config() -> None:
    """jobqueue.yaml as defaults, after jobqueue's own: a value you set yourself wins."""
    import dask_jobqueue  # noqa: F401 - loads jobqueue's defaults first

    dask.config.update_defaults(yaml.safe_load(CONFIG.read_text()))


def slurm_cluster(tls_dir: str | os.PathLike, **kwargs):
    """``dask_jobqueue.SLURMCluster`` with TLS and the settings of jobqueue.yaml."""
    from dask_jobqueue import SLURMCluster

    load_config()
    return SLURMCluster(security=tls_security(tls_dir), **kwargs)


if __name__ == "__main__":  # python slurm_cluster.py N_WORKERS: start and print the address
    import time

    with slurm_cluster(os.environ["DPPCA_TLS"]) as cluster:
        cluster.scale(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
        print(cluster.scheduler_address, flush=True)
        print(cluster.job_script(), file=sys.stderr)
        while True:
            time.sleep(60)
