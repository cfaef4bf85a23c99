"""Object storage end to end: a real S3-compatible server, workers without credentials.

The tests start moto's server mode on 127.0.0.1 with IAM authentication on (wrong
credentials are refused as S3 refuses them), create a user and its key, and write Zarr
v2 and v3 arrays and a group there.  The cluster is a ``dask scheduler`` and two
``dask worker`` processes (tests/live.py's PlainCluster) started with a clean
environment: no AWS_* or FSSPEC_* variable and an empty HOME (no ~/.aws), so they can
read only with the storage options that travel inside the graph.  Every process is killed
in a ``finally``; every wait is bounded.  Seeds generate TEST DATA, and ``random_state``
makes the noise reproducible so that releases can be compared bit for bit (never private).
"""

from __future__ import annotations

import collections
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import numpy as np
import pytest
import requests
import s3fs
import xarray as xr
import zarr
from distributed import Client

import dask_dppca as dd
from dask_dppca.cli import EXIT_USAGE, main
from dask_dppca.compute.shape import cluster_shape
from dask_dppca.decomposition import estimator
from dask_dppca.design import plan_blocks
from dask_dppca.graph import graph_layout
from dask_dppca.io import MissingChunkError, open_records
from dask_dppca.privacy.mechanisms.noise import SeededSampler
from tests.live import START_TIMEOUT, PlainCluster, die_with_parent, stop

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.filterwarnings(
        "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
    ),
]

RUN_TIMEOUT = 180  # seconds for one CLI run
N, D, CHUNK = 2400, 6, 400
BUCKET = "data"
#: Lines a clean failure must not print (tracebacks, aiohttp/s3fs teardown noise).
NOISE = ("Traceback", "Exception ignored", "Unclosed", "Task was destroyed")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _spawn(argv, log: Path, env: dict, cwd: Path) -> subprocess.Popen:
    with open(log, "wb") as stream:
        return subprocess.Popen(
            argv,
            stdout=stream,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def _clean_env(home: Path) -> dict:
    """This environment without AWS_*/FSSPEC_* variables, HOME an empty folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    home.mkdir(exist_ok=True)
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


# -- the S3 server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server with IAM auth on: ``{"options", "url", "secret", "log", "fs"}``."""
    folder = tmp_path_factory.mktemp("s3")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
    server = _spawn(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        folder / "moto.log",
        env,
        folder,
    )
    previous = os.environ.get("AWS_EC2_METADATA_DISABLED")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # botocore never probes a metadata address
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                requests.get(f"{url}/moto-api/", timeout=2)
                break
            except requests.ConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((folder / "moto.log").read_text()) from None
                time.sleep(0.2)
        setup = dict(
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="analyst")
        iam.put_user_policy(
            UserName="analyst",
            PolicyName="s3",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
                }
            ),
        )
        key = iam.create_access_key(UserName="analyst")["AccessKey"]
        boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
        # From here on every request must be signed with a key moto knows.
        requests.post(f"{url}/moto-api/reset-auth", data=b"0", timeout=10).raise_for_status()
        options = {
            "key": key["AccessKeyId"],
            "secret": key["SecretAccessKey"],
            "client_kwargs": {"endpoint_url": url, "region_name": "us-east-1"},
        }
        yield {
            "options": options,
            "url": url,
            "secret": key["SecretAccessKey"],
            "log": folder / "moto.log",
            "fs": s3fs.S3FileSystem(**options),
        }
    finally:
        stop([server])
        if previous is None:
            os.environ.pop("AWS_EC2_METADATA_DISABLED", None)
        else:
            os.environ["AWS_EC2_METADATA_DISABLED"] = previous


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(21).standard_normal((N, D)) * np.arange(1, D + 1)  # test data


@pytest.fixture(scope="module")
def stores(s3, x, tmp_path_factory):
    """The same records on S3 (v2, v3, a nested group member) and in a local store."""
    options = s3["options"]
    for name, zarr_format in (("v2", 2), ("v3", 3)):
        array = zarr.open_array(
            f"s3://{BUCKET}/{name}.zarr",
            mode="w",
            shape=x.shape,
            chunks=(CHUNK, D),
            dtype="f8",
            zarr_format=zarr_format,
            storage_options=options,
        )
        array[:] = x
    group = zarr.open_group(f"s3://{BUCKET}/group.zarr", mode="w", storage_options=options)
    group.create_group("sub").create_array("records", shape=x.shape, chunks=(CHUNK, D), dtype="f8")[
        :
    ] = x
    group.create_array("other", shape=(3,), dtype="f8")[:] = 1.0
    local = tmp_path_factory.mktemp("local") / "x.zarr"
    zarr.open_array(str(local), mode="w", shape=x.shape, chunks=(CHUNK, D), dtype="f8")[:] = x
    return {
        "v2": (f"s3://{BUCKET}/v2.zarr", None),
        "v3": (f"s3://{BUCKET}/v3.zarr", None),
        "group": (f"s3://{BUCKET}/group.zarr", "sub/records"),
        "local": str(local),
    }


# -- the cluster ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``dask scheduler`` + 2 ``dask worker`` processes without any credentials."""
    folder = tmp_path_factory.mktemp("cluster")
    with PlainCluster(folder, env=_clean_env(folder / "home")) as live:
        for i in range(2):
            live.add_worker(f"worker-{i}")
        with Client(live.address, timeout=START_TIMEOUT, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_TIMEOUT)
            yield {"client": client, "address": live.address, "folder": folder}


def _logs(cluster) -> str:
    return "".join(p.read_text(errors="replace") for p in cluster["folder"].glob("*.log"))


def _assert_no_secret(secret: str, *texts) -> None:
    for text in texts:
        assert secret not in text, "a secret was printed"


def _fit(source, cluster, **kwargs):
    est = dd.DPPCA(n_components=2, random_state=0, scheduler=cluster["client"])
    return est.fit(source, **kwargs)


# -- tests ---------------------------------------------------------------------------


def test_the_workers_have_no_credentials_of_their_own(s3, stores, cluster):
    client = cluster["client"]
    names = client.run(lambda: sorted(k for k in os.environ if k.startswith(("AWS_", "FSSPEC_"))))
    assert set(map(tuple, names.values())) == {()}
    endpoint_only = {"client_kwargs": s3["options"]["client_kwargs"]}

    def read_without_options():
        import s3fs

        try:
            s3fs.S3FileSystem(skip_instance_cache=True, **endpoint_only).cat(
                f"{BUCKET}/v3.zarr/zarr.json"
            )
        except Exception as error:
            return type(error).__name__
        return "read"

    assert "read" not in client.run(read_without_options).values()


# Per run, not per input: the fit's random id and the worker the scheduler gave the release
# to (no trusted worker here: whichever holds the final sum).
PER_RUN_KEYS = {"fit_id", "released_on"}


def _per_input(privacy: dict) -> dict:
    return {k: v for k, v in privacy.items() if k not in PER_RUN_KEYS}


@pytest.mark.parametrize("case", ["v2", "v3", "group"])
def test_a_fit_on_s3_equals_the_local_fit_bitwise(s3, stores, cluster, case):
    url, component = stores[case]
    remote = _fit(url, cluster, component=component, storage_options=s3["options"])
    local = _fit(stores["local"], cluster)
    assert np.array_equal(remote.components_, local.components_)
    assert np.array_equal(remote.eigenvalues_, local.eigenvalues_)
    assert _per_input(remote.privacy_) == _per_input(local.privacy_)
    _assert_no_secret(s3["secret"], json.dumps(remote.privacy_), repr(remote))


def test_xarray_opened_from_s3_fits_on_workers_without_credentials(s3, x, stores, cluster):
    url = f"s3://{BUCKET}/dataset.zarr"
    xr.Dataset({"records": (("record", "feature"), x)}).to_zarr(
        url, storage_options=s3["options"], encoding={"records": {"chunks": (CHUNK, D)}}
    )
    opened = xr.open_zarr(url, storage_options=s3["options"])
    remote = _fit(opened, cluster, component="records")
    local = _fit(stores["local"], cluster)
    assert np.array_equal(remote.eigenvalues_, local.eigenvalues_)


def test_each_chunk_is_read_as_the_layout_says(s3, stores, cluster):
    """Counted by the server: GET requests per chunk object during one fit, against the
    graph's layout (a worker task a worker: each chunk its blocks hold rows of, once)."""
    log = s3["log"]
    start = log.stat().st_size
    design = dd.RegularDesign(k=1, block_size=300, seed=0)  # blocks cut across the chunks
    client = cluster["client"]
    est = dd.DPPCA(n_components=2, random_state=0, scheduler=client, design=design)
    est.fit(stores["v3"][0], storage_options=s3["options"])
    with open(log, "rb") as stream:
        stream.seek(start)
        requests_seen = stream.read().decode(errors="replace")
    gets = collections.Counter(re.findall(r'"GET /data/v3\.zarr/(c/\d+/\d+) HTTP', requests_seen))
    assert sorted(gets) == sorted(f"c/{i}/0" for i in range(N // CHUNK))
    shape = cluster_shape(client)
    records = open_records(stores["v3"][0], storage_options=s3["options"])
    _, plan = plan_blocks(N, D, records.row_chunks, design, shape.n_threads)
    blocks = records.blocks(plan.block_sizes)
    layout = graph_layout(blocks, plan, shape.n_threads, shape.worker_tasks)
    assert layout.worker_tasks  # the fit ran worker tasks, as the layout counts them
    assert sum(gets.values()) * CHUNK == sum(layout.task_rows)


def test_a_missing_chunk_on_s3_names_the_store_and_the_worker(s3, x, cluster):
    url = f"s3://{BUCKET}/holes.zarr"
    zarr.open_array(
        url, mode="w", shape=x.shape, chunks=(CHUNK, D), dtype="f8", storage_options=s3["options"]
    )[:] = x
    s3["fs"].rm_file(f"{BUCKET}/holes.zarr/c/3/0")
    est = dd.DPPCA(n_components=2, random_state=0, scheduler=cluster["client"])
    with dd.PrivacyBudget(epsilon=10, delta=1e-5) as budget:
        with pytest.raises(MissingChunkError) as error:
            est.fit(url, storage_options=s3["options"])
    message = str(error.value)
    assert f"chunk 'c/3/0' of '{url}' is missing where worker tcp://127.0.0.1:" in message
    assert "\n" not in message
    assert budget.spent == [] and not hasattr(est, "components_")
    _assert_no_secret(s3["secret"], message, _logs(cluster))


def test_what_prints_the_graph_shows_no_secret(s3, stores):
    """The read tasks carry the options (that is how they reach the workers) but their
    repr, the array's and the graph's never show them (dashboards, logs, errors)."""
    data = open_records(stores["v3"][0], storage_options=s3["options"]).array
    graph = dict(data.__dask_graph__())
    _assert_no_secret(
        s3["secret"],
        repr(data),
        str(data.dask),
        *map(repr, graph.values()),
        *map(str, graph.values()),
    )


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "dask_dppca.cli", "fit", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=cwd,
    )


def _option_flags(options) -> list[str]:
    endpoint = options["client_kwargs"]["endpoint_url"]
    return [
        "--storage-option",
        f"key={options['key']}",
        "--storage-option",
        f"secret={options['secret']}",
        "--storage-option",
        f"client_kwargs.endpoint_url={endpoint}",
        "--storage-option",
        "client_kwargs.region_name=us-east-1",
    ]


def test_cli_reads_s3_and_writes_s3(s3, stores, cluster, tmp_path):
    out = f"s3://{BUCKET}/results/run-1/result.json"
    done = _cli(
        stores["v3"][0],
        "--scheduler",
        cluster["address"],
        "--no-progress",
        *_option_flags(s3["options"]),
        "--output",
        out,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out}:")
    text = s3["fs"].cat_file(out.removeprefix("s3://")).decode()
    result = json.loads(text)
    assert np.array(result["components"]).shape == (2, D) and result["privacy"]["n_samples"] == N
    assert s3["fs"].ls(f"{BUCKET}/results/run-1") == [f"{BUCKET}/results/run-1/result.json"]
    assert not list(tmp_path.iterdir())  # no local folder named "s3:"
    _assert_no_secret(s3["secret"], done.stdout, done.stderr, text, _logs(cluster))


def test_cli_result_on_s3_equals_the_local_one_bitwise(
    s3, stores, cluster, tmp_path, monkeypatch, capsys
):
    """The same command line on S3 and on a local copy; noise seeded (tests only)."""
    monkeypatch.setattr(estimator, "_noise_sampler", lambda d, random_state: SeededSampler(0))
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps(s3["options"]))
    common = ["--scheduler", cluster["address"], "--no-progress", "-k", "3"]
    out = f"s3://{BUCKET}/results/run-2/result.json"
    assert (
        main(
            [
                "fit",
                stores["group"][0],
                "--component",
                "sub/records",
                *common,
                "--storage-options-json",
                str(options_file),
                "--output",
                out,
            ]
        )
        == 0
    )
    assert main(["fit", stores["local"], *common, "--output", str(tmp_path / "r.json")]) == 0
    remote = json.loads(s3["fs"].cat_file(out.removeprefix("s3://")))
    local = json.loads((tmp_path / "r.json").read_text())
    for result in (remote, local):
        result["privacy"] = _per_input(result["privacy"])
        # Where the input was and when the fit ran differ by construction.
        for key in ("input", "created", "fit_seconds"):
            result.pop(key)
    assert remote == local
    _assert_no_secret(s3["secret"], *capsys.readouterr())


BAD_CASES = ("wrong-secret", "wrong-secret-output", "no-bucket", "dead-endpoint")


def test_bad_credentials_and_endpoints_fail_cleanly(s3, stores, tmp_path):
    """One line, exit 2, nothing written, no teardown noise, no secret: as a user types it.

    The four command lines run at the same time (each waits on the network, the dead
    endpoint on botocore's retries)."""
    wrong = s3["secret"][:-4] + "XXXX"
    runs = {}
    for case in BAD_CASES:
        options = json.loads(json.dumps(s3["options"]))
        folder = tmp_path / case
        folder.mkdir()
        source, out = stores["v3"][0], str(folder / "result.json")
        if case.startswith("wrong-secret"):
            options["secret"] = wrong
        if case == "wrong-secret-output":
            source, out = stores["local"], f"s3://{BUCKET}/results/wrong/result.json"
        if case == "no-bucket":
            source = "s3://no-such-bucket/x.zarr"
        if case == "dead-endpoint":
            options["client_kwargs"]["endpoint_url"] = f"http://127.0.0.1:{_free_port()}"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dask_dppca.cli",
                "fit",
                source,
                *_option_flags(options),
                "--output",
                out,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=folder,
        )
        runs[case] = (process, out if case == "wrong-secret-output" else source, folder)
    for case, (process, shown, folder) in runs.items():
        try:
            stdout, stderr = process.communicate(timeout=RUN_TIMEOUT)
        finally:
            process.kill()
        assert process.returncode == EXIT_USAGE, (case, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, (case, stderr)
        assert lines[0].startswith("dask-dppca: error: ") and repr(shown) in lines[0], lines[0]
        assert not any(noise in stderr + stdout for noise in NOISE), (case, stderr)
        assert not list(folder.iterdir()), case
        _assert_no_secret(s3["secret"], stdout, stderr)
        _assert_no_secret(wrong, stdout, stderr)
    assert not s3["fs"].exists(f"{BUCKET}/results/wrong")


def test_bench_measures_reads_on_s3_and_the_plan_uses_them(
    s3, stores, tmp_path, monkeypatch, capsys
):
    """``dask-dppca bench --save --reads-at s3://...``: the read rate and a request's fixed
    cost measured on the real server, saved under ``s3/zstd`` and used by a plan of an S3
    store; the benchmark stores are removed and no secret is printed.  (The rest of the
    model is a stand-in: this test is about the reads.)"""
    from dask_dppca.cli import measure
    from dask_dppca.planning.machine import MachineModel, load_machine_model

    stand_in = MachineModel({8: 2e8}, {"local/zstd": 3e8}, 2e-3, 0.5, 2**28, "stand-in")
    monkeypatch.setattr(measure, "measure_machine_model", lambda quick=False: stand_in)
    path = tmp_path / "machine.json"
    argv = ["bench", "--save", str(path), "--quick", "--reads-at", f"s3://{BUCKET}/scratch"]
    assert main([*argv, *_option_flags(s3["options"])]) == 0
    out = capsys.readouterr()
    _assert_no_secret(s3["secret"], out.out, out.err)
    assert re.search(r"reads, s3/zstd +[0-9.]+ MiB/s a thread, [0-9.]+ ms a read", out.out)
    model = load_machine_model(path)
    rate, call = model.read_bytes_per_second["s3/zstd"], model.read_call_seconds["s3/zstd"]
    assert rate > 0 and 0 < call < 1.0  # a request's round trip, on 127.0.0.1
    assert s3["fs"].find(f"{BUCKET}/scratch") == []
    plan = dd.DPPCA(n_components=2).plan(
        stores["v3"][0], storage_options=s3["options"], machine=model
    )
    assert plan.time["read_rate_of"] == "s3/zstd"
    n_blocks, threads = plan.design["n_blocks"], plan.cluster.n_threads
    reads = (plan.bytes_read / rate + n_blocks * call) / threads
    assert plan.time["read_seconds"] == pytest.approx(reads, rel=1e-12)


def test_simplecache_serves_a_repeated_fit_from_local_disk(s3, stores, cluster, tmp_path):
    """``simplecache::`` (README): the second fit sends no chunk GET to the server."""
    url = f"simplecache::{stores['v3'][0]}"
    options = {"s3": s3["options"], "simplecache": {"cache_storage": str(tmp_path / "cache")}}
    log = s3["log"]
    gets = []
    for _ in range(2):
        start = log.stat().st_size
        est = _fit(url, cluster, storage_options=options)
        with open(log, "rb") as stream:
            stream.seek(start)
            gets.append(len(re.findall(r'"GET /data/v3\.zarr/c/', stream.read().decode())))
    assert gets == [N // CHUNK, 0]
    assert np.array_equal(est.eigenvalues_, _fit(stores["local"], cluster).eigenvalues_)


def _readme_blocks() -> tuple[str, str]:
    """The Python and shell blocks of docs/operations.md's object-storage section."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = readme.split("## Data on object storage", 1)[1].split("\n## ", 1)[0]
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return python, shell


@pytest.fixture
def readme_bucket(s3, x, tmp_path):
    """my-bucket/records.zarr and ./s3.json as the README assumes; a clean environment."""
    options = s3["options"]
    if not s3["fs"].exists("my-bucket"):
        boto3.client(
            "s3",
            endpoint_url=s3["url"],
            region_name="us-east-1",
            aws_access_key_id=options["key"],
            aws_secret_access_key=options["secret"],
        ).create_bucket(Bucket="my-bucket")
    zarr.open_array(
        "s3://my-bucket/records.zarr",
        mode="w",
        shape=x.shape,
        chunks=(CHUNK, D),
        dtype="f8",
        storage_options=options,
    )[:] = x
    (tmp_path / "s3.json").write_text(json.dumps(options))
    env = _clean_env(tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {"cwd": tmp_path, "env": env}


def _run_readme_block(argv, readme_bucket, secret):
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=readme_bucket["cwd"],
        env=readme_bucket["env"],
    )
    assert done.returncode == 0, done.stderr
    assert not any(noise in done.stderr for noise in NOISE), done.stderr
    _assert_no_secret(secret, done.stdout, done.stderr)
    return done


def test_readme_python_example_runs_as_written(s3, readme_bucket):
    """Verbatim, on the default embedded cluster: the credentials come only from s3.json."""
    python, _ = _readme_blocks()
    done = _run_readme_block([sys.executable, "-c", python], readme_bucket, s3["secret"])
    assert done.stdout.lstrip().startswith("[[")  # print(est.components_)


def test_readme_command_line_runs_as_written(s3, readme_bucket):
    _, shell = _readme_blocks()
    _run_readme_block(["bash", "-c", shell], readme_bucket, s3["secret"])
    result = json.loads(s3["fs"].cat_file("my-bucket/results/result.json"))
    assert np.array(result["components"]).shape == (2, D)
    _assert_no_secret(s3["secret"], json.dumps(result))
