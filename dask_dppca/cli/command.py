"""The command line's parser and runner: :func:`main` parses, runs one command (one module
per command) and turns every error into one line and an exit code.

Every user error ends with one line on stderr and a non-zero exit code, never a
traceback: 2 for a bad parameter or input, 3 when the cluster cannot be reached or a
release fails, 1 for anything unexpected (with the exception's one-line summary).
SIGINT, SIGTERM and SIGHUP stop a command alike (:mod:`.signals`): exit code 128 +
the signal's number, one line saying what became of the budget reservation.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
import warnings

from . import analyze, app, bench, budget, demo, fit, plan
from .signals import (
    exit_code,
    stop_received,
    stop_signals_as_interrupts,
    stopped_line,
    stops_so_far,
)

__all__ = [
    "CLI_SPELLINGS",
    "EXIT_CLUSTER",
    "EXIT_UNEXPECTED",
    "EXIT_USAGE",
    "build_parser",
    "cli_spelling",
    "main",
]

EXIT_USAGE = 2
EXIT_CLUSTER = 3
EXIT_UNEXPECTED = 1

#: The sub-command modules, each with ``add_parser(commands)`` setting ``run``.
COMMANDS = (demo, fit, analyze, plan, bench, budget, app)


class _OneLineParser(argparse.ArgumentParser):
    """argparse errors as one line (no usage block), exit code 2 like every user error."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the CLI)."""
    from ..version import installed_version

    parser = _OneLineParser(
        prog="dask-dppca",
        description=(
            "Robust, differentially private PCA (g-DPPCA). Releases the leading principal "
            "directions of a data set under (epsilon, delta)-differential privacy, robust "
            "to heavy tails and outliers."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    commands.required = True
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


#: The library's messages name Python parameters; on the command line they name flags.
CLI_SPELLINGS = (
    ("pass require_trusted=True to refuse instead", "pass --require-trusted to refuse instead"),
    ("(or require_trusted=False)", "(or leave out --require-trusted)"),
    ("no trusted_worker was named", "no --trusted-worker was named"),
    ("pass allow_fill_values=True (--allow-fill-values)", "pass --allow-fill-values"),
    ("privacy_['released_on']", "the result's privacy.released_on"),
    ("with columns=[...] (--columns a,b,c)", "with --columns a,b,c"),
)


def cli_spelling(text: str) -> str:
    """``text`` with the library's Python spellings replaced by the command line's flags."""
    for python, flag in CLI_SPELLINGS:
        text = text.replace(python, flag)
    return text


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings on the command line: one line each, no source location, flags named."""
    return f"dask-dppca: warning: {cli_spelling(str(message))}\n"


def _numeric_options(parser: argparse.ArgumentParser) -> set[str]:
    """Option strings (every sub-command's) that take a number: ``--epsilon``, ``-k``..."""
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _numeric_options(sub)
        elif action.type in (int, float):
            found.update(action.option_strings)
    return found


def attach_negative_numbers(argv: list[str], numeric: set[str]) -> list[str]:
    """``--epsilon -inf`` as ``--epsilon=-inf``: argparse reads a value that starts with
    ``-`` and is not a plain negative number (``-inf``, ``-1e-6``) as an option, and then
    refuses with "expected one argument" instead of naming the bad value.
    """
    out: list[str] = []
    for token in argv:
        if out and out[-1] in numeric and token.startswith("-") and _is_number(token):
            option = out.pop()
            out.append(f"{option}={token}" if option.startswith("--") else f"{option}{token}")
        else:
            out.append(token)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit code.

    Called in-process by tests and notebooks: the signal handlers it puts in are the
    previous ones again when it returns.
    """
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(attach_negative_numbers(argv, _numeric_options(parser)))
    shown_as, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    # distributed logs its own tracebacks (a client failing to reconnect to a scheduler
    # that went away, 30 lines): the command's error is its one line.
    disabled = logging.root.manager.disable
    logging.disable(logging.ERROR)
    args.started = time.time()
    args.stops_before = stops_so_far()
    try:
        with stop_signals_as_interrupts(), warnings.catch_warnings():
            # A stopped command leaves the coroutines it was awaiting (fsspec, zarr)
            # unfinished; Python's warning about each is not the command's line.
            warnings.filterwarnings(
                "ignore", message="coroutine .* was never awaited", category=RuntimeWarning
            )
            rc = _run(args)
            gc.collect()  # while the filter holds
            return rc
    except KeyboardInterrupt as error:  # stopped just after the command itself returned
        print(f"dask-dppca: {_stopped(error, args)}", file=sys.stderr)
        return exit_code(error)
    finally:  # main() may be called in a process that goes on (tests, notebooks)
        warnings.formatwarning = shown_as
        logging.disable(disabled)


def _run(args: argparse.Namespace) -> int:
    """Run the command; every error becomes one line and an exit code."""
    from ..compute.first_compile import compile_notices_to

    try:
        with compile_notices_to(lambda line: print(f"dask-dppca: {line}", file=sys.stderr)):
            return args.run(args)
    except Exception as error:
        stop = stop_received(args.stops_before)
        if stop is None:
            return _failed(error)
        # the stop came out of an import as another error: the command stopped
        for note in getattr(error, "__notes__", ()):  # what an analysis released and kept
            stop.add_note(note)
        print(f"dask-dppca: {_stopped(stop, args)}", file=sys.stderr)
        return exit_code(stop)
    except KeyboardInterrupt as error:  # SIGINT, and SIGTERM or SIGHUP (signals.Stopped)
        print(f"dask-dppca: {_stopped(error, args)}", file=sys.stderr)
        return exit_code(error)


def _failed(error: Exception) -> int:
    """The one line of a failed command; its exit code."""
    if isinstance(error, ValueError):
        print(f"dask-dppca: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(error, (OSError, TimeoutError, RuntimeError)):
        print(f"dask-dppca: error: {type(error).__name__}: {_one_line(error)}", file=sys.stderr)
        return EXIT_CLUSTER
    print(
        f"dask-dppca: unexpected error: {type(error).__name__}: {_one_line(error)}",
        file=sys.stderr,
    )
    return EXIT_UNEXPECTED


def _stopped(error: KeyboardInterrupt, args: argparse.Namespace) -> str:
    """The line of a stopped command: the signal, and the budgets' reservations.

    What the stop left half made (an event loop stopped while it started) is collected
    now, its complaints ("Exception ignored in ...") silenced: the line is the output.
    """
    hook, sys.unraisablehook = sys.unraisablehook, lambda unraisable: None
    try:
        gc.collect()
    finally:
        sys.unraisablehook = hook

    budgets = list(getattr(args, "charged_budgets", []))
    try:
        from ..privacy.budget.charging import default_budget

        default = default_budget()
    except (ImportError, AttributeError, OSError, RuntimeError):
        # ImportError, AttributeError: stopped inside the first import of the budget's
        # modules, so no budget was opened (numpy cannot be imported again after a stop
        # cut its first import short)
        default = None
    if default is not None and default.ledger not in {b.ledger for b in budgets}:
        budgets.append(default)
    line = stopped_line(error, budgets, args.started)
    if not budgets and getattr(args, "budget", None):
        line += f"; nothing was reserved in the budget {args.budget} (not yet opened)"
    notes = "; ".join(getattr(error, "__notes__", ()))  # what an analysis released and kept
    return line + (f"; {notes}" if notes else "")


def _one_line(error: BaseException) -> str:
    """An error's message on one line, in the command line's spelling."""
    text = "; ".join([str(error), *getattr(error, "__notes__", ())])  # notes: what was kept
    return cli_spelling(" ".join(text.split()))
