"""stream-dp: differentially private heavy hitters, released continuously.

The package is split by job:

- :mod:`stream_dp.mechanisms` -- pure randomized algorithms (numpy only, no I/O);
- :mod:`stream_dp.accounting` -- DP events, composition and the Redis budget ledger;
- windowing, ingest and release state in Redis, Kafka I/O, metrics and config;
- :mod:`stream_dp.dev` -- development tooling the CLI ships (the local broker + redis-server of
  ``stream-dp devstack``, ``stream-dp demo``); production never imports it.

docs/architecture.md maps every package and traces one window from a Kafka record to a published release.
"""

__version__ = "0.1.0"
