"""stream-dp: differentially private heavy hitters, released continuously.

The package is split by job:

- :mod:`stream_dp.mechanisms` -- pure randomized algorithms (numpy only, no I/O);
- :mod:`stream_dp.accounting` -- DP events, composition and the Redis budget ledger;
- windowing, ingest and release state in Redis, Kafka I/O, metrics and config;
- :mod:`stream_dp.devstack` -- a local Kafka-protocol broker and redis-server for development and tests.
"""

__version__ = "0.1.0"
