"""The trusted release: where the noise is drawn, that it is drawn at most once, and what
is charged there.

:mod:`.release` runs a mechanism once on the trusted worker (and any other noisy
statistic by the same path, :func:`.release_statistic`); :mod:`.placement` and
:mod:`.trust` say where it may run; :mod:`.tickets` keep it drawn at most once;
:mod:`.site_ledger` is the ledger charged where the noise is drawn; :mod:`.score_map`
runs the score map's statistics through the same release.  The cluster they run on is
the rest of :mod:`dask_dppca.compute`.
"""
