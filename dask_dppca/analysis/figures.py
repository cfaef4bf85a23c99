"""Figures for the HTML pages (the report, the app): matplotlib made headless, a figure as
an inline PNG and its ``<figure>`` element.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

__all__ = ["figure_html", "figure_png", "matplotlib_agg"]


def figure_png(figure: Any, dpi: int = 100) -> str:
    """A matplotlib figure as a ``data:image/png;base64`` URL (the figure is closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def figure_html(src: str, caption: str, alt: str) -> str:
    """An inline ``<figure>``: the image, its alt text and its caption (escaped)."""
    alt, caption = html.escape(alt), html.escape(caption)
    return f'<figure><img src="{src}" alt="{alt}"><figcaption>{caption}</figcaption></figure>'


def matplotlib_agg() -> Any:
    """``matplotlib.pyplot`` on a headless backend (Agg, or a notebook's inline one)."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
