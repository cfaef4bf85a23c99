"""What a released analysis says about itself: which scree to read, what the directions
estimate, and where a release is pure noise (post-processing of released values only).

Everything here reads a released record (:meth:`~dask_dppca.analysis.result.PrivateAnalysis.to_dict`
or the result itself): the scree values, the noise scales of the privacy table, the
released pair quantiles, the score map's frame and noisy group sizes.  Nothing reads the
data, so nothing here costs privacy (docs/privacy.md, "Notices").
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..kernel.scree_stats import GRID_HALF_WIDTH, GRID_STEPS_PER_OCTAVE
from .mechanisms.score_map import OTHER_GROUP, noisy_size_text

__all__ = [
    "ACCURACY_NOTICE",
    "COARSE_FRAME_SHARE",
    "COARSE_RANK_SHARE",
    "FRAME_BOUND",
    "GROUPS_NOTICE",
    "NOISE_MULTIPLE",
    "NON_FINITE_NOTE",
    "ONE_COLUMN_SHARE",
    "SCREE_DEFAULT_ORDER",
    "UNITS_NOTICE",
    "below_noise",
    "directions_note",
    "groups_advice",
    "notes_html",
    "release_notices",
    "scree_default",
    "scree_default_note",
]

#: The scree method a summary shows, the first of these that was released.  The clipped
#: mean first: of the four it has the smallest noise (the largest weight of the scree's
#: budget), its bias at the Gaussian is below 0.1 %, it is the only one with a PVE over
#: all d (the clipped trace), and with its clip set from the released quantiles and the
#: trace (``scree_scales``) it follows the variance on discrete columns and duplicated
#: rows (along a zero-inflated column about 20 % low, docs/method.md 6.6); the
#: quantile-based robust value estimates a spread there, not a variance.
SCREE_DEFAULT_ORDER = ("clipped", "huber", "winsorized", "robust")
#: The grid's top value (``2^64``): a released quantile there says the pairs' values are
#: beyond the grid or not finite.
_GRID_TOP = 2.0 ** (GRID_HALF_WIDTH / GRID_STEPS_PER_OCTAVE)
#: The bound the released frame is clamped to (:mod:`.frame`'s ``|centre|, half-width <=
#: 2^1020``): a frame there says the scores are not finite or beyond any grid.
FRAME_BOUND = 2.0**1020
#: A released value below this many noise scales (standard deviations of its Gaussian
#: noise) is called noise: a quantity whose true value is 0 is released above it with
#: probability 0.13 % (so an empty group or a null scree value is flagged 998 times in
#: 1000).
NOISE_MULTIPLE = 3.0
#: Which release of the privacy table carries each method's noise.
_NOISE_ROWS = {"clipped": "clipped", "winsorized": "winsorized", "huber": "huber step 1"}


def below_noise(scale: float) -> str:
    """How every text says a released value is noise: "below N times its noise scale
    (S)", with N = :data:`NOISE_MULTIPLE` (the notices, the report's captions).

    Examples
    --------
    >>> from dask_dppca.privacy.notices import below_noise
    >>> below_noise(4.0)
    'below 3 times its noise scale (4)'
    """
    return f"below {NOISE_MULTIPLE:g} times its noise scale ({scale:.3g})"


def scree_default(methods: Sequence[str]) -> str:
    """The method to read among ``methods`` (the first of :data:`SCREE_DEFAULT_ORDER`)."""
    for method in SCREE_DEFAULT_ORDER:
        if method in methods:
            return method
    raise ValueError(f"methods: expected one of {SCREE_DEFAULT_ORDER}, got {list(methods)!r}")


def scree_default_note(method: str) -> str:
    """Why ``method`` is the scree to read (one plain sentence or two)."""
    if method == "clipped":
        return (
            "Read the clipped scree values (the default): the least noisy of the released "
            "estimators, nearly unbiased at the Gaussian, the only one with a PVE over all d, "
            "and it follows the variance on discrete columns and duplicated rows (along a "
            "zero-inflated column it can be some 20 % low). The others are robustness "
            "checks: Huber and winsorized estimate the same variance with more noise; the "
            "robust value (pair quantiles) estimates a Gaussian-consistent spread, whose "
            "ratios hold even without a variance (Cauchy, t_1)."
        )
    return (
        f"Read the {method} scree values (the default among the released methods; the "
        "clipped mean, when released, is the first choice)."
    )


def directions_note(spatial_sign: str = "sphere", radius: float | None = None) -> str:
    """What the released directions estimate, and when they are covariance PCA's."""
    if spatial_sign == "winsor":
        return (
            "The directions are the top eigenvectors of the winsorized spatial Kendall "
            f"matrix (radius {radius:g} in the data's units of (x_i - x_j) / sqrt 2): pairs "
            "closer than the radius count with their full difference, so on data whose "
            "pairs mostly lie within it these are the covariance's principal directions; "
            "for elliptical data (Gaussian, t) they are the covariance's whatever the radius."
        )
    return (
        "The directions are the top eigenvectors of the spatial Kendall matrix (the mean "
        "of the pairs' unit differences). For elliptical data (Gaussian, t, Cauchy) they "
        "are the covariance's principal directions, in the same order; for other data "
        "(skewed, discrete or zero-inflated columns, clusters of unequal spread) they may "
        "differ from covariance PCA. A public winsorizing radius (spatial_sign='winsor', "
        "radius=...) in the data's units gives covariance-like directions on bounded data."
    )


def _get(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


def _noise_of(privacy: Sequence[Mapping[str, Any]], release: str) -> list[float] | None:
    for row in privacy:
        if row.get("stage") == "scree" and row.get("release") == release:
            noise = row.get("noise")
            return [float(v) for v in noise] if isinstance(noise, (list, tuple)) else None
    return None


def _scree_notices(scree: Mapping[str, Any], privacy: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = []
    quantiles = scree.get("quantiles") or []
    for c, row in enumerate(quantiles):
        where = f"PC{c + 1}" if c < len(quantiles) - 1 else "the trace"
        if any(not math.isfinite(q) or q >= _GRID_TOP for q in row):
            notes.append(
                f"The pair quantiles along {where} are at the top of the public grid "
                f"(2^64): the data along it are not finite or beyond the grid, and its scree "
                "values say nothing about the data."
            )
    for method, values in (scree.get("values") or {}).items():
        noise = _noise_of(privacy, _NOISE_ROWS.get(method, ""))
        for c, value in enumerate(values):
            value = float(value)
            if not math.isfinite(value):
                notes.append(f"The {method} scree value of PC{c + 1} is not finite.")
            elif noise is not None and c < len(noise) and value < NOISE_MULTIPLE * noise[c]:
                notes.append(
                    f"The {method} scree value of PC{c + 1} ({value:.3g}) is "
                    f"{below_noise(noise[c])}: it cannot be told from noise."
                )
    return notes


def _score_map_notices(score_map: Any, privacy: Sequence[Mapping[str, Any]]) -> list[str]:
    if score_map is None:
        return []
    record = score_map.to_dict() if hasattr(score_map, "to_dict") else score_map
    if not isinstance(record, Mapping) or "frame" not in record:
        return []
    notes = []
    frame = record["frame"]
    numbers = [float(v) for v in (*frame["centre"], *frame["half_width"])]
    if not all(math.isfinite(v) and abs(v) < FRAME_BOUND for v in numbers) or min(numbers[2:]) <= 0:
        notes.append(
            f"The score map's frame (centre {numbers[:2]}, half-widths {numbers[2:]}) is not "
            "finite (or at its bound, 2^1020): the map shows no data (the scores are not "
            "finite or beyond any grid)."
        )
    sizes = record.get("group_counts")
    sigma = next(
        (
            float(row["noise"])
            for row in privacy
            if str(row.get("release", "")).startswith("noisy group sizes")
            and isinstance(row.get("noise"), (int, float))
        ),
        None,
    )
    if sizes is not None and sigma is not None:
        for name, size in zip(record.get("groups", []), sizes):
            if float(size) < NOISE_MULTIPLE * sigma:
                why = (
                    "every label may be in the domain (nothing to show)"
                    if name == OTHER_GROUP
                    else "it may hold no record (a label missing from the data, or a typo "
                    "in the domain)"
                )
                notes.append(
                    f"Group {name!r}: its noisy size ({noisy_size_text(size)}) is "
                    f"{below_noise(sigma)}: {why}; its "
                    "panels are noise."
                )
    return notes


#: A direction this much of whose squared length is one column is that column alone.
ONE_COLUMN_SHARE = 0.99
#: How the notice of single-column directions begins (a test of pinned records knows it).
UNITS_NOTICE = "Directions that are one column alone"
#: How the notice of coarse quantiles begins.
ACCURACY_NOTICE = "Quantiles located coarsely"
#: A quantile located to within more than this share of the records (95 %) is said to be
#: coarse in a notice (the score map's frame: :data:`COARSE_FRAME_SHARE`).
COARSE_RANK_SHARE = 0.05
#: The score map's frame is said to be coarse from this share of the records (it only
#: frames a picture: a coarse frame has wider cells).
COARSE_FRAME_SHARE = 0.25
#: How the advice on a group domain too large for the budget begins.
GROUPS_NOTICE = "Groups too many for the budget"
#: How every analysis treats values that are not finite (NaN, +-inf): said in each result
#: and report, since nothing private says whether the data held any (docs/robustness.md).
NON_FINITE_NOTE = (
    "Values that are not finite (NaN, +-inf; a CSV's empty cell is NaN) are kept, with a "
    "bounded treatment: a record holding one counts in n and adds nothing to the directions' "
    "matrix (its pairs contribute 0); in the quantiles (scale, median, frame) such a value "
    "counts above every grid point (-inf below); in the scree its pairs' terms take the top "
    "of their range; in the score map its score falls outside the frame. Drop or fill such "
    "records first to leave them out (docs/robustness.md, 'Bad records')."
)


def groups_advice(accuracy: Mapping[str, Any]) -> str | None:
    """The advice on a stage's public accuracy statement (``accuracy["groups"]``, the score
    map's: its groups' count, average size and a group size's noise), when the groups
    average fewer records than :data:`NOISE_MULTIPLE` times that noise; else None.
    """
    groups = accuracy.get("groups") or {}
    if not groups.get("below_noise"):
        return None
    return (
        f"{GROUPS_NOTICE}: {groups['count']} groups (the domain and 'other') at n records "
        f"average {groups['average_size']:.3g} records each, {below_noise(groups['size_noise'])}"
        " of a group's size: most groups' sizes and maps will be noise. Merge labels into "
        "fewer groups, or raise epsilon or the score map's share (--split)."
    )


def _names(meta: Mapping[str, Any], d: int) -> list[str]:
    named = meta.get("feature_names")
    return [str(v) for v in named] if named and len(named) == d else [f"x{j}" for j in range(d)]


def _units_notices(record: Any) -> list[str]:
    """A direction carried by one column, on data not scaled: the mark of mixed units."""
    meta = _get(record, "meta") or {}
    directions = _get(record, "directions")
    if meta.get("scaling", "none") != "none" or directions is None:
        return []
    rows = [[float(v) for v in row] for row in directions]
    if not rows or len(rows[0]) < 2:
        return []
    names = _names(meta, len(rows[0]))
    alone = []
    for c, row in enumerate(rows):
        total = math.fsum(v * v for v in row)
        j = max(range(len(row)), key=lambda i: abs(row[i]))
        if total > 0 and row[j] ** 2 / total >= ONE_COLUMN_SHARE:
            alone.append(f"PC{c + 1} is {names[j]!r} ({row[j] ** 2 / total:.3f})")
    if not alone:
        return []
    return [
        f"{UNITS_NOTICE}: {'; '.join(alone)}. If the columns are in different units, "
        "the directions follow the largest unit, not the data's structure: analyze with "
        "scale='robust' (--scale robust) to put the columns on one scale first."
    ]


def _scale_notices(record: Any) -> list[str]:
    """Columns whose interquartile range collapsed, and coarse quantiles (released and
    public values only).
    """
    stages = _get(record, "stages") or {}
    meta = _get(record, "meta") or {}
    notes = []
    scale = stages.get("scale") if isinstance(stages, Mapping) else None
    if isinstance(scale, Mapping) and scale.get("rule"):
        rules = [str(r) for r in scale["rule"]]
        names = _names(meta, len(rules))
        by_rule: dict[str, list[str]] = {}
        for name, rule in zip(names, rules):
            if not rule.startswith("q75-q25"):
                by_rule.setdefault(rule, []).append(name)
        for rule, columns in by_rule.items():
            shown = ", ".join(repr(c) for c in columns[:8])
            more = f" and {len(columns) - 8} more" if len(columns) > 8 else ""
            what = "a scale of 1" if rule.startswith("1") else f"the range {rule}"
            notes.append(
                f"The released quartiles of {shown}{more} coincide (a column that is mostly "
                f"one value, such as zero), or a wider range is not located at this n and "
                f"share of epsilon: scaled by {what} instead of q75-q25. Robust directions "
                "then answer a different question than PCA's on those columns (they weigh "
                "the rare values, not the variance)."
            )
    n = meta.get("n_samples")
    for stage, stated in (meta.get("accuracy") or {}).items():
        bound = max((stated.get("rank_error_95") or {}).values(), default=0.0)
        # The score map's frame only frames a picture (a coarse one has wider cells):
        # said when it may miss the scores' middle half, the others from 5 %.
        share = COARSE_FRAME_SHARE if stage == "score_map" else COARSE_RANK_SHARE
        advice = groups_advice(stated)
        if advice is not None:
            notes.append(advice)
        if n and bound > share * float(n):
            notes.append(
                f"{ACCURACY_NOTICE}: the {stage.replace('_', ' ')} stage's quantiles are within "
                f"{bound:.0f} records ({bound / float(n):.0%} of them) of their ranks with 95 % "
                "probability, at this n and share of epsilon (docs/privacy.md, 'Accuracy of a "
                "private quantile')."
            )
    return notes


def release_notices(record: Any) -> list[str]:
    """Plain sentences on what in a release is pure noise, from released values alone.

    Parameters
    ----------
    record : PrivateAnalysis or mapping
        The analysis, or its :meth:`~dask_dppca.analysis.result.PrivateAnalysis.to_dict` record.

    Returns
    -------
    list of str
        One sentence per finding (empty when nothing is noise):

        * a released pair quantile at the top of the grid (``2^64``) or not finite: the
          data along that direction are not finite or beyond the grid;
        * a scree value that is not finite, or below :data:`NOISE_MULTIPLE` times its
          noise scale (the standard deviation of its Gaussian noise, from the privacy
          table);
        * a score-map frame that is not finite, at its bound (``2^1020``) or of zero
          width;
        * a group whose noisy size is below :data:`NOISE_MULTIPLE` times its noise scale
          (a label with no record: a typo in the domain, or an empty "other");
        * on data not scaled, a direction that is one column alone
          (:data:`ONE_COLUMN_SHARE` of it): columns in different units;
        * with the scale stage, the columns whose released quartiles coincide (their
          scale is a wider range, or 1);
        * a stage whose quantiles are located only to within more than
          :data:`COARSE_RANK_SHARE` of the records (its public rank bound).
    """
    privacy = list(_get(record, "privacy") or [])
    notes = _scree_notices(_get(record, "scree") or {}, privacy)
    notes += _score_map_notices(_get(record, "score_map"), privacy)
    return notes + _units_notices(record) + _scale_notices(record)


def notes_html(result: Any) -> str:
    """The report's block: which scree to read, what the directions estimate, and the
    release's notices (post-processing).
    """
    scree = _get(result, "scree") or {}
    meta = _get(result, "meta") or {}
    default = scree.get("default")
    parts = ["<div id='reading-notes'>"]
    if default:
        parts.append(f"<p class='note'>{html.escape(scree_default_note(default))}</p>")
    parts.append(
        "<p class='note'>"
        + html.escape(
            meta.get("directions_estimate")
            or directions_note(meta.get("spatial_sign", "sphere"), meta.get("radius"))
        )
        + "</p>"
    )
    parts.append(f"<p class='note'>{html.escape(meta.get('non_finite') or NON_FINITE_NOTE)}</p>")
    notices = _get(result, "notices")
    if notices is None:
        notices = release_notices(result)
    if notices:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notices)
        parts.append(f"<div class='warn' id='notices'><b>Notices</b><ul>{items}</ul></div>")
    parts.append("</div>")
    return "".join(parts)
