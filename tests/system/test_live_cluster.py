"""A real cluster: `dask scheduler` and `dask worker` processes on loopback, mutual TLS.

The processes are started from the argument lists in deploy/commands.json, the same
ones the deploy/ recipes use (tests/deploy/test_commands.py checks that), with
certificates made here (a CA; scheduler, worker, trusted-worker and client certificates;
and a rogue CA for a client that must be refused).  One worker, holding the trusted
worker's certificate, offers the ``dppca-trusted`` resource.
Every process is started in its own session and killed in a ``finally``; every wait is
bounded.  Seeds generate TEST DATA, and ``random_state`` makes the noise reproducible
so that two releases can be compared bit for bit (never private, hence the filter).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dask
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from distributed import Client, Security
from threadpoolctl import threadpool_limits

import dask_dppca as dd
from dask_dppca import datasets
from dask_dppca.compute import STALL_TIMEOUT_KEY, TRUSTED_RESOURCE
from dask_dppca.compute import cluster as dd_cluster
from dask_dppca.compute.trusted import placement as placement_module
from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY
from dask_dppca.compute.workers import prepare_workers
from dask_dppca.graph import ExactSumLeakError
from dask_dppca.graph import sealed as sealed_module
from tests.live import die_with_parent

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.filterwarnings(
        "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = json.loads((ROOT / "deploy" / "commands.json").read_text())
#: How the tests run the `dask` command line: with this interpreter.
DASK = [sys.executable, "-m", "dask"]
#: Flags the tests add to the recipes' commands: loopback only, no dashboards, a
#: scheduler file to learn the port picked by the OS (--port 0).
TEST_ONLY_FLAGS = (
    "--host",
    "--no-dashboard",
    "--scheduler-file",
    "--local-directory",
    "--name",
    "--death-timeout",
)
START_TIMEOUT = 90  # seconds for a process to come up on a loaded 2-core machine
FIT_TIMEOUT = 120


# -- TLS material ------------------------------------------------------------------


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, key, cert) -> tuple[str, str]:
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".pem")
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


def _certificate(subject, issuer, public_key, signing_key, *, ca: bool):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    return builder.sign(signing_key, hashes.SHA256())


def make_tls_material(folder: Path) -> dict[str, dict[str, str]]:
    """A CA and scheduler/worker/trusted-worker/client certificates signed by it (subject
    ``CN=dask-dppca ROLE``, as deploy/tls/make-certs.sh makes them); a rogue CA and client.

    Returns ``{role: {"ca": ..., "cert": ..., "key": ...}}`` for the roles scheduler,
    worker, trusted-worker, client and rogue (a client whose certificate another CA signed).
    """
    folder.mkdir(parents=True, exist_ok=True)
    material = {}
    ca_key = _key()
    ca_cert = _certificate(
        "dask-dppca test CA", "dask-dppca test CA", ca_key.public_key(), ca_key, ca=True
    )
    ca_path, _ = _write(folder / "ca", ca_key, ca_cert)
    for role in ("scheduler", "worker", "trusted-worker", "client"):
        key = _key()
        cert, key_path = _write(
            folder / role,
            key,
            _certificate(
                f"dask-dppca {role}", "dask-dppca test CA", key.public_key(), ca_key, ca=False
            ),
        )
        material[role] = {"ca": ca_path, "cert": cert, "key": key_path}
    rogue_ca_key = _key()
    rogue_key = _key()
    cert, key_path = _write(
        folder / "rogue",
        rogue_key,
        _certificate("rogue client", "rogue CA", rogue_key.public_key(), rogue_ca_key, ca=False),
    )
    material["rogue"] = {"ca": ca_path, "cert": cert, "key": key_path}
    return material


def security(tls: dict[str, str]) -> Security:
    return Security(
        tls_ca_file=tls["ca"],
        tls_client_cert=tls["cert"],
        tls_client_key=tls["key"],
        require_encryption=True,
    )


# -- the cluster ---------------------------------------------------------------------


def command(name: str, **values) -> list[str]:
    """deploy/commands.json's argument list ``name`` with placeholders filled in."""
    argv = [arg.format(**values) for arg in COMMANDS[name]]
    assert argv[0] == "dask"
    return DASK + argv[1:]


class LiveCluster:
    """A TLS scheduler and workers as separate process groups, all on 127.0.0.1."""

    def __init__(self, folder: Path, tls: dict[str, dict[str, str]]) -> None:
        self.folder = folder
        self.tls = tls
        self.processes: dict[str, subprocess.Popen] = {}
        self.address: str | None = None
        self._count = 0

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=self.folder,
            preexec_fn=die_with_parent,
        )
        log.close()
        self.processes[name] = process
        return process

    def start_scheduler(self) -> str:
        scheduler_file = self.folder / "scheduler.json"
        tls = self.tls["scheduler"]
        argv = command("scheduler", port=0, ca=tls["ca"], cert=tls["cert"], key=tls["key"])
        process = self._spawn(
            "scheduler",
            argv
            + ["--host", "127.0.0.1", "--no-dashboard", "--scheduler-file", str(scheduler_file)],
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"scheduler exited: {self.log('scheduler')}")
            if scheduler_file.exists():
                try:
                    self.address = json.loads(scheduler_file.read_text())["address"]
                    return self.address
                except (ValueError, KeyError):
                    pass
            time.sleep(0.1)
        raise TimeoutError(f"scheduler did not start: {self.log('scheduler')}")

    def add_worker(self, *, trusted: bool = False, role: str | None = None) -> str:
        """Start a worker; ``trusted`` claims the resource, ``role`` picks its certificate
        (default: the trusted worker's for a trusted worker, else the ordinary one)."""
        self._count += 1
        name = f"{'trusted' if trusted else 'worker'}-{self._count}"
        tls = self.tls[role or ("trusted-worker" if trusted else "worker")]
        argv = command(
            "worker",
            scheduler=self.address,
            nthreads=1,
            ca=tls["ca"],
            cert=tls["cert"],
            key=tls["key"],
        )
        if trusted:
            argv += COMMANDS["trusted_worker_extra"]
        local = self.folder / name
        local.mkdir()
        self._spawn(
            name,
            argv
            + [
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--name",
                name,
                "--local-directory",
                str(local),
                "--death-timeout",
                "30",
            ],
        )
        return name

    def kill(self, name: str) -> None:
        """SIGKILL a whole process group (nanny and worker, or the scheduler)."""
        process = self.processes[name]
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=15)


def wait_for_workers(client: Client, n: int, timeout: float = START_TIMEOUT) -> dict:
    client.wait_for_workers(n, timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        if len(workers) == n:
            return workers
        time.sleep(0.1)
    raise TimeoutError(f"expected {n} workers, have {len(workers)}")


def trusted_address(client: Client) -> str:
    workers = client.scheduler_info(n_workers=-1)["workers"]
    (address,) = [a for a, w in workers.items() if TRUSTED_RESOURCE in (w.get("resources") or {})]
    return address


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Test data in a Zarr store the workers read: 6000 x 6 t_1 records in 12 chunks
    (3 blocks: the chunks merged up to the block rule's smallest block)."""
    path = str(tmp_path_factory.mktemp("data") / "x.zarr")
    d = 6
    datasets.write_elliptical_zarr(
        path,
        6000,
        datasets.spiked_spectrum(d, 2, 8.0),
        datasets.random_directions(d, seed=1),
        df=1.0,
        chunk_rows=500,
        seed=2,
    )
    return path


@pytest.fixture(scope="module")
def many_blocks(tmp_path_factory):
    """A store whose 12 chunks stay 12 blocks (78 block-pair tasks): chunks above the
    block rule's smallest block, which the design never merges."""
    from dask_dppca.design import smallest_block_rows

    path = str(tmp_path_factory.mktemp("blocks") / "x.zarr")
    rows = smallest_block_rows(6) + 74
    datasets.write_elliptical_zarr(
        path,
        12 * rows,
        datasets.spiked_spectrum(6, 2, 8.0),
        datasets.random_directions(6, seed=1),
        df=1.0,
        chunk_rows=rows,
        seed=2,
    )
    return path


@pytest.fixture(scope="module")
def live(tmp_path_factory, tls):
    """Scheduler + one trusted worker (more workers are added by the tests)."""
    cluster = LiveCluster(tmp_path_factory.mktemp("cluster"), tls)
    try:
        cluster.start_scheduler()
        cluster.add_worker(trusted=True)
        with Client(
            cluster.address,
            security=security(tls["client"]),
            timeout=START_TIMEOUT,
            set_as_default=False,
        ) as client:
            wait_for_workers(client, 1)
            yield cluster, client
    finally:
        cluster.close()


def local_exact(path):
    """The exact K_hat computed in this process (synchronous scheduler, same chunking).

    With ONE BLAS thread, as in the workers (a nanny starts them with
    OPENBLAS_NUM_THREADS=1, Dask's ``distributed.nanny.pre-spawn-environ``): OpenBLAS
    splits a product's inner sum differently with more threads, so the last bits of
    the kernel's matrix products depend on the BLAS thread count (seen at 300-row
    blocks, d = 6: 5.6e-17 apart).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return dd.kendall_matrix(path, scheduler="synchronous")


@pytest.fixture(scope="module")
def reference(store):
    return local_exact(store)


# -- tests ---------------------------------------------------------------------------


def test_exact_k_hat_is_bitwise_identical_on_1_2_and_3_workers(live, store, reference):
    cluster, client = live
    results = {}
    for n_workers in (1, 2, 3):
        while len(client.scheduler_info(n_workers=-1)["workers"]) < n_workers:
            cluster.add_worker()
            wait_for_workers(client, len(client.scheduler_info(n_workers=-1)["workers"]) + 1)
        results[n_workers] = dd.kendall_matrix(store, scheduler=client)
    for n_workers, k_hat in results.items():
        assert np.array_equal(k_hat, reference), (
            f"{n_workers} worker(s): max |diff| {np.abs(k_hat - reference).max():.3g}"
        )


def test_python_api_fit_over_tls_releases_on_the_trusted_worker_only(live, store, tls, monkeypatch):
    cluster, client = live
    # Any attempt to open a sealed exact sum in this (client) process would go through
    # sealed._unseal: count those calls.
    opened = []
    original = sealed_module._unseal
    monkeypatch.setattr(sealed_module, "_unseal", lambda *args: opened.append(1) or original(*args))
    with threadpool_limits(limits=1, user_api="blas"):  # as in the workers: see local_exact
        local = dd.DPPCA(n_components=2, random_state=11, scheduler="synchronous").fit(store)
    remote = dd.DPPCA(n_components=2, random_state=11, scheduler=client).fit(store)
    # Same seed, same exact K_hat => the same release, bit for bit.
    assert np.array_equal(remote.eigenvalues_, local.eigenvalues_)
    assert np.array_equal(remote.components_, local.components_)
    ticket = client.get_metadata([*RELEASE_METADATA_KEY, remote.privacy_["fit_id"]])
    assert ticket["worker"] == trusted_address(client) == remote.privacy_["released_on"]
    assert remote.privacy_["release_placement"] == (
        "a worker offering 'dppca-trusted' with the trusted worker's TLS certificate"
    )
    assert opened == []

    # A TLS address string, certificates from the Dask configuration.
    with dd_cluster.tls_config(tls["client"]["ca"], tls["client"]["cert"], tls["client"]["key"]):
        by_address = dd.DPPCA(n_components=2, random_state=11, scheduler=cluster.address).fit(store)
    assert np.array_equal(by_address.eigenvalues_, local.eigenvalues_)
    assert opened == []


def test_the_sealed_lane_sums_cannot_be_gathered_by_the_client(live, store):
    """The lanes' partial exact sums move between workers but never open on the client."""
    _, client = live
    from dask_dppca.design import plan_blocks
    from dask_dppca.graph import kernel_sum_graph
    from dask_dppca.io import open_records
    from dask_dppca.kernel import sphere

    records = open_records(store)
    _, plan = plan_blocks(*records.shape, records.row_chunks, "complete", 2)
    lane_sums = kernel_sum_graph(records.blocks(plan.block_sizes), plan, sphere(), 2)
    prepare_workers(client)
    sealed = client.compute(lane_sums[0])
    try:
        with pytest.raises(ExactSumLeakError):
            sealed.result(timeout=FIT_TIMEOUT)
    finally:
        sealed.release()


def test_cli_fit_over_tls(live, store, tls, tmp_path):
    cluster, client = live
    out = tmp_path / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dask_dppca.cli",
            "fit",
            store,
            "-k",
            "2",
            "--no-progress",
            "--scheduler",
            cluster.address,
            "--tls-ca-file",
            tls["client"]["ca"],
            "--tls-cert",
            tls["client"]["cert"],
            "--tls-key",
            tls["client"]["key"],
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=FIT_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert np.array(result["components"]).shape == (2, 6)
    ticket = client.get_metadata([*RELEASE_METADATA_KEY, result["privacy"]["fit_id"]])
    assert ticket["worker"] == trusted_address(client)


def test_connections_without_the_cluster_certificates_are_refused(live, store, tls):
    cluster, _ = live
    host, port = cluster.address.removeprefix("tls://").rsplit(":", 1)
    # A TLS client that trusts the CA but shows no certificate: the server refuses it.
    context = ssl.create_default_context(cafile=tls["client"]["ca"])
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(raw) as wrapped:  # TLS 1.3: refused at the first read
                wrapped.settimeout(5)
                if wrapped.recv(1) == b"":
                    raise ConnectionError("closed by the scheduler")
    # Plain TCP to the TLS port.
    with pytest.raises((OSError, TimeoutError)):
        Client(f"tcp://{host}:{port}", timeout=3, set_as_default=False)
    # A certificate the cluster's CA did not sign.
    with pytest.raises((OSError, TimeoutError)):
        Client(cluster.address, security=security(tls["rogue"]), timeout=3, set_as_default=False)
    # The command line without certificates: a one-line error before any connection.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dask_dppca.cli",
            "fit",
            store,
            "--no-progress",
            "--scheduler",
            cluster.address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "TLS client certificates" in done.stderr and "Traceback" not in done.stderr


def _pair_counter():
    """For ``run_on_scheduler`` (nested, so pickled by value): (pair tasks the scheduler
    knows, those computed: in memory, or released once their sum was taken)."""

    def pair_tasks(dask_scheduler=None) -> tuple[int, int]:
        states = [
            ts.state
            for key, ts in dask_scheduler.tasks.items()
            if str(key).startswith("dppca-pair")
        ]
        return len(states), sum(state in ("memory", "released") for state in states)

    return pair_tasks


_pair_tasks = _pair_counter()


def _slow_reader(seconds: float):
    """Identity on a block after a pause: stretches a fit so a kill lands mid-way.

    Nested, so cloudpickle ships it by value to the workers.  The values, hence the
    exact sum, are those of the store.
    """

    def slow(block):
        import time

        time.sleep(seconds)
        return block

    return slow


def _kill_a_worker_when(
    client, cluster_future, n_tasks: int, done_at: int, spare: str
) -> str | None:
    """Once ``done_at`` of the ``n_tasks`` segment tasks are done, SIGKILL one worker process (not
    ``spare``).  Its nanny restarts it.  Returns the address killed, or None if the
    computation finished first."""
    deadline = time.monotonic() + FIT_TIMEOUT
    while not cluster_future.done():
        assert time.monotonic() < deadline, "the fit did not progress"
        known, done = client.run_on_scheduler(_pair_tasks)
        if known == n_tasks and done >= done_at:
            victims = sorted(
                a for a in client.scheduler_info(n_workers=-1)["workers"] if a != spare
            )
            pid = client.run(os.getpid, workers=victims[:1])[victims[0]]
            os.kill(pid, signal.SIGKILL)
            return victims[0]
        time.sleep(0.02)
    return None


def test_killing_ordinary_workers_mid_fit_changes_nothing(live, tmp_path_factory):
    """SIGKILL non-trusted worker processes twice during one fit (their nannies restart
    them): the release is bitwise the undisturbed one, drawn once, on the trusted worker;
    the exact K_hat under a kill is bitwise the undisturbed one."""
    import dask.array as da

    from dask_dppca.design import merge_chunks, plan_blocks, smallest_block_rows
    from dask_dppca.graph import segment_bounds

    cluster, client = live
    while len(client.scheduler_info(n_workers=-1)["workers"]) < 3:
        cluster.add_worker()
        wait_for_workers(client, len(client.scheduler_info(n_workers=-1)["workers"]) + 1)
    path = str(tmp_path_factory.mktemp("big") / "x.zarr")
    n_blocks = 24
    rows = smallest_block_rows(6) + 74  # chunks the design keeps as blocks (never merged)
    datasets.write_elliptical_zarr(
        path,
        n_blocks * rows,
        datasets.spiked_spectrum(6, 2, 8.0),
        datasets.random_directions(6, seed=1),
        df=1.0,
        chunk_rows=rows,
        seed=3,
    )
    slow = da.from_zarr(path).map_blocks(_slow_reader(0.4), dtype=np.float64)
    assert merge_chunks(slow.chunks[0], 6) == slow.chunks[0]
    # The fit's segment tasks on these one-thread workers (24 blocks, 300 block pairs).
    threads = len(client.scheduler_info(n_workers=-1)["workers"])
    _, plan = plan_blocks(n_blocks * rows, 6, slow.chunks[0], "auto", threads)
    n_tasks = len(segment_bounds(plan, threads, reads_in_tasks=False))
    assert n_tasks >= 6
    undisturbed = dd.DPPCA(n_components=2, random_state=5, scheduler=client).fit(path)

    trusted = trusted_address(client)
    with ThreadPoolExecutor(1) as pool:
        fit = pool.submit(dd.DPPCA(n_components=2, random_state=5, scheduler=client).fit, slow)
        kills = [
            _kill_a_worker_when(client, fit, n_tasks, 1, trusted),
            _kill_a_worker_when(client, fit, n_tasks, n_tasks // 2, trusted),
        ]
        disturbed = fit.result(timeout=FIT_TIMEOUT)
    assert None not in kills, f"the fit finished before both kills ({kills})"
    assert np.array_equal(disturbed.eigenvalues_, undisturbed.eigenvalues_)
    assert np.array_equal(disturbed.components_, undisturbed.components_)
    fit_id = disturbed.privacy_["fit_id"]
    tickets = client.get_metadata(list(RELEASE_METADATA_KEY))
    assert tickets[fit_id]["worker"] == trusted  # one ticket per fit id (a dict key)

    wait_for_workers(client, 3)  # the nannies have restarted the killed workers
    with ThreadPoolExecutor(1) as pool:
        exact = pool.submit(dd.kendall_matrix, slow, scheduler=client)
        killed = _kill_a_worker_when(client, exact, n_tasks, 1, trusted)
        disturbed_k_hat = exact.result(timeout=FIT_TIMEOUT)
    assert killed is not None
    assert np.array_equal(disturbed_k_hat, local_exact(path))


#: How long a fit may take to fail once its trusted worker or scheduler is gone.
FAILURE_BOUND = 90


def test_losing_the_trusted_worker_or_the_scheduler_fails_clearly(
    tmp_path, tls, store, many_blocks
):
    """Kill the trusted worker mid-fit: the fit fails, naming it, and releases nothing.
    Kill the scheduler: the next fit fails with a clear error within a bounded time."""
    import dask.array as da

    cluster = LiveCluster(tmp_path, tls)
    try:
        cluster.start_scheduler()
        trusted = cluster.add_worker(trusted=True)
        cluster.add_worker()
        with Client(
            cluster.address,
            security=security(tls["client"]),
            timeout=START_TIMEOUT,
            set_as_default=False,
        ) as client:
            wait_for_workers(client, 2)
            slow = da.from_zarr(many_blocks).map_blocks(_slow_reader(0.5), dtype=np.float64)
            started = time.monotonic()
            pool = ThreadPoolExecutor(1)
            # The fit waits the stall timeout for the trusted worker to come back (30 s by
            # default; what ends the wait is under test here, not its length).
            with dask.config.set({STALL_TIMEOUT_KEY: 5}):
                try:
                    fit = pool.submit(dd.DPPCA(n_components=2, scheduler=client).fit, slow)
                    # A first segment done (4 on these two one-thread workers).
                    while not fit.done() and client.run_on_scheduler(_pair_tasks)[1] < 1:
                        assert time.monotonic() - started < FAILURE_BOUND
                        time.sleep(0.05)
                    cluster.kill(trusted)
                    with pytest.raises(RuntimeError, match="trusted"):
                        fit.result(timeout=FAILURE_BOUND)
                finally:
                    pool.shutdown(wait=False, cancel_futures=True)  # never wait on a hung fit
            tickets = client.get_metadata(list(RELEASE_METADATA_KEY), default={})
            assert tickets == {}  # the release never ran: no noise drawn, nothing released

        cluster.kill("scheduler")
        started = time.monotonic()
        with dd_cluster.tls_config(
            tls["client"]["ca"], tls["client"]["cert"], tls["client"]["key"]
        ):
            with pytest.raises(ValueError, match="no Dask scheduler answered"):
                dd.DPPCA(scheduler=cluster.address).fit(store)
        assert time.monotonic() - started < FAILURE_BOUND
    finally:
        cluster.close()


def _failing_on_the_scheduler():
    """Nested, so it is pickled by value and raises on the scheduler."""

    def check(dask_scheduler=None):
        raise ModuleNotFoundError("No module named 'dask_dppca'")

    return check


def test_an_impostor_claiming_the_trusted_resource_gets_no_release(
    tmp_path, tls, store, monkeypatch
):
    """A worker started with the ordinary worker key and ``--resources dppca-trusted=1``
    (an impostor) never runs the release: the scheduler reads each worker's TLS
    certificate, and a claimant whose certificate is not the trusted worker's stops the
    fit before anything is drawn.  With that check switched off, the same impostor
    does get the release: the check is what stops it."""
    from dask_dppca.compute.trusted import trust

    cluster = LiveCluster(tmp_path, tls)
    try:
        cluster.start_scheduler()
        trusted = cluster.add_worker(trusted=True)  # trusted-worker.pem
        impostor = cluster.add_worker(trusted=True, role="worker")  # worker.pem + the resource
        with Client(
            cluster.address,
            security=security(tls["client"]),
            timeout=START_TIMEOUT,
            set_as_default=False,
        ) as client:
            workers = wait_for_workers(client, 2)
            names = {info["name"]: address for address, info in workers.items()}
            identities = client.run_on_scheduler(trust.worker_identities)
            assert identities[names[trusted]]["common_name"] == trust.TRUSTED_WORKER_COMMON_NAME
            assert identities[names[impostor]]["common_name"] == "dask-dppca worker"
            assert all(TRUSTED_RESOURCE in i["resources"] for i in identities.values())

            with pytest.raises(
                trust.UntrustedWorkerError, match=names[impostor].replace(".", r"\.")
            ):
                dd.DPPCA(n_components=2, scheduler=client).fit(store)
            assert client.get_metadata(list(RELEASE_METADATA_KEY), default={}) == {}

            # Only the trusted worker's certificate makes a worker eligible: without the
            # impostor the same cluster releases, on the trusted worker.
            cluster.kill(impostor)
            wait_for_workers(client, 1)
            genuine = dd.DPPCA(n_components=2, scheduler=client).fit(store).privacy_["fit_id"]
            assert client.get_metadata([*RELEASE_METADATA_KEY, genuine])["worker"] == names[trusted]

            # The broken mechanism: no certificate check.  An impostor alone with the
            # resource then receives the release (and so the exact K_hat and the draw).
            cluster.kill(trusted)
            second = cluster.add_worker(trusted=True, role="worker")
            deadline = time.monotonic() + START_TIMEOUT
            while {w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values()} != {
                second
            }:
                assert time.monotonic() < deadline, (
                    "the second impostor did not replace the trusted worker"
                )
                time.sleep(0.1)
            (second_address,) = client.scheduler_info(n_workers=-1)["workers"]
            monkeypatch.setattr(placement_module, "verified_placement", lambda client, p, r: p)
            broken = dd.DPPCA(n_components=2, scheduler=client).fit(store).privacy_["fit_id"]
            assert client.get_metadata([*RELEASE_METADATA_KEY, broken])["worker"] == second_address
            monkeypatch.undo()
            with pytest.raises(trust.UntrustedWorkerError, match="dask-dppca worker"):
                dd.DPPCA(n_components=2, scheduler=client).fit(store)
            # A scheduler that cannot run the check (here: it raises there, as one
            # without dask-dppca would): the fit refuses rather than trust the claim.
            monkeypatch.setattr(trust, "worker_identities", _failing_on_the_scheduler())
            with pytest.raises(trust.UntrustedWorkerError, match="could not check"):
                dd.DPPCA(n_components=2, scheduler=client).fit(store)
            assert client.get_metadata(list(RELEASE_METADATA_KEY)).keys() == {genuine, broken}
    finally:
        cluster.close()
