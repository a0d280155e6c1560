"""Development tooling, shipped for the CLI but never imported by the production path.

- :mod:`stream_dp.dev.devstack` -- a local Kafka-protocol broker (embedded Tansu, or Apache Kafka through
  :mod:`stream_dp.dev.kafka_broker`) and redis-server: the integration tests' fixtures, the benchmarks, the
  demo; its components (:mod:`stream_dp.dev.components`), each a child process on its port
  (:mod:`stream_dp.dev.service`); ``stream-dp devstack up|down|status``'s detached stack
  (:mod:`stream_dp.dev.detached`);
- :mod:`stream_dp.dev.demo` -- ``stream-dp demo``: the whole service on a dev stack, with its options and
  config (:mod:`stream_dp.dev.demo_config`), its worker processes (:mod:`stream_dp.dev.demo_workers`), a
  generated MovieLens-style stream (:mod:`stream_dp.dev.demo_data`) replayed into the events topic
  (:mod:`stream_dp.dev.demo_feed`), and the releases printed as they arrive (:mod:`stream_dp.dev.demo_follow`).

Production modules (ingest, release, accounting, mechanisms, ...) never import this package
(tests/unit/test_import_graph.py); :mod:`stream_dp.runtime` reads a running dev stack's addresses only when
the configuration names no broker or Redis, lazily.
"""
