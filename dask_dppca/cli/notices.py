"""A release's notices as the command line prints them: repeated ones summarised.

A ``--group-domain`` of thousands of labels, most absent from the data, gives one notice
per empty group (:func:`dask_dppca.privacy.notices.release_notices`): printed one a line,
thousands of lines bury the rest of the output.  Notices of one kind beyond
:data:`SHOWN_EACH` are printed as one line with their count and a few examples; the
result file keeps every one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["EXAMPLES", "SHOWN_EACH", "notice_lines"]

#: Notices of one kind printed one a line up to this many; more are summarised.
SHOWN_EACH = 5
#: Examples a summary line names.
EXAMPLES = 3

#: A group's notice: its name (as Python's repr quotes it), its noisy size, and the rest,
#: which is the same for every group of one kind (the threshold, the noise scale, why).
_GROUP_NOTICE = re.compile(
    r"^Group (?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"): its noisy size "
    r"\((?P<size>[^()]*)\) is below (?P<rest>.+)$"
)


def notice_lines(notices: Sequence[str], where: str) -> list[str]:
    """The lines ``analyze`` prints for ``notices`` (each ``notice: ...``).

    Parameters
    ----------
    notices : sequence of str
        The release's notices, in order.
    where : str
        Where every notice is kept (the result file), for a summary line.

    Returns
    -------
    list of str
        One line a notice, except the groups' notices of one kind beyond
        :data:`SHOWN_EACH`: one line at the first one's place, with their count and the
        first :data:`EXAMPLES` names and noisy sizes.
    """
    matched = [(notice, _GROUP_NOTICE.match(notice)) for notice in notices]
    kinds: dict[str, list[re.Match[str]]] = {}
    for _, found in matched:
        if found is not None:
            kinds.setdefault(found["rest"], []).append(found)
    lines = []
    for notice, found in matched:
        members = [] if found is None else kinds[found["rest"]]
        if len(members) <= SHOWN_EACH:
            lines.append(f"notice: {notice}")
        elif found is members[0]:  # the kind's first notice: its summary, in its place
            lines.append(f"notice: {_summary(members, where)}")
    return lines


def _summary(members: list[re.Match[str]], where: str) -> str:
    """One line for many groups' notices of one kind."""
    examples = ", ".join(f"{m['name']} ({m['size']})" for m in members[:EXAMPLES])
    return (
        f"{len(members)} groups, e.g. {examples}: each one's noisy size is below "
        f"{members[0]['rest']} All {len(members)} are listed in the notices of {where}."
    )
