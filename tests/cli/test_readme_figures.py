"""The README's picture of the report is the report of today: its sections and figures,
recorded when the picture was taken (docs/figures/make_report_figure.py), are those the
report has now.  Seeds make DEMO data only.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures"


def _script():
    spec = importlib.util.spec_from_file_location(
        "make_report_figure", FIGURES / "make_report_figure.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_readme_report_picture_shows_the_report_of_today(tmp_path):
    script = _script()
    assert "(docs/figures/report.png)" in (ROOT / "README.md").read_text()
    assert (FIGURES / "report.png").stat().st_size > 10_000
    recorded = (FIGURES / script.SECTIONS).read_text()
    now = script.sections(script.demo_report(tmp_path))
    assert now == recorded, (
        "the report changed since docs/figures/report.png was taken: run "
        "python docs/figures/make_report_figure.py"
    )
    assert "section: Private score map" in now and "figure: score map per group" in now


def test_sections_lists_headings_and_figures():
    html = '<h1>T</h1><h2 id="x">A</h2><figure><img src="data:" alt="scree plot"></figure>'
    assert _script().sections(html) == "section: T\nsection: A\nfigure: scree plot\n"
