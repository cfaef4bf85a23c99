"""Command-line tests."""

import sys
from pathlib import Path

#: The console script pip installs beside this interpreter: the command as a user types it.
CONSOLE_SCRIPT = Path(sys.executable).with_name("dask-dppca")
