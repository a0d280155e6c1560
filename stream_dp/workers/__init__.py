"""The long-running processes, as thin entry points over the library: ``python -m stream_dp.workers.ingest``
and ``python -m stream_dp.workers.release`` (the same as ``stream-dp ingest`` / ``stream-dp release``).

Nothing else in :mod:`stream_dp` imports this package (tests/unit/test_import_graph.py).
"""
