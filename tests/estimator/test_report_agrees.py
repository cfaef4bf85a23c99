"""The report agrees with itself: its captions, the score map's summary, the privacy table
and the notices say the same numbers in the same words (one source for each: the
threshold :data:`NOISE_MULTIPLE`, :func:`below_noise`, :func:`noisy_size_text`), its title
names the data set's file, its scree figures have distinct titles, and the privacy table
names the embedded cluster rather than an in-process address."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.analysis.report import score_map_figures, score_map_of
from dask_dppca.compute.cluster import IN_PROCESS_WORKER
from dask_dppca.privacy.mechanisms.score_map import OTHER_GROUP, noisy_size_text
from dask_dppca.privacy.notices import below_noise


@pytest.fixture(scope="module")
def grouped():
    """An analysis on the embedded cluster (default scheduler) whose "other" group is
    empty: every label is in the public domain, so its released size is pure noise."""
    x = np.random.default_rng(21).standard_t(3, size=(3000, 4))  # test data only
    labels = np.array(["a", "b"])[np.arange(3000) % 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dd.analyze(x, n_components=2, groups=labels, group_domain=("a", "b"))


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_the_other_group_s_size_and_threshold_read_the_same_everywhere(grouped):
    import matplotlib.pyplot as plt

    score_map = score_map_of(grouped)
    released = score_map.released_group_sizes()[OTHER_GROUP]
    size = noisy_size_text(released)
    sigma = next(
        float(row["noise"])
        for row in grouped.privacy
        if str(row.get("release", "")).startswith("noisy group sizes")
    )
    notices = [n for n in grouped.notices if n.startswith(f"Group {OTHER_GROUP!r}")]
    captions = [caption for _, caption, _ in score_map_figures(score_map)]
    plt.close("all")
    (caption,) = [c for c in captions if "per group" in c]
    summary = score_map.summary()
    # the same released number in the summary, the caption and (when any) the notice
    assert f"{OTHER_GROUP}: noisy size {size}," in summary
    assert f"({size})" in caption
    # the same words for the same threshold, and the same verdict
    assert below_noise(sigma) in caption
    drawn = "is drawn because" in caption
    assert drawn == (not notices) == (released >= 3 * sigma)
    if notices:
        assert f"its noisy size ({size}) is {below_noise(sigma)}" in notices[0]
    # no other threshold is stated anywhere in the report
    html = grouped.to_html()
    assert "twice" not in html
    assert not re.search(r"below \d+ times", html.replace(below_noise(sigma), ""))


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_the_report_names_things_a_reader_can_read(grouped):
    import matplotlib.pyplot as plt

    html = grouped.to_html()
    table = grouped.privacy_table()
    assert "inproc://" not in html and "inproc://" not in table
    assert IN_PROCESS_WORKER in table  # the directions were drawn on the embedded worker
    titles = []
    for kind in ("scree", "pve_topk", "pve_total"):
        titles.append(grouped.plot_scree(kind=kind).get_title())
        plt.close("all")
    assert len(set(titles)) == 3, titles
    assert titles[0].startswith("private scree values")
    assert "PVE" in titles[1] and "PVE" in titles[2]
