"""Command line: ``dask-dppca demo``, ``fit STORE``, ``analyze STORE``, ``plan STORE``,
``bench``, ``budget create|show|resolve LEDGER``, ``app`` (one module per command;
:mod:`.command` parses and runs them).

Imports are lazy: :func:`console` puts in the stop signals' handlers (:mod:`.signals`)
before it imports anything heavy, the parser needs only argparse, so ``--help`` answers
at once, and each command imports numpy, Dask and the library when it runs.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from ..lazy import lazy_exports
from .signals import exit_code, stop_signals_for_good, stopped_line

__all__ = [
    "CLI_SPELLINGS",
    "EXIT_CLUSTER",
    "EXIT_UNEXPECTED",
    "EXIT_USAGE",
    "build_parser",
    "cli_spelling",
    "console",
    "main",
]

#: Public name -> the submodule defining it (imported on first use: :mod:`dask_dppca.lazy`).
_EXPORTS = {name: ".command" for name in __all__ if name != "console"}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .command import (
        CLI_SPELLINGS,
        EXIT_CLUSTER,
        EXIT_UNEXPECTED,
        EXIT_USAGE,
        build_parser,
        cli_spelling,
        main,
    )


def console() -> None:
    """Entry point of the ``dask-dppca`` console script and ``python -m dask_dppca``.

    The stop signals are handled from the first line on, for the life of the process,
    before the command's modules are imported: a SIGTERM while Python still imports
    them ends the command as one during the fit does (one line, ``128 + signal
    number``), and one while the interpreter shuts down after the command's line keeps
    the command's exit code.
    """
    stop_signals_for_good()
    try:
        from .command import main

        code = main()
    except KeyboardInterrupt as error:  # before main() put in its own handlers
        line = stopped_line(error, [], 0.0)  # no budget was opened yet
        print(f"dask-dppca: {line}; the command had not begun", file=sys.stderr)
        code = exit_code(error)
    # What the shutdown logs (a scheduler's comm closing under a stopped fit, with its
    # traceback) is not the command's: its line is written.
    logging.disable(logging.CRITICAL)
    sys.exit(code)
