"""``dask-dppca budget create|show|resolve LEDGER``: a durable privacy budget shared by
every fit.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..privacy.budget.privacy_budget import PrivacyBudget


def add_parser(commands) -> None:
    """Register ``budget`` (with ``create``, ``show`` and ``resolve``) on the sub-command
    parser.
    """
    budget = commands.add_parser(
        "budget",
        help="create or show a privacy budget ledger (pass it to fit with --budget)",
        description=(
            "A ledger file holds a privacy budget's (epsilon, delta) and every release charged "
            "to it. 'dask-dppca fit ... --budget LEDGER' reserves each release there before "
            "drawing noise and refuses a fit that would exceed the budget (exact Gaussian-DP "
            "composition). Set DASK_DPPCA_BUDGET=LEDGER to charge every fit of a process."
        ),
    )
    actions = budget.add_subparsers(dest="action", metavar="ACTION", parser_class=type(budget))
    actions.required = True
    create = actions.add_parser(
        "create",
        help="create a new ledger with its totals",
        description="Create a new ledger file holding the budget's totals.",
    )
    create.add_argument("ledger", help="ledger file to create (a local path)")
    create.add_argument("--epsilon", type=float, required=True, help="total epsilon > 0")
    create.add_argument("--delta", type=float, required=True, help="total delta in (0, 1)")
    create.set_defaults(run=run_create)
    show = actions.add_parser(
        "show",
        help="print the releases and what remains",
        description="Print a ledger's totals, spent and remaining epsilon, "
        "and a table of every release.",
    )
    show.add_argument("ledger", help="ledger file")
    show.add_argument(
        "--json",
        action="store_true",
        help="print machine-readable JSON instead: totals, counts, spent, remaining, and "
        "every release with all its columns (state, stage, times, pid, ...)",
    )
    show.set_defaults(run=run_show)
    resolve = actions.add_parser(
        "resolve",
        help="settle reservations left by fits that stopped before settling them",
        description="Settle 'reserved' rows whose fit stopped (killed, machine lost) before "
        "committing or cancelling them. A row whose release was never dispatched provably "
        "drew no noise and is cancelled (given back); any other reserved row may have drawn "
        "and is committed (it stays spent); a row whose process still runs on this machine "
        "is left to it. Each row's outcome is printed with the reason.",
    )
    resolve.add_argument("ledger", help="ledger file")
    resolve.add_argument(
        "row", nargs="?", type=int, help="the release (its id in 'budget show'); default all"
    )
    resolve.set_defaults(run=run_resolve)


def run_create(args: argparse.Namespace) -> int:
    """Create the ledger; an existing file is left alone."""
    from ..privacy.budget.ledger import ledger_path
    from ..privacy.budget.privacy_budget import PrivacyBudget

    if os.path.exists(ledger_path(args.ledger)):
        raise ValueError(
            f"ledger: {args.ledger} already exists (see: dask-dppca budget show {args.ledger})"
        )
    budget = PrivacyBudget(args.epsilon, args.delta, ledger=args.ledger, create=True)
    print(budget.describe())
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print the ledger's report (as JSON with ``--json``)."""
    budget = open_ledger(args.ledger)
    if args.json:
        print(json.dumps(budget.as_dict(), indent=2, allow_nan=False))
    else:
        print(budget.describe())
    return 0


def run_resolve(args: argparse.Namespace) -> int:
    """Settle the reserved rows (or one), one line each, then the budget's remaining."""
    budget = open_ledger(args.ledger)
    if args.row is not None and args.row not in {r["id"] for r in budget.as_dict()["releases"]}:
        raise ValueError(f"row: {args.ledger} holds no release {args.row} (see budget show)")
    resolutions = budget.resolve(args.row)
    for done in resolutions:
        print(f"release {done.release.id}: {done.outcome}: {done.why}")
    if not resolutions:
        print("no reserved releases to resolve")
    print(
        f"budget {args.ledger}: epsilon {budget.remaining():.6g} left for one more release "
        f"at delta={budget.delta:g}"
    )
    return 0


def open_ledger(path: str) -> PrivacyBudget:
    """The budget of an existing ledger; a missing file is a usage error naming the option."""
    from ..privacy.budget.ledger import ledger_path
    from ..privacy.budget.privacy_budget import PrivacyBudget

    if not os.path.isfile(ledger_path(path)):
        raise ValueError(
            f"ledger: {path} does not exist; create it with "
            f"'dask-dppca budget create {path} --epsilon E --delta D'"
        )
    return PrivacyBudget.open(path)
