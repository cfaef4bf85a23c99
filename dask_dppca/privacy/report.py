"""``DPPCA.privacy_`` as something a person can read: :class:`PrivacyReport`.

The report is the plain dict of every number behind a release (what
:meth:`~dask_dppca.privacy.mechanisms.mechanism.ReleaseMechanism.describe` gives, plus where the
noise was drawn), so code keeps reading ``report["sigma"]`` and ``json.dump`` writes it
as it is.  ``str(report)`` (and ``print``) renders it as text, a notebook as an HTML
table (``_repr_html_``): the guarantee first, then how sigma follows from it, then the
signal-to-noise figure, then where the noise was drawn, then every other entry.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["PrivacyReport"]

#: (section title, keys shown in it, in order); keys not named here go to "other".
_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("guarantee", ("epsilon", "delta", "neighbours", "n_samples", "n_features", "private")),
    (
        "calibration",
        (
            "calibration",
            "sensitivity",
            "sensitivity_formula",
            "rounding_slack",
            "sampler_slack",
            "sampler_excess",
            "sigma",
            "sigma_formula",
            "noise_law",
            "sampler",
        ),
    ),
    ("signal to noise", ("signal_to_noise", "signal_bound", "noise_spectral_norm")),
    ("spatial sign", ("spatial_sign", "bound_G", "radius")),
    (
        "design",
        (
            "design",
            "partners_k",
            "block_size",
            "design_seed",
            "n_blocks",
            "n_block_pairs",
            "n_pairs",
            "max_degree",
            "tile_rows",
        ),
    ),
    ("where the noise was drawn", ("released_on", "release_placement", "fit_id")),
    ("what was released", ("released",)),
)


class PrivacyReport(dict[str, Any]):
    """The privacy report of one release: a dict, rendered as text and as HTML.

    ``str(report)`` is the text rendering (:meth:`text`); in a notebook it shows as a
    table (:meth:`html`).  Everything else is the dict: ``report["sigma"]``,
    ``json.dumps(report)``.

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_normal((600, 3))
    >>> report = dd.DPPCA(2, epsilon=1.0, delta=1e-6, scheduler="threads").fit(X).privacy_
    >>> isinstance(report, dd.PrivacyReport), report["epsilon"]
    (True, 1.0)
    """

    def summary(self) -> str:
        """One sentence: the guarantee, sigma and the signal-to-noise figure."""
        parts = [
            f"({_number(self.get('epsilon'))}, {_number(self.get('delta'))})-DP "
            f"for {self.get('neighbours', 'replace-one')} neighbours"
        ]
        if "n_samples" in self:
            parts.append(f"n = {self['n_samples']} records (public)")
        if "sigma" in self:
            parts.append(f"sigma = {_number(self['sigma'])}")
        if "signal_to_noise" in self:
            parts.append(f"signal to noise at most {_number(self['signal_to_noise'])}")
        sentence = ", ".join(parts)
        if self.get("private") is False:
            sentence += " -- NOT PRIVATE: the noise was seeded (tests only)"
        return sentence

    def sections(self) -> list[tuple[str, list[tuple[str, Any]]]]:
        """The entries grouped for display: ``[(title, [(key, value), ...]), ...]``."""
        shown: set[str] = set()
        grouped = []
        for title, keys in _SECTIONS:
            items = [(key, self[key]) for key in keys if key in self]
            shown.update(key for key, _ in items)
            if items:
                grouped.append((title, items))
        rest = [(key, value) for key, value in self.items() if key not in shown]
        if rest:
            grouped.append(("other", rest))
        return grouped

    def text(self) -> str:
        """The report as aligned plain text."""
        width = max((len(str(key)) for key in self), default=0)
        lines = ["privacy report: " + self.summary()]
        for title, items in self.sections():
            lines.append(f"  {title}:")
            lines += [f"    {key!s:<{width}}  {_shown(value)}" for key, value in items]
        return "\n".join(lines)

    def html(self) -> str:
        """The report as an HTML table (what a notebook displays)."""
        rows = []
        for title, items in self.sections():
            rows.append(
                f'<tr><th colspan="2" style="text-align:left">{html.escape(title)}</th></tr>'
            )
            rows += [
                f"<tr><td><code>{html.escape(str(key))}</code></td>"
                f"<td>{html.escape(_shown(value))}</td></tr>"
                for key, value in items
            ]
        return (
            f"<div><p><b>privacy report</b>: {html.escape(self.summary())}</p>"
            f"<table>{''.join(rows)}</table></div>"
        )

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's plain-text form: the text rendering."""
        printer.text("PrivacyReport(...)" if cycle else self.text())


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _shown(value: Any) -> str:
    return _number(value) if isinstance(value, float) else str(value)
