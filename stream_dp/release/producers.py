"""The release publisher's Kafka producer (``release.kafka_client``).

:class:`~stream_dp.release.outbox.Publisher` sends one record at a time and waits for the broker's
acknowledgement before the release is marked published, so each release's visible latency includes one
produce round trip. With kafka-python that round trip runs through its Python IO thread, which competes for
the GIL with the worker's own thread: about 0.9 ms per acks=all produce on an idle machine and 1.7–2.4 ms inside
the worker (bench/bench_release.py ``--trace``). librdkafka sends from its own C threads: about 0.25 ms.

:class:`ConfluentProducer` puts confluent-kafka behind the three calls the publisher makes (``send`` returning
a future with ``get``, ``flush``, ``close``); ``"kafka-python"`` keeps kafka-python's ``KafkaProducer``. Both are
idempotent with ``acks=all``, so a retried send neither duplicates nor reorders a record, and both raise
kafka-python's :class:`~kafka.errors.KafkaError` on failure (the worker's "kafka" dependency): a record that
is not acknowledged in time raises :class:`~kafka.errors.KafkaTimeoutError` and stays stored-but-unpublished,
so it is published again (identical bytes) on the next pass.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka.errors import KafkaError, KafkaTimeoutError

from stream_dp.config import Config
from stream_dp.connections import confluent_client_settings, kafka_producer
from stream_dp.errors import StreamDPError
from stream_dp.wire import MESSAGE_OVERHEAD_BYTES

log = logging.getLogger(__name__)

#: How long librdkafka keeps retrying one record before it reports it failed (its default is 300 s); the
#: publisher gives up waiting after its own timeout (``outbox.SEND_TIMEOUT_SECONDS``) either way.
DELIVERY_TIMEOUT_MS = 30_000
#: Longest the producer waits at start-up for the releases topic's metadata (:meth:`ConfluentProducer.warm_up`).
WARM_UP_SECONDS = 2.0


class ProduceFailed(KafkaError, StreamDPError):
    """The broker refused a record, or librdkafka gave up delivering it (a kafka-python error)."""

    retriable = True


class _Delivery:
    """The outcome of one produced record, filled by librdkafka's delivery callback during ``poll``/``flush``."""

    __slots__ = ("producer", "done", "error")

    def __init__(self, producer: ConfluentProducer) -> None:
        self.producer = producer
        self.done = False
        self.error: Any = None

    def __call__(self, err: Any, _msg: Any) -> None:
        self.done, self.error = True, err

    def get(self, timeout: float | None = None) -> None:
        """Wait for the acknowledgement (at most ``timeout`` seconds); raise if the record failed or is late."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise KafkaTimeoutError(f"no acknowledgement of the record within {timeout} s")
            self.producer.poll(0.1 if left is None else min(left, 0.1))
        if self.error is not None:
            raise ProduceFailed(f"producing the record failed: {self.error.str()}")


class ConfluentProducer:
    """A confluent-kafka ``Producer`` behind the kafka-python calls :class:`~stream_dp.release.outbox.Publisher`
    makes. Not thread-safe beyond what librdkafka is: the worker's one thread owns it."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({**settings, "error_cb": self._on_error,
                                   "logger": logging.getLogger("stream_dp.release.librdkafka")})

    @staticmethod
    def _on_error(err: Any) -> None:
        """librdkafka's client-level errors (a broker down, ...): it retries by itself; the record's own
        outcome decides whether a publish failed."""
        log.warning("Kafka client reported: %s", err.str())

    def warm_up(self, topic: str, timeout: float = WARM_UP_SECONDS) -> None:
        """Fetch ``topic``'s metadata now. The idempotent producer acquires its producer id after its first
        metadata reply; without this, the first record waits ~0.5 s for it (librdkafka's retry timer), which
        the first release after every start would pay. A broker that does not answer is not an error here:
        the first publish then waits, or fails, as any other."""
        try:
            self._producer.list_topics(topic, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - only a warm-up
            log.debug("release producer warm-up: no metadata yet (%s)", exc)

    def send(self, topic: str, *, key: bytes, value: bytes) -> _Delivery:
        delivery = _Delivery(self)
        try:
            self._producer.produce(topic, key=key, value=value, on_delivery=delivery)
        except BufferError as exc:  # the local queue is full: the broker has been unreachable for a while
            raise KafkaTimeoutError(f"the producer's queue is full ({exc})") from exc
        except Exception as exc:  # a KafkaException (unknown topic, record too large, ...)
            raise ProduceFailed(f"producing to {topic}: {exc}") from exc
        return delivery

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Hand every queued record to the broker now and wait for their outcomes (at most ``timeout``)."""
        self._producer.flush(-1 if timeout is None else timeout)

    def close(self, timeout: float = 5.0) -> None:
        left = self._producer.flush(timeout)
        if left:
            log.warning("%d release record(s) not acknowledged before the producer closed; they stay stored and "
                        "are published again on the next start", left)


def release_producer(cfg: Config) -> Any:
    """The release publisher's idempotent ``acks=all`` producer, by ``release.kafka_client``; it accepts
    messages up to ``kafka.release_message_max_bytes`` + :data:`~stream_dp.wire.MESSAGE_OVERHEAD_BYTES`
    (the publisher cuts larger records into parts)."""
    largest = cfg.kafka.release_message_max_bytes + MESSAGE_OVERHEAD_BYTES  # a part message, key and framing
    if cfg.release.kafka_client == "kafka-python":
        return kafka_producer(cfg.kafka, enable_idempotence=True, acks="all", retries=5, max_request_size=largest)
    settings = {**confluent_client_settings(cfg.kafka), "enable.idempotence": True, "acks": "all",
                "linger.ms": 0, "delivery.timeout.ms": DELIVERY_TIMEOUT_MS, "message.max.bytes": largest}
    producer = ConfluentProducer(settings)
    producer.warm_up(cfg.kafka.releases_topic)
    return producer
