"""The privacy mathematics: mechanisms, their sensitivities, calibration and accounting.

Nothing here keeps books: a mechanism is built from public inputs (its sensitivity and
noise scale) and applied to a statistic; what a release costs is a
:class:`~.parts.PrivacyPart`.  The books that add those costs up are
:mod:`dask_dppca.privacy.budget`, one floor above.  Each module is named in
:mod:`dask_dppca.privacy`'s docstring; import from them directly.
"""
