"""The Redis contract, in one home: what ingest writes and the release worker and the ledger read.

- :mod:`stream_dp.store.keys` -- the key layout (every key name, its hash tag, and the ledger scope's parts);
- :mod:`stream_dp.store.bounding_log` -- the encoding of a window shard's contribution-bounding log
  (``user\\0key\\0`` pairs, stored in segments) that ingest appends and the release worker reads;
- :mod:`stream_dp.store.window_state` -- the states of a window shard (``open`` → ``closed`` → ``released``),
  for Python and, as Lua constants, for the scripts that write them;
- :mod:`stream_dp.store.scripts` -- every Lua script (``stream_dp/store/lua/*.lua``) and the one loader that
  registers them with a client.

Nothing here imports another package of the service: ingest, release and accounting depend on the store,
never on each other's internals (tests/unit/test_import_graph.py).
"""
