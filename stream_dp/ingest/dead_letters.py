"""Dead letters: every rejected record reaches the dead-letter topic once, whole or in a bounded form.

A rejected record is written as is (original key and bytes; the reason and the source topic, partition
and offset in headers) when that fits the producer's ``max_request_size``
(``ingest.dead_letter_max_request_bytes``). A record that does not fit — or whose dead letter the broker
refuses for good (a non-retriable error such as ``MESSAGE_TOO_LARGE``) — is written in a *bounded form*:
a small JSON object with the reason, the source position, the original size, a SHA-256 of the original
bytes and a prefix of at most :data:`PREFIX_BYTES` bytes (header ``dead_letter_form: bounded``). If even
that is refused for good, the record is counted in ``stream_dp_ingest_dead_letters_lost_total`` and
logged by position; the stream moves on. A permanent per-record failure therefore never stops ingest,
and only *retriable* errors (broker down, timeouts) make the loop retry the batch.

Retries never duplicate a dead letter: the writer remembers which source offsets it has written (until
their Kafka offsets are committed), and a retried batch skips them. Each dead letter also carries a
``dead_letter_id`` header (``topic/partition/offset``), so a consumer of the dead-letter topic can drop the
copies a crash between writing a dead letter and committing its offset can leave (a replay after a crash
re-sends the uncommitted batch's dead letters).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

import orjson
from kafka.errors import KafkaError, KafkaTimeoutError

from stream_dp.errors import StreamDPError

log = logging.getLogger(__name__)

#: Bytes of the original value kept in a bounded dead letter.
PREFIX_BYTES = 1024

#: What a record batch and its record add to key + value + headers (v2 format: 61-byte batch header, ≤ 21
#: bytes of record framing, varint lengths); generous, so a dead letter judged to fit does fit.
RECORD_OVERHEAD_BYTES = 128


class DeadLetterUnavailable(KafkaError, StreamDPError):
    """The dead-letter topic could not be written for a retriable reason; the batch is retried."""

    retriable = True


@dataclass(frozen=True)
class Rejected:
    """One rejected record: where it came from, its key and bytes, and why it was rejected."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str

    @property
    def source_id(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


def _headers(r: Rejected, form: str) -> list[tuple[str, bytes]]:
    return [("reason", r.reason.encode()), ("source_topic", r.topic.encode()),
            ("source_partition", str(r.partition).encode()), ("source_offset", str(r.offset).encode()),
            ("dead_letter_id", r.source_id.encode()), ("dead_letter_form", form.encode())]


def full_size(r: Rejected) -> int:
    """An upper bound of the serialized size of ``r``'s dead letter in its full form."""
    headers = sum(len(k) + len(v) + 10 for k, v in _headers(r, "full"))
    return len(r.key or b"") + len(r.value or b"") + headers + RECORD_OVERHEAD_BYTES


def bounded_value(r: Rejected, cause: str) -> bytes:
    """The bounded form of ``r``'s dead letter: position, size, SHA-256 and a prefix (base64), as JSON.

    >>> import json
    >>> v = json.loads(bounded_value(Rejected("events", 2, 7, b"k", b"x" * 5000, "bad_json"), "too_large"))
    >>> v["size"], v["source_offset"], len(base64.b64decode(v["prefix_base64"])), v["cause"]
    (5000, 7, 1024, 'too_large')
    """
    value = r.value or b""
    key = r.key or b""
    return orjson.dumps({
        "reason": r.reason, "cause": cause, "source_topic": r.topic, "source_partition": r.partition,
        "source_offset": r.offset, "size": len(value), "sha256": hashlib.sha256(value).hexdigest(),
        "prefix_base64": base64.b64encode(value[:PREFIX_BYTES]).decode(),
        "key_size": len(key), "key_sha256": hashlib.sha256(key).hexdigest() if r.key is not None else None,
    })


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaTimeoutError) or bool(getattr(exc, "retriable", False))


@dataclass
class _Sent:
    record: Rejected
    future: Any  # a FutureRecordMetadata, or the exception send() raised
    bounded: bool


class DeadLetterWriter:
    """Writes dead letters for one ingest worker: :meth:`write` from the ingest loop's thread; :meth:`forget`
    and :meth:`forget_partition` may also come from kafka-python's IO thread (commit and rebalance callbacks).

    ``metrics`` is the worker's :class:`~stream_dp.ingest.metrics.IngestMetrics`."""

    def __init__(self, producer: Any, topic: str, metrics: Any, *, max_request_bytes: int,
                 timeout_seconds: float) -> None:
        self.producer = producer
        self.topic = topic
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        self.timeout = timeout_seconds
        self._written: set[tuple[str, int, int]] = set()  # source offsets whose dead letter is written
        self._lock = threading.Lock()  # guards _written

    def write(self, records: list[Rejected]) -> None:
        """Write the dead letters of ``records`` (those not written before) and wait for them.

        Raises :class:`DeadLetterUnavailable` when a retriable error prevented some of them (the batch is
        then retried; those already written are skipped next time). Permanent failures do not raise."""
        with self._lock:
            todo = [r for r in records if (r.topic, r.partition, r.offset) not in self._written]
        if not todo:
            return
        sent = [self._send(r, bounded=full_size(r) > self.max_request_bytes, cause="too_large") for r in todo]
        retry_error: BaseException | None = None
        while sent:
            self.producer.flush(timeout=self.timeout)
            again: list[_Sent] = []
            for s in sent:
                exc = self._outcome(s)
                if exc is None:
                    self._done(s)
                elif _retriable(exc):
                    retry_error = retry_error or exc
                elif not s.bounded:
                    log.warning("dead letter of %s refused (%s: %s); writing it in bounded form",
                                s.record.source_id, type(exc).__name__, exc)
                    again.append(self._send(s.record, bounded=True, cause=type(exc).__name__))
                else:
                    self.metrics.dead_letters_lost.inc()
                    self._remember(s.record)
                    log.error("dead letter of %s (reason %s, %d bytes) refused even in bounded form (%s: %s); "
                              "the record is skipped", s.record.source_id, s.record.reason,
                              len(s.record.value or b""), type(exc).__name__, exc)
            sent = again
        if retry_error is not None:
            raise DeadLetterUnavailable(f"dead-letter topic {self.topic!r} not writable "
                                        f"({type(retry_error).__name__}: {retry_error})") from retry_error
        self.metrics.dependency_up.labels(dependency="kafka").set(1)

    def forget(self, topic: str, partition: int, below: int) -> None:
        """Drop what is remembered about offsets below ``below`` (committed: never replayed here again)."""
        with self._lock:
            self._written = {w for w in self._written if not (w[0] == topic and w[1] == partition and w[2] < below)}

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop what is remembered about a partition (revoked: its new owner writes what it replays)."""
        with self._lock:
            self._written = {w for w in self._written if not (w[0] == topic and w[1] == partition)}

    def _remember(self, r: Rejected) -> None:
        with self._lock:
            self._written.add((r.topic, r.partition, r.offset))

    # ---------------------------------------------------------------------------------------------
    def _send(self, r: Rejected, *, bounded: bool, cause: str) -> _Sent:
        key: bytes | None
        value: bytes | None
        if bounded:
            key, value, headers = None, bounded_value(r, cause), _headers(r, "bounded")
        else:
            key, value, headers = r.key, r.value, _headers(r, "full")
        try:
            fut: Any = self.producer.send(self.topic, key=key, value=value, headers=headers)
        except KafkaError as exc:  # kafka-python raises some refusals (record too large) at once
            fut = exc
        return _Sent(r, fut, bounded)

    def _outcome(self, s: _Sent) -> BaseException | None:
        if isinstance(s.future, BaseException):
            return s.future
        try:
            s.future.get(timeout=self.timeout)
        except KafkaError as exc:
            return exc
        return None

    def _done(self, s: _Sent) -> None:
        self._remember(s.record)
        self.metrics.dead_lettered.inc()
        if s.bounded:
            self.metrics.dead_letters_bounded.inc()
