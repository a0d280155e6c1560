"""The release worker's logic: the unit of work per window, window reader, claims, the release type registry
(``types``), release builders, records, outbox, alerts, metrics.

Thin wiring lives in ``workers/release.py`` (``python -m workers.release``) and the ``stream-dp release``
CLI subcommand; both call :func:`stream_dp.release.service.build_worker`.
"""
