"""Planning before anything is read: the utility model (:mod:`.utility`,
``release_sigma``), a fit's plan (:mod:`.fit_plan`), the machine model its times come
from (:mod:`.machine`) and population eigenvalues (:mod:`.theory`).

Nothing here imports the estimator: measuring the machine (which fits a small DPPCA)
lives on the bench side, :mod:`dask_dppca.cli.measure`.
"""
