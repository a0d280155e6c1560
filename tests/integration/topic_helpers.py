"""The tests make their topics as the service does: with the topic contract (:mod:`stream_dp.topics`).

A topic made with the broker's defaults would, on Apache Kafka, delete events older than 7 days at the next
retention check (1 s on the test broker) and limit releases to 1 MB: the tests would not run what users run.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaProducer

from stream_dp import topics
from stream_dp.connections import forbid_auto_create
from stream_dp.config import KafkaConfig


def contract_topics(bootstrap: str, *, events: str | None = None, partitions: int = 1,
                    dead_letter: str | None = None, releases: str | None = None,
                    release_message_max_bytes: int | None = None,
                    events_configs: dict[str, str] | None = None) -> None:
    """Create the named topics (those not None) with the contract's configs for a cluster of the test's size;
    ``partitions`` of the events topic, ``events_configs`` beyond the contract's. Existing topics are left
    alone."""
    names = {role: name for role, name in (("events", events), ("dead-letter", dead_letter),
                                            ("releases", releases)) if name}
    settings: dict = {"bootstrap_servers": bootstrap, "events_partitions": partitions}
    # distinct placeholder names for the roles not made here (the config refuses equal topic names)
    settings.update(events_topic=names.get("events", "unused-events-topic"),
                    dead_letter_topic=names.get("dead-letter", "unused-dead-letter-topic"),
                    releases_topic=names.get("releases", "unused-releases-topic"))
    if release_message_max_bytes is not None:
        settings["release_message_max_bytes"] = release_message_max_bytes
    topics.create(KafkaConfig(**settings), tuple(names), extra_configs={"events": events_configs or {}})


class CheckedProducer(KafkaProducer):
    """kafka-python's producer as the tests use it: it never auto-creates a topic, and ``flush()`` (and an
    explicit ``close()``) raise the broker's error of the first send it refused -- a record Apache Kafka
    refuses (a timestamp too far ahead, a message too large) fails the test instead of going missing."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{"allow_auto_create_topics": False, **options})
        forbid_auto_create(self)
        self._sent: list[Any] = []

    def send(self, *args: Any, **kwargs: Any) -> Any:
        future = super().send(*args, **kwargs)
        self._sent.append(future)
        return future

    def flush(self, timeout: float | None = None) -> None:
        super().flush(timeout)
        sent, self._sent = self._sent, []
        for future in sent:
            future.get(timeout=0)  # raises the send's error

    def close(self, timeout: float | None = None, null_logger: bool = False) -> None:
        try:
            if self._sent and not null_logger:  # not from __del__
                self.flush(timeout)
        finally:
            super().close(timeout, null_logger)
