"""Parity with the R package ``dppca``'s deterministic score-map parts, noise off.

tests/privacy/data/r_score_parity.json holds points (on and off the bin edges, outside the
frame, at +-1e300) and what R's own helpers computed on them (R/score_helpers.R, commit
b43ece9, R 4.2.2; tests/privacy/data/make_r_parity.R): the breaks, the non-private counts
with R's clamping of out-of-frame points into the edge bins, the counts of the points
inside the frame, and the largest-remainder allocation of synthetic points to groups.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dask_dppca.kernel.score_stats import histogram_counts
from dask_dppca.privacy.mechanisms.frame import Frame
from dask_dppca.privacy.mechanisms.histogram import allocate

DATA = json.loads((Path(__file__).parent / "data" / "r_score_parity.json").read_text())


def _frame_edges():
    (x0, x1), (y0, y1) = DATA["xlim"], DATA["ylim"]
    frame = Frame(((x0 + x1) / 2, (y0 + y1) / 2), ((x1 - x0) / 2, (y1 - y0) / 2))
    return frame.edges(tuple(DATA["bins"]))


def test_the_breaks_are_r_seq_length_out():
    x_edges, y_edges = _frame_edges()
    assert x_edges.tolist() == DATA["r"]["x_breaks"]
    assert y_edges.tolist() == DATA["r"]["y_breaks"]


def test_clamped_counts_match_r_and_the_out_of_frame_cell_splits_them_off():
    points = np.array(DATA["points"])
    x_edges, y_edges = _frame_edges()
    clamped = histogram_counts(points, x_edges, y_edges, clamp=True)[0]
    assert clamped[-1] == 0 and clamped[:-1].tolist() == DATA["r"]["clamped"]
    ours = histogram_counts(points, x_edges, y_edges)[0]  # the project's treatment
    assert ours[:-1].tolist() == DATA["r"]["inside"]  # R's counts of the in-frame points
    assert ours[-1] == len(points) - sum(DATA["r"]["inside"])  # the rest, shown as such


def test_largest_remainder_allocation_matches_r():
    assert allocate(10, [1, 1, 1]).tolist() == DATA["r"]["allocate_1"]
    assert allocate(5, [2, 0.5, 3]).tolist() == DATA["r"]["allocate_2"]
    assert allocate(7, [10, 20, 30, 40]).tolist() == DATA["r"]["allocate_3"]
