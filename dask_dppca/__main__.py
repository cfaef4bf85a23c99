"""``python -m dask_dppca``: the ``dask-dppca`` command."""

from .cli import console

console()
