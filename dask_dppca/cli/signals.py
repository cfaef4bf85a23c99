"""A command stopped by a signal: SIGTERM and SIGHUP end it as SIGINT does.

Batch systems stop jobs with SIGTERM (SLURM, Kubernetes, systemd), a closed terminal
sends SIGHUP.  Their default action kills the process at once, which would leave a
budget reservation ``reserved`` (spent) although no noise was drawn.  While a command
runs, both raise :class:`Stopped` instead, a ``KeyboardInterrupt``, so the fit unwinds
exactly as after Ctrl-C: the reservation is cancelled when the release provably never
drew, and stays spent otherwise.  The command then exits with ``128 + signal number``
and one line saying what became of the reservation (:func:`stopped_line`).

A second SIGTERM or SIGHUP while the first unwinds is ignored (the unwinding is
bounded: at most the release ticket's wait), so that it cannot cut the cancellation
short; SIGINT keeps Python's behaviour.

The console script (:func:`dask_dppca.cli.console`) puts its handlers in before it
imports anything heavy (:func:`stop_signals_for_good`): a signal while Python still
imports the command's modules stops it with the same one line, and one after the
command's block ended (its line written) ends the process at once, without a second
line or a traceback from the interpreter's shutdown.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..privacy.budget.privacy_budget import PrivacyBudget

__all__ = [
    "STOP_SIGNALS",
    "Stopped",
    "exit_code",
    "signals_deferred",
    "stop_error",
    "stop_received",
    "stop_signals_as_interrupts",
    "stop_signals_for_good",
    "stopped_line",
    "stops_so_far",
]

#: The signals handled like SIGINT (those this platform has).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Stopped(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or SIGHUP while a command runs."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(signal.Signals(signum).name)


@contextmanager
def _handled(numbers: Sequence[int], handler: Callable[[int, object], None]) -> Iterator[None]:
    """``handler`` for the signals ``numbers`` while the block runs, the previous ones
    back after it.  Outside the main thread (where Python cannot install handlers) it
    does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


class _RaiseOnce:
    """A handler raising the first stop signal where Python is (:class:`Stopped`, or
    ``KeyboardInterrupt`` for SIGINT) and ignoring the next ones while it unwinds.
    """

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.fired:
            return  # the first one is unwinding the command: let it finish
        self.fired = True
        _received.append(signum)
        raise stop_error(signum)


#: The stop signals this process raised (:func:`stop_received`).
_received: list[int] = []


def stop_error(signum: int) -> KeyboardInterrupt:
    """What a stop signal raises: :class:`Stopped`, or ``KeyboardInterrupt`` for SIGINT."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)


def stop_received(since: int = 0) -> KeyboardInterrupt | None:
    """The first stop raised in this process after the first ``since`` ones, else None.

    A stop raised inside an import comes out of it as another error (an extension
    module's ``ImportError: initialization failed``, numpy's "cannot load module more
    than once" on the next import): the command then ended because of the stop.
    """
    return stop_error(_received[since]) if len(_received) > since else None


def stops_so_far() -> int:
    """How many stops this process has raised (for :func:`stop_received`)."""
    return len(_received)


@contextmanager
def stop_signals_as_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise :class:`Stopped` (once).

    Outside the main thread (where Python cannot install handlers) it does nothing.
    """
    _command_ended.clear()
    try:
        with _handled(STOP_SIGNALS, _RaiseOnce()):
            yield
    finally:
        # before the handlers go back: the process's own (stop_signals_for_good) then
        # sees a command that has ended
        _command_ended.set()


#: Set when a command's handled block has ended (its line, if any, written).
_command_ended = threading.Event()


class _ProcessStop(_RaiseOnce):
    """The process's own handler (:func:`stop_signals_for_good`)."""

    def __call__(self, signum: int, frame: object) -> None:
        if _command_ended.is_set():
            _flush()
            os._exit(128 + signum)
        super().__call__(signum, frame)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _raise_lost_stops_again(unraisable: Any, hook: Callable[[Any], object]) -> None:
    """``sys.unraisablehook``: a stop raised where Python cannot let an exception out (a
    garbage collector callback, a ``__del__``) is dropped there, with a traceback on
    stderr; it is raised again at the next line instead, and nothing is printed.
    """
    error = unraisable.exc_value
    if not isinstance(error, KeyboardInterrupt):
        hook(unraisable)
        return
    signum = int(getattr(error, "signum", signal.SIGINT))
    handler = signal.getsignal(signum)
    if isinstance(handler, _RaiseOnce):
        handler.fired = False
    # From another thread, a moment later: a signal raised here would be handled here,
    # inside this hook, and dropped again.
    again = threading.Timer(0.01, os.kill, (os.getpid(), signum))
    again.daemon = True
    try:
        again.start()
    except RuntimeError:  # the interpreter is shutting down: no new thread
        pass


def _ignore_stop_signals() -> None:
    # Ignored, not blocked: a blocked signal still reaches the process through any other
    # thread (BLAS's, distributed's), and Python leaves an ignored signal ignored when it
    # puts the default actions back.
    _flush()
    for number in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(number, signal.SIG_IGN)


def stop_signals_for_good() -> None:
    """For a process's entry point: SIGINT, SIGTERM and SIGHUP handled from now to its
    exit (call it before anything heavy is imported).

    Until a command's block (:func:`stop_signals_as_interrupts`) has ended, the first
    signal raises :class:`Stopped` (``KeyboardInterrupt`` for SIGINT) where Python is, in
    an import if need be (and again at the next line if it was raised where Python drops
    exceptions); later ones are ignored while that one unwinds.  After the command's
    block ended, and while the ``atexit`` functions run (the embedded cluster's close), a
    signal ends the process at once with ``128 + signal number``, output flushed.  After
    them Python puts the default actions back while it tears its modules down, where a
    signal would kill the process with no line: the stop signals are ignored then, and
    the command's own exit code stands.  Nothing is put back: the process is ending.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    # Registered first, so it runs last of the atexit functions.
    atexit.register(_ignore_stop_signals)
    handler = _ProcessStop()
    _command_ended.clear()
    for number in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(number, handler)
    hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_raise_lost_stops_again, hook=hook)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP wait: the first one raises
    :class:`Stopped` (or ``KeyboardInterrupt``) when the block ends.

    For a short write that must finish once begun (a paid-for result).  Outside the main
    thread it does nothing.
    """
    pending: list[int] = []
    with _handled((signal.SIGINT, *STOP_SIGNALS), lambda signum, frame: pending.append(signum)):
        yield
    if pending:
        _received.append(pending[0])
        raise stop_error(pending[0])


def exit_code(error: KeyboardInterrupt) -> int:
    """``128 + signal number``: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + int(getattr(error, "signum", signal.SIGINT))


def stopped_line(error: KeyboardInterrupt, budgets: Sequence[PrivacyBudget], since: float) -> str:
    """The one line a stopped command prints: which signal, and what became of the
    reservations this process made in ``budgets`` from ``since`` (a ``time.time()``) on.
    """
    name = signal.Signals(getattr(error, "signum", signal.SIGINT)).name
    outcomes = []
    for budget in budgets:
        try:
            rows = [
                row
                for row in budget._ledger.rows()
                if row.pid == os.getpid() and row.reserved_at >= since
            ]
        except (OSError, RuntimeError, TimeoutError) as problem:
            outcomes.append(f"could not read the ledger {budget.ledger} ({problem})")
            continue
        for row in rows:
            where = f"release {row.id} in {budget.ledger}"
            if row.state == "cancelled":
                outcomes.append(f"no noise was drawn: the reservation ({where}) was cancelled")
            elif row.state == "committed":
                outcomes.append(f"the release was drawn and committed ({where})")
            elif row.stage == "reserved":
                outcomes.append(
                    f"no noise was drawn, but the reservation ({where}) could not be "
                    f"cancelled; 'dask-dppca budget resolve {budget.ledger} {row.id}' gives it back"
                )
            else:
                outcomes.append(
                    f"the release was dispatched and may have drawn its noise, so {where} "
                    "stays spent"
                )
    if budgets and not outcomes:
        outcomes.append("nothing was reserved in the budget")
    return "; ".join([f"stopped by {name}", *outcomes])
