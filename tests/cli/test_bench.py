"""``dask-dppca bench``, as typed (README), prints positive, parseable figures."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.cli import CONSOLE_SCRIPT

FIGURE = re.compile(r"^\s+(?P<label>.+?)\s{2,}(?P<value>[0-9.]+)(?: s)?\b")


@pytest.mark.cluster
def test_bench_prints_the_kernel_against_gemm_and_the_default_path_against_threads():
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "bench"], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = {}
    for line in done.stdout.splitlines():
        match = FIGURE.match(line)
        if match:
            figures[match["label"]] = float(match["value"])
    labels = [
        "kernel",
        "kernel rate / GEMM rate",
        "scheduler='threads'",
        "default path, first fit",
        "default path, second fit",
    ]
    for label in labels:
        assert figures.get(label, 0) > 0, (label, done.stdout)
    assert any(
        label.startswith("GEMM (2048 x 30) @ (30 x 2048)") and value > 0
        for label, value in figures.items()
    ), done.stdout
    # The ratio printed is the ratio of the times printed (GEMM time / kernel time).
    gemm = next(v for k, v in figures.items() if k.startswith("GEMM"))
    assert figures["kernel rate / GEMM rate"] == pytest.approx(
        gemm / figures["kernel"], rel=0.05, abs=2e-3
    )
