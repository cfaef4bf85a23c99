"""One progress display for a whole analysis: labelled by stage, never going backwards; in a
terminal one line redrawn in place, without one a line every 10 % or 30 s on stderr."""

from __future__ import annotations

import io
import re
import subprocess
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.compute.progress import LINE_EVERY_SECONDS, RunProgress
from tests.cli import CONSOLE_SCRIPT, write_labels, write_store

FRAME = re.compile(r"\[[# ]+\]\s+(\d+)% (.+?) \(stage (\d+)/(\d+)")
LINE = re.compile(r"^analysis:\s+(\d+)% (.+?) \(stage (\d+)/(\d+), \d+ s\)$")


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _frames(text: str) -> list[tuple[int, str]]:
    return [(int(m[1]), m[2]) for m in FRAME.finditer(text)]


def test_the_terminal_form_is_one_line_redrawn_and_never_goes_back():
    stream = FakeTerminal()
    run = RunProgress(["scale", "directions", "scree"], stream)
    assert run.tty
    run.begin("scale")
    run.update(0.5)
    run.compute_done()
    run.update(0.1)  # a new compute of the same stage starts at 0: the share does not drop
    run.begin("directions")
    run.update(0.9)
    run.update(0.2)  # a later, lower report is ignored
    run.begin("scree")
    run.finish()
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, ended once
    frames = _frames(text)
    shares = [share for share, _ in frames]
    assert shares == sorted(shares) and shares[-1] == 100
    assert frames[0][1] == "scale"
    assert {"scale", "directions", "scree", "done"} <= {label for _, label in frames}


def test_without_a_terminal_a_line_every_tenth_or_thirty_seconds():
    stream, clock = io.StringIO(), Clock()
    run = RunProgress(["directions", "scree"], stream, clock=clock)
    assert not run.tty
    run.begin("directions")  # 0 %
    for step in range(1, 21):
        run.update(step / 20 * 0.5)  # small steps: a line only every 10 % of the run
    clock.now += LINE_EVERY_SECONDS  # nothing moved for 30 s: a line all the same
    run.update(0.5)
    run.begin("scree")
    run.finish()
    lines = stream.getvalue().splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    shares = [int(m[1]) for m in parsed]
    assert shares == sorted(shares) and shares[0] == 0 and shares[-1] == 100
    assert len(lines) <= 2 + 10 + 2  # begins, every 10 %, the 30 s line, the end
    assert any(m[2] == "directions" for m in parsed) and any(m[2] == "scree" for m in parsed)
    assert any("30 s" in line for line in lines)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_analyze_as_typed_without_a_terminal_prints_monotone_stage_lines(tmp_path):
    write_store(tmp_path / "data.zarr", n=2000, d=4)
    write_labels(tmp_path / "labels.zarr", n=2000, n_codes=3)
    done = subprocess.run(
        [
            str(CONSOLE_SCRIPT), "analyze", "data.zarr", "-k", "2", "--output", "a.json",
            "--groups", "labels.zarr", "--group-domain", "0,1,2",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("analysis:")]
    parsed = [LINE.match(line) for line in lines]
    assert lines and all(parsed), done.stderr
    shares = [int(m[1]) for m in parsed]
    assert shares == sorted(shares) and shares[-1] == 100
    labels = [m[2] for m in parsed]
    assert labels[0] == "directions" and {"scree", "score map", "done"} <= set(labels)
    assert "\r" not in done.stderr  # no terminal: no bar redrawn in place


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_analyze_in_a_terminal_draws_one_labelled_bar(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    x = np.random.default_rng(2).standard_t(3, size=(2000, 4))  # test data only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dd.analyze(x, n_components=2, progress=True)  # the embedded cluster
    frames = _frames(terminal.getvalue())
    shares = [share for share, _ in frames]
    assert shares == sorted(shares) and shares[-1] == 100
    assert {"directions", "scree", "score map"} <= {label for _, label in frames}
    assert terminal.getvalue().count("\n") == 1
