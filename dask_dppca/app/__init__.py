"""``dask-dppca app``: explore a data set privately, in a page that cannot overspend.

The page (``dask_dppca.app.page``, built with Panel) opens a store (path or URL with storage
options) and shows its public metadata; the user sets k, the total (epsilon, delta) of
the next release and its split, sees the cost and the ledger's remaining budget before
pressing Release, and every release is charged to the ledger through the library's own
checks (:func:`~dask_dppca.analysis.run.analyze` checks every active budget before reading
anything: a release that does not fit is refused with the reason and nothing is
charged).  Everything after a release (k shown, PVE or scree values, colours, synthetic
points, groups) is post-processing of the stored release (:mod:`.releases`) and spends
nothing.

Why Panel: a maintained PyData framework built on Bokeh (the Dask dashboard's library,
already an extra here); pages are Python objects and callbacks over a websocket, not
hand-written HTTP handling; its asynchronous callbacks keep the page responsive while
Dask computes; and the same object renders inline in Jupyter.

In a notebook::

    from dask_dppca.app import build_app
    build_app("study.ledger", "data.zarr")   # the page, inline (Panel's notebook display)
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_app", "process_budget", "serve"]


def build_app(ledger: str | None = None, store: str | None = None, **options: Any) -> Any:
    """The app's page, a Panel object (shown inline in Jupyter, or ``.servable()``).

    Parameters
    ----------
    ledger : str, optional
        A ledger file (``dask-dppca budget create``): every release is charged there and
        kept in the folder beside it (``LEDGER.releases/``).  Without one, a budget of
        this process only (``epsilon``, ``delta`` options), and releases are kept in
        memory.
    store : str, optional
        A store to open at once.
    **options
        ``scheduler`` (as for :func:`~dask_dppca.analysis.run.analyze`), ``epsilon`` and
        ``delta`` (the totals of an in-memory budget).

    Returns
    -------
    panel.viewable.Viewable
    """
    from .page import AppPage

    if ledger is None and "budget" not in options:
        options["budget"] = process_budget(options.pop("epsilon", 3.0), options.pop("delta", 1e-5))
    return AppPage(ledger=ledger, store=store, **options).view()


_PROCESS_BUDGET: list[Any] = []  # the in-memory budget of every ledger-less app here


def process_budget(epsilon: float, delta: float) -> Any:
    """The one in-memory budget of this process's ledger-less apps.

    Re-running a notebook cell that builds the app shows the same budget, spent as it
    is, never a fresh one.

    Raises
    ------
    ValueError
        If it exists with other totals (naming both: restart the process, or use a
        ledger, to start over).
    """
    from ..privacy.budget.privacy_budget import PrivacyBudget
    from ..privacy.mechanisms.calibration import validate_privacy_parameters

    epsilon, delta = validate_privacy_parameters(epsilon, delta)
    if not _PROCESS_BUDGET:
        _PROCESS_BUDGET.append(PrivacyBudget(epsilon, delta))
    budget = _PROCESS_BUDGET[0]
    if (budget.epsilon, budget.delta) != (epsilon, delta):
        raise ValueError(
            f"epsilon, delta: this process's app budget is (epsilon={budget.epsilon:g}, "
            f"delta={budget.delta:g}), not ({epsilon:g}, {delta:g}); one budget a process "
            "(restart it, or pass ledger=PATH for a budget of its own)"
        )
    return budget


def serve(
    ledger: str | None = None,
    store: str | None = None,
    *,
    port: int = 0,
    announce: Any = print,
    **options: Any,
) -> None:
    """Serve the app on 127.0.0.1 only (a fresh page per visitor, one shared ledger).

    Blocks until interrupted; ``announce`` is called with the URL once it listens.
    """
    import panel as pn

    from .page import AppPage
    from .releases import ReleaseStore

    if ledger is None:  # one budget for every visitor and every reload of this server
        options["budget"] = process_budget(options.pop("epsilon", 3.0), options.pop("delta", 1e-5))
        options["releases"] = ReleaseStore(None)

    def page() -> Any:
        return AppPage(ledger=ledger, store=store, **options).view()

    if not port:  # a free loopback port, chosen by the system
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    server = pn.serve(
        {"/": page},
        port=port,
        address="127.0.0.1",
        websocket_origin=[f"127.0.0.1:{port}", f"localhost:{port}"],
        show=False,
        start=False,
        title="dask-dppca: private PCA",
        verbose=False,
    )
    server.start()
    announce(f"dask-dppca app: serving on http://127.0.0.1:{port}/ (Ctrl+C stops)")
    try:
        server.io_loop.start()
    finally:
        server.stop()
