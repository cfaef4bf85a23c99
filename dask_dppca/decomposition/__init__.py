"""The decomposition: the estimator (fit, transform, plan), its result files, the exact
NON-PRIVATE ``kendall_matrix`` with the breakdown bound read off it, and sin theta.

Modules: :mod:`.estimator` (:class:`~dask_dppca.decomposition.estimator.DPPCA`),
:mod:`.results` (with :mod:`.provenance`, where a result came from), :mod:`.reference`,
:mod:`.metrics`.
"""
