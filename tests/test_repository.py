"""The repository itself: no unresolved merge left in any tracked file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)


def test_no_merge_conflict_markers():
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert len(files) > 100
    marked = [
        name
        for name in files
        if (ROOT / name).is_file() and MARKER.search((ROOT / name).read_text(errors="replace"))
    ]
    assert marked == []


def test_the_check_sees_a_marker():
    assert MARKER.search("text\n<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> main\n")
