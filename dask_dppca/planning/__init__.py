"""Planning before anything is read: the utility model (:mod:`.utility`,
``release_sigma``), a fit's plan (:mod:`.fit_plan`) and what it is planned for
(:mod:`.inputs`: the cluster, the machine model, a stated or pilot spectrum), the machine
model its times come from (:mod:`.machine`), population eigenvalues (:mod:`.theory`) and
its figures as text (:mod:`.formatting`).

Nothing here imports the estimator: measuring the machine (which fits a small DPPCA)
lives on the bench side, :mod:`dask_dppca.cli.measure`.
"""
