"""``python -m dask_dppca``: the ``dask-dppca`` command."""

import sys

from .cli import main

sys.exit(main())
