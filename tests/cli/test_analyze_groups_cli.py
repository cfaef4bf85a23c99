"""``dask-dppca analyze`` with a score map by group, in process: a label array beside the
records in a Zarr group, and one-line errors naming the flag (the typed run on the
embedded cluster, with --groups, is tests/cli/test_analyze_cli.py's).  Seeds make TEST
DATA only.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.cli import EXIT_USAGE, main
from tests.cli import write_labels, write_store


def test_labels_beside_the_records_in_a_zarr_group(tmp_path, capsys):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("X", data=np.random.default_rng(4).standard_normal((600, 3)))
    group.create_array("labels", data=np.arange(600) % 2)
    code = main(
        [
            "analyze",
            str(tmp_path / "g.zarr"),
            "--component",
            "X",
            "--groups",
            "labels",
            "--group-domain",
            "0,1",
            "--score-axes",
            "2,1",
            "--bins",
            "4,5",
            "--score-methods",
            "additive,sparse",
            "-k",
            "2",
            "--scheduler",
            "synchronous",
            "--output",
            str(tmp_path / "r.json"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    smap = PrivateAnalysis.load(tmp_path / "r.json").score_map
    assert smap.groups == ("0", "1", "other") and smap.axes == (1, 0) and smap.bins == (4, 5)
    assert set(smap.histograms) == {"additive", "sparse"}


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--groups", "LABELS"], "--group-domain"),
        (["--group-domain", "0,1"], "--group-domain"),
        (["--groups", "LABELS", "--group-domain", "a,b"], "--group-domain"),
        (["--groups", "LABELS", "--group-domain", "0", "--no-score-map"], "--groups"),
        (["--groups", "/no/such/labels.zarr", "--group-domain", "0"], "groups"),
        (["--score-axes", "1"], "--score-axes"),
        (["--score-axes", "1,1"], "score_axes"),
        (["--bins", "ten,10"], "--bins"),
        (["--score-methods", "kde"], "score_methods"),
    ],
)
@pytest.mark.slow
def test_score_map_errors_are_one_line_naming_the_flag(tmp_path, capsys, extra, needle):
    store = write_store(tmp_path / "x.zarr")
    write_labels(tmp_path / "labels.zarr", n=300)
    extra = [str(tmp_path / "labels.zarr") if a == "LABELS" else a for a in extra]
    code = main(
        ["analyze", store, *extra, "--output", str(tmp_path / "r.json")]
        + ["--scheduler", "synchronous"]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()
