"""The processes' own settings: the ingest and release workers' loops (``[ingest]``, ``[release]``: polls,
retries, Kafka client choice) and the operator surfaces (``[metrics]``, ``[dashboard]``) -- read by
``stream_dp.ingest``, ``stream_dp.release.worker``, :mod:`stream_dp.metrics_http` and the dashboard."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, model_validator

from stream_dp.config.fields import AtLeastOne, KafkaClient, NonEmpty, Number, Port, Positive, check, section


@section
class IngestConfig:
    poll_timeout_ms: AtLeastOne = 500  # longest a poll blocks (bounds how fast a stop request is noticed)
    watermark_interval_seconds: Positive = 1.0  # recompute the global watermark at least this often when idle
    backoff_initial_seconds: Positive = 0.1  # first retry delay after Redis or the broker failed
    backoff_max_seconds: Number = 5.0  # cap of the exponential retry delay
    dead_letter_timeout_seconds: Positive = 30.0  # wait this long for the dead-letter topic before retrying a batch
    # producer max_request_size; larger dead letters: bounded form
    dead_letter_max_request_bytes: Annotated[StrictInt, Field(
        ge=16384, description="room for a bounded dead letter")] = 1048576
    bounding_cache_max_users: AtLeastOne = 2_000_000  # users cached for contribution bounding, all windows (~230 B each)
    catch_up_chunk_bytes: AtLeastOne = 4 << 20  # most bounding-log bytes per read when a cache catches up with Redis
    # the ingest consumer's Kafka client (stream_dp/ingest/consumers.py): "confluent" (librdkafka, fetching and
    # record decoding in C: about a quarter of kafka-python's CPU per event, bench/README.md) or "kafka-python"
    kafka_client: KafkaClient = "confluent"
    # most KiB of records the confluent consumer fetches ahead of the loop (librdkafka's
    # queued.max.messages.kbytes, default there 64 MiB): bounds the loop's memory when it lags
    prefetch_max_kbytes: Annotated[StrictInt, Field(ge=1, le=2097151, description="librdkafka's range")] = 2048

    @model_validator(mode="after")
    def _rules(self) -> IngestConfig:
        check(self, [(self.backoff_max_seconds >= self.backoff_initial_seconds, "backoff_max_seconds",
                      f">= ingest.backoff_initial_seconds ({self.backoff_initial_seconds})")])
        return self


@section
class ReleaseConfig:
    """The release worker's loop (``stream-dp release``; ``--poll-seconds`` / ``--claim-ttl-seconds`` override)."""

    poll_interval_seconds: Positive = 0.5  # longest an idle pass waits for a window close notice (and a stop request waits)
    claim_ttl_seconds: Positive = 30.0  # a dead worker's claim on a window expires after this long
    backoff_initial_seconds: Positive = 0.2  # first retry delay after Redis or the broker failed
    backoff_max_seconds: Number = 10.0  # cap of the exponential retry delay
    # the publisher's Kafka client (stream_dp/release/producers.py): "confluent" (librdkafka sends from its own
    # C threads: one acknowledged produce ~0.25 ms against ~1-2 ms in the worker) or "kafka-python"
    kafka_client: KafkaClient = "confluent"

    @model_validator(mode="after")
    def _rules(self) -> ReleaseConfig:
        check(self, [(self.backoff_max_seconds >= self.backoff_initial_seconds, "backoff_max_seconds",
                      f">= release.backoff_initial_seconds ({self.backoff_initial_seconds})")])
        return self


@section
class MetricsConfig:
    port: Port = 9108  # 0 disables the /metrics endpoint
    host: NonEmpty = "127.0.0.1"  # loopback by default: an operator-only surface; Prometheus elsewhere needs 0.0.0.0


@section
class DashboardConfig:
    port: Port = 8050  # `stream-dp dashboard` serves the page and its JSON API here; 0: any free port
    host: NonEmpty = "127.0.0.1"  # loopback by default: expose it on purpose (it shows only published releases)
