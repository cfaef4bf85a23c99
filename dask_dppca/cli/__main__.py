"""``python -m dask_dppca.cli``: the ``dask-dppca`` command."""

from . import console

console()
