"""The ledger configured where the noise is drawn: charged inside the release task.

A trusted worker started with a ledger in its Dask configuration charges every release
it draws to that ledger, inside the release task and before the draw, and refuses
(nothing drawn) a release the ledger cannot afford.  So no client, child process or
notebook using that cluster gets a release without a row there, whatever it set (or
did not set) on its side; the client's own budgets are charged as well, as always.

Configuration (read in the process that draws, when the release runs):

* :data:`RELEASE_LEDGER_KEY` ``dask-dppca.release.ledger``: the ledger file (a local
  path on the worker's machine); environment variable
  ``DASK_DASK_DPPCA__RELEASE__LEDGER``, a Dask YAML file, or a ``--preload`` module
  calling ``dask.config.set``;
* :data:`RELEASE_EPSILON_KEY`, ``RELEASE_DELTA_KEY``
  (``dask-dppca.release.epsilon`` / ``.delta``): its totals; with them the ledger is
  created if missing (and refused if it holds other totals); without them it must exist.

A worker started this way::

    export DASK_DASK_DPPCA__RELEASE__LEDGER=/secure/study.ledger
    export DASK_DASK_DPPCA__RELEASE__EPSILON=4 DASK_DASK_DPPCA__RELEASE__DELTA=1e-5
    dask worker tls://scheduler:8786 --resources dppca-trusted=1

The same keys set in a process that releases itself (a local scheduler, the embedded
cluster's in-process workers) charge that process's fits there.  When the configured
file is one the fit's client already reserved in, the fit is charged once
(:meth:`~dask_dppca.privacy.budget.privacy_budget.PrivacyBudget.reserve_once`).
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dask

from ...privacy import ReleaseMechanism
from ...privacy.budget.privacy_budget import (
    BudgetExceededError,
    LedgerError,
    LedgerReplacedError,
    PrivacyBudget,
    Reservation,
)

__all__ = [
    "RELEASE_DELTA_KEY",
    "RELEASE_EPSILON_KEY",
    "RELEASE_LEDGER_KEY",
    "charged_where_drawn",
    "release_site_budget",
]

#: Dask configuration key: the ledger charged where the noise is drawn.
RELEASE_LEDGER_KEY = "dask-dppca.release.ledger"
#: Dask configuration key: that ledger's total epsilon (optional, with the delta: then
#: the ledger is created if missing).
RELEASE_EPSILON_KEY = "dask-dppca.release.epsilon"
#: Dask configuration key: that ledger's total delta.
RELEASE_DELTA_KEY = "dask-dppca.release.delta"


def release_site_budget() -> PrivacyBudget | None:
    """The budget of :data:`RELEASE_LEDGER_KEY` in this process's configuration, or None.

    Raises
    ------
    ValueError
        For a total that is not a number, or only one of the two totals.
    LedgerError
        If the ledger cannot be opened (missing without totals, empty, damaged).
    """
    path = dask.config.get(RELEASE_LEDGER_KEY, None)
    if path in (None, "", False):
        return None
    totals = [_number(key) for key in (RELEASE_EPSILON_KEY, RELEASE_DELTA_KEY)]
    if totals == [None, None]:
        return PrivacyBudget.open(str(path))
    if None in totals:
        raise ValueError(
            f"{RELEASE_EPSILON_KEY}, {RELEASE_DELTA_KEY}: set both totals of the ledger "
            f"{path!r}, or neither (then it must exist)"
        )
    epsilon, delta = totals
    assert epsilon is not None and delta is not None
    return PrivacyBudget(epsilon, delta, ledger=str(path), create=True)  # documented


def _number(key: str) -> float | None:
    value = dask.config.get(key, None)
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}: expected a number, got {value!r}") from None


@contextmanager
def charged_where_drawn(
    mechanism: ReleaseMechanism | Any,
    fit_id: str,
    dataset: str,
    where: Any,
    what: str = "DPPCA fit",
) -> Iterator[list[bool]]:
    """Charge the release-site ledger (if configured) around the draw.

    Reserve (and mark dispatched) before the block, commit after it; the block sets
    ``drawing[0] = True`` just before it draws: a block that raises before that drew
    nothing and the reservation is cancelled; after, it stays spent.

    Parameters
    ----------
    mechanism : ReleaseMechanism or mechanism with ``.parts`` or a charge
        What the release costs (the directions' mechanism, or a statistic's parts).
    fit_id : str
        The release's id (a row of that id already there is the same release: once).
    dataset : str
        For the row.
    where : str or None
        The worker drawing, for the row's label.
    what : str
        What is released, for the row's label.

    Yields
    ------
    list of bool
        ``[False]``: the block's flag.

    Raises
    ------
    BudgetExceededError
        When the ledger cannot afford the release: nothing is drawn.
    """
    budget = release_site_budget()
    reservation: Reservation | None = None
    if budget is not None:
        place = f"{where or 'this process'} on {socket.gethostname()}"
        try:
            reservation = budget.reserve_once(
                mechanism,
                fit_id=fit_id,
                label=f"{what} {fit_id} (charged where drawn: {place})",
                dataset=dataset,
            )
        except BudgetExceededError as error:
            raise BudgetExceededError(
                f"release {fit_id} refused where the noise is drawn ({place}) by its ledger "
                f"{budget.ledger} ({RELEASE_LEDGER_KEY}): {error}; no noise was drawn"
            ) from None
        if reservation is not None:
            try:
                reservation.dispatch()
            except BaseException:
                _quietly(reservation.cancel)
                raise
    drawing = [False]
    try:
        yield drawing
    except BaseException:
        if reservation is not None and not drawing[0]:
            _quietly(reservation.cancel)  # refused before the draw (the ticket): nothing drawn
        raise
    if reservation is not None:
        try:
            reservation.commit()
        except LedgerReplacedError as error:  # the original ledger is gone: say so
            warnings.warn(f"release {fit_id}: {error}", RuntimeWarning, stacklevel=3)
        except (LedgerError, TimeoutError):
            warnings.warn(
                f"release {fit_id}: could not commit its reservation in "
                f"{reservation.budget.ledger}; it stays reserved and counts as spent",
                RuntimeWarning,
                stacklevel=3,
            )


def _quietly(action: Callable[[], None]) -> bool:
    """Run a ledger write; False if the ledger refused (the row then stays counted)."""
    try:
        action()
    except (LedgerError, TimeoutError):
        return False
    return True
