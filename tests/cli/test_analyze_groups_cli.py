"""``dask-dppca analyze`` with a score map by group: typed as a user would (default flags,
embedded cluster), a label array beside the records in a Zarr group, and one-line errors
naming the flag.  Seeds make TEST DATA only.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import zarr

from dask_dppca.analysis import PrivateAnalysis
from dask_dppca.cli import EXIT_USAGE, main
from tests.cli import CONSOLE_SCRIPT, write_store

N = 2000


def _labels(path, n=N):
    codes = np.random.default_rng(3).integers(0, 4, n)  # test data only; 3 is outside
    z = zarr.open_array(str(path), mode="w", shape=(n,), chunks=(500,), dtype="i8")
    z[:] = codes
    return codes


@pytest.mark.cluster
def test_analyze_by_group_as_typed_writes_every_plot(tmp_path):
    write_store(tmp_path / "x.zarr", n=N, d=4)
    codes = _labels(tmp_path / "labels.zarr")
    (tmp_path / "plots").mkdir()
    done = subprocess.run(
        f"{CONSOLE_SCRIPT} analyze x.zarr -k 2 --epsilon 3 --delta 1e-5 --output result.json "
        "--plots plots --groups labels.zarr --group-domain 0,1,2".split(),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    split = out.index("privacy split of the total (epsilon=3, delta=1e-05)")
    assert split < out.index("frame: median of PC1") < out.index("wrote")
    assert "noisy group sizes" in out[split : out.index("frame: median of PC1")]
    result = PrivateAnalysis.load(tmp_path / "result.json")
    smap = result.score_map
    assert smap.groups == ("0", "1", "2", "other")
    sizes = smap.group_sizes()
    for code in range(3):  # noisy, near the exact sizes (sigma about 14)
        assert abs(sizes[str(code)] - (codes == code).sum()) < 100
    assert result.meta["composed_epsilon"] <= 3.0
    assert {row["released_on"] for row in result.privacy if row["stage"] == "score_map"} == {
        "a worker offering 'dppca-trusted'"
    }
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "pve_topk.png",
        "pve_total.png",
        "score_map.png",
        "score_map_groups.png",
        "scree.png",
        "synthetic.png",
    ]


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
def test_score_map_errors_are_one_line_naming_the_flag(tmp_path, capsys, extra, needle):
    store = write_store(tmp_path / "x.zarr")
    _labels(tmp_path / "labels.zarr", n=300)
    extra = [str(tmp_path / "labels.zarr") if a == "LABELS" else a for a in extra]
    code = main(
        ["analyze", store, *extra, "--output", str(tmp_path / "r.json")]
        + ["--scheduler", "synchronous"]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()
