"""``[kafka]``: the brokers, the topics and their contract (stream_dp/topics.py), the clients' security and
group settings -- read by :mod:`stream_dp.connections`, :mod:`stream_dp.topics` and the workers' consumers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, StrictInt, StrictStr, model_validator

from stream_dp.config.fields import (AUTO_REPLICAS, AtLeastOne, NonEmpty, RetentionMs, Str, auto_or_at_least, check,
                                     section)
from stream_dp.wire import DEFAULT_MESSAGE_MAX_BYTES

MIN_SESSION_TIMEOUT_MS = 6000  # Apache Kafka's default group.min.session.timeout.ms


@section
class KafkaConfig:
    bootstrap_servers: Str = ""  # empty: start the embedded dev-stack broker
    events_topic: NonEmpty = "events"
    releases_topic: NonEmpty = "releases"
    dead_letter_topic: NonEmpty = "events-dlq"
    ingest_group_id: NonEmpty = "stream-dp-ingest"
    client_id: Str = "stream-dp"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = ""
    sasl_username: Str = ""
    sasl_password: SecretStr = SecretStr("")  # secret: repr and logs show '**********' (stream_dp.redact)
    ssl_cafile: Str = ""
    ssl_certfile: Str = ""
    ssl_keyfile: Str = ""
    # Apache Kafka refuses a group member whose session timeout is below the broker's
    # group.min.session.timeout.ms (default 6000): the worker could never join its group
    session_timeout_ms: Annotated[StrictInt, Field(
        ge=MIN_SESSION_TIMEOUT_MS,
        description="Apache Kafka's default group.min.session.timeout.ms: a broker refuses shorter sessions, so the "
                    "worker could never join its consumer group")] = 6000
    heartbeat_interval_ms: AtLeastOne = 1000
    max_poll_records: AtLeastOne = 5000
    # a release record whose JSON is larger goes out as several part messages of at most this size
    release_message_max_bytes: Annotated[StrictInt, Field(ge=16384, le=100 << 20)] = DEFAULT_MESSAGE_MAX_BYTES
    # The topic contract (stream_dp/topics.py): what `stream-dp topics create` makes and every worker checks
    events_partitions: AtLeastOne = 4
    replication_factor: Annotated[StrictStr | StrictInt, auto_or_at_least(
        1, f'"{AUTO_REPLICAS}" (min(3, brokers)) or an integer >= 1')] = AUTO_REPLICAS
    min_insync_replicas: Annotated[StrictStr | StrictInt, auto_or_at_least(
        1, f'"{AUTO_REPLICAS}" (min(2, replication factor)) or an integer >= 1')] = AUTO_REPLICAS
    events_retention_ms: RetentionMs = -1
    releases_retention_ms: RetentionMs = -1
    dead_letter_retention_ms: RetentionMs = 604800000

    @model_validator(mode="after")
    def _rules(self) -> KafkaConfig:
        check(self, [
            (len({self.events_topic, self.releases_topic, self.dead_letter_topic}) == 3, "releases_topic",
             "different from kafka.events_topic and kafka.dead_letter_topic"),
            (self.heartbeat_interval_ms < self.session_timeout_ms, "heartbeat_interval_ms",
             f">= 1 and < kafka.session_timeout_ms ({self.session_timeout_ms})"),
            (not (isinstance(self.min_insync_replicas, int) and isinstance(self.replication_factor, int))
             or self.min_insync_replicas <= self.replication_factor, "min_insync_replicas",
             f"<= kafka.replication_factor ({self.replication_factor}): more in-sync replicas than replicas "
             "refuses every write with NOT_ENOUGH_REPLICAS"),
        ])
        return self

    def client_options(self) -> dict[str, Any]:
        """Connection options for kafka-python clients (bootstrap, security; the SASL password revealed here,
        for the client only)."""
        opts: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            opts["sasl_mechanism"] = self.sasl_mechanism
            opts["sasl_plain_username"] = self.sasl_username
            opts["sasl_plain_password"] = self.sasl_password.get_secret_value()
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, name):
                opts[name] = getattr(self, name)
        return opts
