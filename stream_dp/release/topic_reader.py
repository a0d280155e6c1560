"""Read what the releases topic holds -- all of it, or the last records of each partition -- for the
ledger's checks against it (the topic is the ground truth of what was spent: docs/privacy.md §4c).

Unlike a subscriber (:mod:`stream_dp.client`), these reads are bounded: they stop at each partition's
high-water mark as the fetch reports it (the broker's ``end_offsets`` is under-reported by some
Kafka-protocol brokers, such as the embedded Tansu), and they report what retention deleted: each partition's first
offset still held (its log start offset) and its end. Release records cut into parts are joined
(:class:`~stream_dp.client.PartJoiner`); a tail read that starts inside a cut record drops the parts before
that record's first one. Every message is checked against the release schema
(:func:`~stream_dp.client.check_record`); one that fails is reported, not dropped silently.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from stream_dp.client import PartJoiner, ReleaseRecordError, check_record
from stream_dp.config import KafkaConfig
from stream_dp.errors import StreamDPError
from stream_dp.kafka_options import NO_AUTO_CREATE, forbid_auto_create

READ_TIMEOUT_SECONDS = 60.0


class _DropCancelledRefresh(logging.Filter):
    """kafka-python 3 logs ``Metadata refresh: failed Cancelled`` (ERROR) when a consumer is closed while its
    background metadata refresh is pending -- as every read here ends: not a failure, and an ERROR line in
    every release worker's start and every ``budget verify --against-topic`` otherwise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Metadata refresh: failed Cancelled" not in record.getMessage()


logging.getLogger("kafka.cluster").addFilter(_DropCancelledRefresh())


@dataclass(frozen=True)
class Published:
    """One release record as the topic holds it (the offset of its first message)."""

    partition: int
    offset: int
    record: dict[str, Any]

    @property
    def release_id(self) -> str:
        return str(self.record["release_id"])

    @property
    def scope(self) -> str:
        return str(self.record["budget"]["scope"])


@dataclass
class TopicContents:
    """What a read of the releases topic found: the records, in partition and offset order; per partition
    the first offset still held (> 0: retention deleted what came before) and the end (high-water mark);
    and the messages that are not release records (``"partition@offset: why"``)."""

    topic: str
    records: list[Published] = field(default_factory=list)
    starts: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)

    @property
    def ever_written(self) -> bool:
        """Whether any record was ever appended (an end above 0), even if retention deleted it since."""
        return any(end > 0 for end in self.ends.values())

    @property
    def trimmed(self) -> list[int]:
        """Partitions whose first records were deleted (by retention or a deleteRecords call)."""
        return sorted(p for p, start in self.starts.items() if start > 0)


class TopicUnreadable(RuntimeError, StreamDPError):
    """The releases topic could not be read to its end in time (the broker named by kafka.bootstrap_servers)."""


def read_releases(cfg: KafkaConfig, topic: str | None = None, *, last: int | None = None,
                  timeout: float = READ_TIMEOUT_SECONDS) -> TopicContents:
    """Every release record on ``topic`` (default ``kafka.releases_topic``), or with ``last`` only those in
    the last ``last`` messages of each partition. A topic that does not exist reads as empty."""
    topic = topic or cfg.releases_topic
    # a read never creates the topic (the topic contract: stream-dp topics create makes it)
    consumer = forbid_auto_create(KafkaConsumer(**cfg.client_options(), **NO_AUTO_CREATE, enable_auto_commit=False,
                                                group_id=None, auto_offset_reset="earliest"))
    try:
        return _read(consumer, topic, last, timeout)
    finally:
        consumer.close()


def _read(consumer: KafkaConsumer, topic: str, last: int | None, timeout: float) -> TopicContents:
    out = TopicContents(topic)
    partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    if not tps:
        return out
    consumer.assign(tps)
    starts = consumer.beginning_offsets(tps)
    out.starts = {tp.partition: int(starts[tp]) for tp in tps}
    if last is None:
        consumer.seek_to_beginning(*tps)
    else:
        ends = consumer.end_offsets(tps)  # maybe under-reported: the read still goes to the fetched end
        for tp in tps:
            consumer.seek(tp, max(out.starts[tp.partition], int(ends[tp]) - last))
    joiner, begun = PartJoiner(), set[int]()
    deadline = time.monotonic() + timeout
    while True:
        for tp, messages in consumer.poll(timeout_ms=200).items():
            for msg in messages:
                _take(out, joiner, begun, tp.partition, msg.offset, msg.value, tail=last is not None)
        caught_up = True
        for tp in tps:
            end = consumer.highwater(tp)
            if end is None or consumer.position(tp) < end:
                caught_up = False
            else:
                out.ends[tp.partition] = int(end)
        if caught_up:
            return out
        if time.monotonic() > deadline:
            raise TopicUnreadable(f"the releases topic {topic} was not read to its end within {timeout:g} s "
                                  "(kafka.bootstrap_servers)")


def _take(out: TopicContents, joiner: PartJoiner, begun: set[int], partition: int, offset: int, value: bytes,
          *, tail: bool) -> None:
    try:
        record = check_record(value, where=f"{out.topic}/{partition}@{offset}")
    except ReleaseRecordError as exc:
        out.invalid.append(f"{partition}@{offset}: {exc}")
        return
    part = record.get("part")
    if tail and partition not in begun and part is not None and int(part["index"]) != 0:
        return  # the tail began inside a record cut into parts: its first parts are before the tail
    begun.add(partition)
    continued = part is not None and int(part["index"]) > 0
    first = joiner.first_offset(partition) if continued else offset
    whole = joiner.offer(partition, offset, record)
    if whole is not None:
        out.records.append(Published(partition, offset if first is None else first, whole))
