"""A released analysis is never lost: written where asked, or somewhere the user is told.

Its noise was drawn and its budget paid once the stages committed; a full disk, an
output that fails after the pre-check, or a stop (SIGINT, SIGTERM) between the last
release and the file must not throw it away.  :func:`keep` writes the result to
``--output`` and, when that fails, to the first of a few fallback folders that takes it
(naming it in the error); :func:`kept_if_released` does the same for the stages an
interrupted analysis had released (``error.partial_analysis``, marked incomplete).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["keep", "kept_if_released"]


def _fallbacks(output: str, analysis_id: str) -> list[str]:
    """Where a result goes when ``output`` cannot take it: beside it, here, home, /tmp."""
    name = f"dask-dppca-analysis-{analysis_id}.json"
    folders = [
        os.path.dirname(os.path.abspath(os.path.expanduser(output))) if "://" not in output else "",
        os.getcwd(),
        os.path.expanduser("~"),
        tempfile.gettempdir(),
    ]
    seen: list[str] = []
    for folder in folders:
        if folder and folder not in seen:
            seen.append(folder)
    return [os.path.join(folder, name) for folder in seen]


def keep(result: Any, output: str, force: bool) -> str:
    """Write ``result`` to ``output``; if that fails, to a fallback; where it went.

    Raises
    ------
    OSError
        When ``output`` failed, naming where the result was kept instead (or, when no
        folder could take it, after printing the result itself to stderr).
    """
    try:
        return str(result.save(output, overwrite=force))
    except (OSError, ValueError) as error:
        failure = error
    analysis_id = str(result.meta.get("analysis_id", "unknown"))
    for path in _fallbacks(output, analysis_id):
        try:
            kept = result.save(path, overwrite=False)
        except (OSError, ValueError):
            continue
        raise OSError(
            f"could not write {output!r} ({failure}); the released analysis (paid for) was "
            f"kept in {kept}"
        ) from None
    print(result.to_json(), file=sys.stderr)  # the last place left: the user's terminal
    raise OSError(
        f"could not write {output!r} ({failure}) nor any fallback folder; the released "
        "analysis (paid for) is printed above as JSON"
    ) from None


@contextmanager
def kept_if_released(args: argparse.Namespace) -> Iterator[None]:
    """When the block raises after stages were released, write them (``--output``, or a
    fallback) and add where to the error.
    """
    try:
        yield
    except BaseException as error:
        partial = getattr(error, "partial_analysis", None)
        if partial is None:
            raise
        done = partial.meta.get("released_stages")
        what = "the released stages" if done else "the whole released analysis"
        try:
            where = keep(partial, args.output, args.force)
        except OSError as kept_error:
            error.add_note(str(kept_error))
            raise error from None
        error.add_note(f"{what} ({', '.join(done or ['all'])}) written to {where}")
        raise
