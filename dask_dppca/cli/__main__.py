"""``python -m dask_dppca.cli``: the ``dask-dppca`` command."""

import sys

from . import main

sys.exit(main())
