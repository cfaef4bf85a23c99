"""Figures of a released score map: drawn from the release alone, private only by default,
the out-of-frame mass written on them, a raw-score reference only when passed (labelled
NOT PRIVATE).  Seeds make test data and post-processing draws only."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from dask_dppca.analysis.plots import (
    GROUP_COLOURS,
    NOT_PRIVATE,
    OTHER_COLOUR,
    group_colours,
    group_size_sigma,
    noise_floor_sigmas,
    plot_group_panels,
    plot_score_map,
    plot_synthetic,
    shown_groups,
)
from dask_dppca.analysis.stages.score_map import auto_bins
from dask_dppca.privacy.mechanisms.frame import Frame
from dask_dppca.privacy.mechanisms.histogram import NoisyHistogram
from dask_dppca.privacy.mechanisms.score_map import ScoreMap

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


def _one_cell_map(other: float, sigma: float = 5.0) -> ScoreMap:
    """Groups a, b and "other" on a 4 x 3 grid; a and b fill one cell each (x = 1, y = 1
    and x = 2, y = 0), "other" holds ``other`` records in cell (0, 0)."""
    counts = np.zeros((3, 13))
    counts[0, 1 * 4 + 1] = 400.0
    counts[1, 0 * 4 + 2] = 300.0
    counts[2, 0] = other
    return ScoreMap(
        Frame((0.0, 0.0), (2.0, 1.5)),
        {"additive": NoisyHistogram(counts, (4, 3), "additive", sigma)},
        ("a", "b", "other"),
        axes=(0, 1),
    )


@pytest.mark.parametrize(("other", "drawn"), [(10.0, False), (200.0, True)])
def test_other_is_drawn_only_when_its_noisy_size_is_above_its_noise(other, drawn):
    """Sizes summed over 13 cells of sigma 5: noise sigma 18, drawn above 36."""
    smap = _one_cell_map(other)
    assert group_size_sigma(smap) == pytest.approx(5.0 * np.sqrt(13))
    assert ("other" in shown_groups(smap)) == drawn
    titles = _all_text(plot_group_panels(smap))
    assert ("other (noisy n" in titles) == drawn and "a (noisy n = 400)" in titles
    legend = _all_text(plot_synthetic(smap, rng=np.random.default_rng(3)))
    assert ("other (" in legend) == drawn


def test_groups_keep_the_domain_order_and_colours_in_one_shuffled_layer():
    smap = _one_cell_map(200.0)
    figure = plot_synthetic(smap, rng=np.random.default_rng(4))
    ax = figure.axes[0]
    assert len(ax.collections) == 1  # one layer: no group drawn on top of the others
    colours = [matplotlib.colors.to_hex(c) for c in ax.collections[0].get_facecolors()]
    expected = group_colours(smap)
    assert expected == {
        "a": GROUP_COLOURS[0].lower(),
        "b": GROUP_COLOURS[1].lower(),
        "other": OTHER_COLOUR,
    }
    # shuffled: the first 400 points are not all group a's
    assert set(colours[:400]) == set(expected.values())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [t.split(" ")[0] for t in legend] == ["a", "b", "other"]
    # a palette recolours them; groups off: one colour
    greys = plot_synthetic(smap, rng=np.random.default_rng(4), colours=["#000000", "#555555"])
    got = {matplotlib.colors.to_hex(c) for c in greys.axes[0].collections[0].get_facecolors()}
    assert got == {"#000000", "#555555", OTHER_COLOUR}
    single = plot_synthetic(smap, rng=np.random.default_rng(4), by_group=False)
    assert len({tuple(c) for c in single.axes[0].collections[0].get_facecolors()}) == 1
    assert single.axes[0].get_legend() is None


def test_synthetic_points_stay_in_their_cells():
    """Uniform in the cell, no jitter: a and b each fill one cell, and every point lies in
    one of the two cells (a jitter of a quarter cell puts about a third outside)."""
    smap = _one_cell_map(0.0)
    ax = plot_synthetic(smap, rng=np.random.default_rng(5)).axes[0]
    xy = np.asarray(ax.collections[0].get_offsets())
    assert len(xy) == 700
    in_a = (xy[:, 0] >= -1.0) & (xy[:, 0] <= 0.0) & (xy[:, 1] >= -0.5) & (xy[:, 1] <= 0.5)
    in_b = (xy[:, 0] >= 0.0) & (xy[:, 0] <= 1.0) & (xy[:, 1] >= -1.5) & (xy[:, 1] <= -0.5)
    assert (in_a | in_b).all() and in_a.sum() == 400


def test_the_default_grid_grows_with_n_epsilon_from_public_parameters():
    assert auto_bins(5000, 8.38) == (10, 10)  # the benchmark's score map (0.75, 2.5e-5)
    sides = [auto_bins(n, 6.5)[0] for n in (5_000, 40_000, 300_000, 10**7)]
    assert sides == sorted(sides) and sides[0] == 10 and sides[-1] == 100
    assert 60 <= auto_bins(300_000, 6.5)[0] <= 90  # far more than 10 x 10
    assert auto_bins(300_000, 0.65)[0] > auto_bins(300_000, 6.5)[0]  # more epsilon, more
    assert auto_bins(100, float("inf")) == (10, 10)


def test_cells_of_pure_noise_draw_no_synthetic_points():
    """Exact counts 0 everywhere but one cell per group, plus Gaussian noise of sigma 5
    (simulated here, seeded: test data) on 27 x 27 cells and 4 groups: the default floor
    (the level noise passes once in two maps) leaves at most a couple of noise-only cells
    (0.5 expected), where a fixed 2 sigmas keeps about 2.3 % of them (some 65 clumps)."""
    rng = np.random.default_rng(6)  # test data: the simulated noise of a release
    cells = 27 * 27
    counts = rng.normal(0.0, 5.0, size=(4, cells + 1))
    counts[:, 13 * 27 + 13] += 500.0  # the bulk: one cell
    smap = ScoreMap(
        Frame((0.0, 0.0), (1.0, 1.0)),
        {"additive": NoisyHistogram(counts, (27, 27), "additive", 5.0)},
        ("a", "b", "c", "other"),
        axes=(0, 1),
    )
    assert 3.4 < noise_floor_sigmas(smap) < 3.8
    width = 2.0 / 27

    def noise_cells(figure) -> int:
        xy = np.asarray(figure.axes[0].collections[0].get_offsets())
        out = xy[(np.abs(xy) > width / 2 + 1e-12).any(axis=1)]
        return len({tuple(c) for c in np.floor((out + 1.0) / width).astype(int)})

    assert noise_cells(plot_synthetic(smap, rng=np.random.default_rng(7))) <= 2
    fixed = plot_synthetic(smap, rng=np.random.default_rng(7), floor_sigmas=2.0)
    assert noise_cells(fixed) > 30
