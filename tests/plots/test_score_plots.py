"""Figures of a released score map: drawn from the release alone, private only by default,
the out-of-frame mass written on them, a raw-score reference only when passed (labelled
NOT PRIVATE).  Seeds make test data and post-processing draws only."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from dask_dppca.privacy.frame import Frame
from dask_dppca.privacy.histogram import NoisyHistogram
from dask_dppca.privacy.score_map import ScoreMap
from dask_dppca.score_plots import NOT_PRIVATE, plot_group_panels, plot_score_map, plot_synthetic

matplotlib.use("Agg")


@pytest.fixture
def score_map():
    rng = np.random.default_rng(0)  # test data
    counts = np.clip(rng.normal(20, 8, size=(3, 4 * 3 + 1)), -5, None)
    counts[:, -1] = [7.0, 0.0, 3.0]
    return ScoreMap(
        Frame((1.0, -1.0), (2.0, 1.5)),
        {"additive": NoisyHistogram(counts, (4, 3), "additive")},
        ("a", "b", "other"),
        axes=(0, 2),
    )


def _all_text(figure) -> str:
    parts = []
    for ax in figure.axes:
        parts += [t.get_text() for t in ax.texts]
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        legend = ax.get_legend()
        if legend is not None:
            parts += [t.get_text() for t in legend.get_texts()]
    return " | ".join(parts)


def test_the_heat_map_is_private_only_and_shows_the_out_of_frame_mass(score_map):
    figure = plot_score_map(score_map, synthetic=True, rng=np.random.default_rng(1))
    text = _all_text(figure)
    assert "outside the frame: 10 (noisy" in text
    assert "PC1" in text and "PC3" in text
    assert NOT_PRIVATE not in text
    (ax, _colorbar) = figure.axes
    assert ax.get_xlim() == pytest.approx((-1.0, 3.0)) and ax.get_ylim() == pytest.approx(
        (-2.5, 0.5)
    )
    mesh = ax.collections[0]
    assert np.asarray(mesh.get_array()).size == 12  # the in-frame cells only
    assert np.asarray(mesh.get_array()).sum() == pytest.approx(score_map.histogram().grid().sum())


def test_a_reference_appears_only_when_passed_and_is_labelled_not_private(score_map):
    figure = plot_score_map(score_map, reference=np.zeros((5, 2)))
    assert NOT_PRIVATE in _all_text(figure)
    with pytest.raises(ValueError, match="reference"):
        plot_score_map(score_map, reference=np.zeros(5))


def test_group_panels_share_a_colour_scale_and_show_noisy_sizes(score_map):
    figure = plot_group_panels(score_map, ncols=2)
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.collections and ax.get_title()]
    assert len(panels) == 3
    assert {ax.collections[0].norm.vmax for ax in panels} == {
        max(score_map.histogram().grid(g).max() for g in range(3))
    }
    sizes = score_map.group_sizes()
    assert f"a (noisy n = {sizes['a']:.0f})" in _all_text(figure)
    assert NOT_PRIVATE not in _all_text(figure)


def test_synthetic_points_figure_is_post_processing(score_map):
    figure = plot_synthetic(score_map, size=300, rng=np.random.default_rng(2))
    ax = figure.axes[0]
    n_points = sum(len(c.get_offsets()) for c in ax.collections)
    assert n_points == 300
    assert ax.get_xlim() == pytest.approx(score_map.frame.xlim)
