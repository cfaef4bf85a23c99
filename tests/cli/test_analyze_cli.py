"""``dask-dppca analyze``: typed exactly as a user would, default flags (embedded cluster)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from dask_dppca.analysis.result import PrivateAnalysis
from dask_dppca.cli import EXIT_USAGE, main
from tests.cli import CONSOLE_SCRIPT, write_labels, write_store


@pytest.mark.cluster
def test_analyze_as_typed_writes_the_result_and_the_plots(tmp_path):
    store = write_store(tmp_path / "x.zarr", n=2000, d=4)
    codes = write_labels(tmp_path / "labels.zarr", n=2000)  # 3 is outside the domain
    # plots/ does not exist yet: the README's line creates it, as a user types it
    done = subprocess.run(
        f"{CONSOLE_SCRIPT} analyze x.zarr -k 2 --epsilon 3 --delta 1e-5 "
        "--output result.json --plots plots --groups labels.zarr --group-domain 0,1,2".split(),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert store.endswith("x.zarr")
    out = done.stdout
    # the split is shown before the releases, then the table of what was released
    split = out.index("privacy split of the total (epsilon=3, delta=1e-05)")
    assert split < out.index("frame: median of PC1") < out.index("wrote")
    assert "noisy group sizes" in out[split : out.index("frame: median of PC1")]
    result = PrivateAnalysis.load(tmp_path / "result.json")
    assert result.directions.shape == (2, 4)
    assert set(result.scree["values"]) == {"clipped", "winsorized", "huber", "robust"}
    assert result.meta["composed_epsilon"] <= 3.0
    assert json.loads((tmp_path / "result.json").read_text())["meta"]["private"] is True
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "pve_topk.png",
        "pve_total.png",
        "score_map.png",
        "score_map_groups.png",
        "scree.png",
        "synthetic.png",
    ]
    released_on = {row["released_on"] for row in result.privacy if row["stage"] == "scree"}
    assert released_on and "this process" not in released_on  # on the cluster's worker
    smap = result.score_map  # per group, the noisy sizes near the exact ones (sigma ~ 14)
    assert smap.groups == ("0", "1", "2", "other")
    for code in range(3):
        assert abs(smap.group_sizes()[str(code)] - (codes == code).sum()) < 100
    assert {row["released_on"] for row in result.privacy if row["stage"] == "score_map"} == {
        "a worker offering 'dppca-trusted'"
    }
    assert np.isfinite(result.scree["values"]["clipped"]).all()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["analyze", "STORE", "--epsilon", "-1"], "epsilon"),
        (["analyze", "STORE", "--methods", "median"], "methods"),
        (["analyze", "STORE", "--split", "directions"], "--split"),
        (["analyze", "STORE", "--plots", "/no/such/folder"], "--plots"),
    ],
)
def test_analyze_errors_are_one_line_naming_the_flag(tmp_path, capsys, args, needle):
    store = write_store(tmp_path / "x.zarr")
    args = [store if a == "STORE" else a for a in args]
    code = main([*args, "--output", str(tmp_path / "r.json"), "--scheduler", "synchronous"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert needle in err and len(err.strip().splitlines()) == 1
