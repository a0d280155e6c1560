"""Reading the releases topic: from the beginning, from now, or in a consumer group that resumes where it left
off (at least once: an offset is committed once the caller asks for the next record); each message checked
(:mod:`~stream_dp.client.records`) and handed out whole and once (:mod:`~stream_dp.client.once`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from stream_dp import kafka_sockets
from stream_dp.broker_reach import BOOTSTRAP_ERRORS, BrokerReach, unreachable
from stream_dp.client.once import DEFAULT_SEEN_CAPACITY, PartJoiner, SeenIds
from stream_dp.client.records import ReleaseRecordError, check_record, report_invalid
from stream_dp.config import KafkaConfig
from stream_dp.kafka_options import forbid_auto_create

kafka_sockets.install()  # the subscriber's consumer closes its sockets on kafka-python 3.0's leaking paths

STARTS = ("beginning", "now")


@dataclass(frozen=True)
class _Message:
    """A fetched message not yet handed out (or skipped)."""

    value: bytes
    partition: TopicPartition
    offset: int


class ReleaseSubscriber:
    """A reader of the releases topic (see the module docstring); use :func:`subscribe` for a generator.

    ``kafka`` is the ``[kafka]`` config (security settings apply) or a ``host:port[,…]`` bootstrap string.
    No broker answering when it starts raises :class:`~stream_dp.broker_reach.BrokerUnreachable` (the message
    names ``kafka.bootstrap_servers`` and the address); a broker lost later is reconnected to by itself
    (:meth:`unreachable` tells an outage from a quiet topic).
    ``poll()`` returns the next batch of checked, first-seen records (maybe empty); in group mode, the
    previous batch is committed first.
    """

    def __init__(self, kafka: KafkaConfig | str, topic: str | None = None, *, start: str = "beginning",
                 group: str | None = None, types: Iterable[str] | None = None,
                 on_invalid: Callable[[ReleaseRecordError], None] = report_invalid,
                 seen_capacity: int = DEFAULT_SEEN_CAPACITY, consumer_options: dict[str, Any] | None = None) -> None:
        if start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
        cfg = KafkaConfig(bootstrap_servers=kafka) if isinstance(kafka, str) else kafka
        if not cfg.bootstrap_servers:
            raise ValueError("kafka.bootstrap_servers is empty: set it (or STREAM_DP_KAFKA__BOOTSTRAP_SERVERS)")
        self.topic = topic or cfg.releases_topic
        self.group = group
        self.types = frozenset(types or ())
        self.on_invalid = on_invalid
        self._start = start
        self._seen = SeenIds(seen_capacity)
        self._parts = PartJoiner()
        self._assigned: set[TopicPartition] = set()
        self._uncommitted: dict[TopicPartition, int] = {}
        self._pending: deque[_Message] = deque()
        self._ends_unknown: set[TopicPartition] = set()  # start="now": partitions whose end is not known yet
        self._now: dict[TopicPartition, int] = {}  # start="now": first offset published after the start
        opts: dict[str, Any] = {
            **cfg.client_options(), "allow_auto_create_topics": False,  # a subscriber never makes the topic
            "enable_auto_commit": False, "group_id": group,
            "auto_offset_reset": "earliest" if start == "beginning" else "latest",
            "session_timeout_ms": cfg.session_timeout_ms, "heartbeat_interval_ms": cfg.heartbeat_interval_ms,
            **(consumer_options or {})}
        try:
            self.consumer = forbid_auto_create(KafkaConsumer(self.topic, **opts) if group else KafkaConsumer(**opts))
        except BOOTSTRAP_ERRORS:
            raise unreachable(cfg.bootstrap_servers) from None
        self._reach = BrokerReach(self.consumer)

    # ---- reading ----------------------------------------------------------------------------------
    def _assign(self) -> None:
        """Without a group: every partition of the topic, positioned at the start point (new ones too)."""
        parts = self.consumer.partitions_for_topic(self.topic) or set()
        tps = {TopicPartition(self.topic, p) for p in parts}
        if tps and tps != self._assigned:
            new = tps - self._assigned
            self.consumer.assign(sorted(tps, key=lambda tp: tp.partition))
            if self._start == "beginning":
                self.consumer.seek_to_beginning(*new)
            else:
                self.consumer.seek_to_end(*new)
                self._ends_unknown |= new
            self._assigned = tps

    def _fill(self, timeout_ms: int) -> None:
        """Fetch the next messages into the pending queue (waiting at most ``timeout_ms``)."""
        if self.group is None and not self._assigned:
            self._assign()
            if not self._assigned:
                time.sleep(timeout_ms / 1000)  # the topic does not exist yet
                return
        fetched = self.consumer.poll(timeout_ms=timeout_ms)
        self._learn_ends()
        for tp, messages in fetched.items():
            floor = self._now.get(tp, 0)
            self._pending.extend(_Message(msg.value, tp, msg.offset) for msg in messages if msg.offset >= floor)

    def _learn_ends(self) -> None:
        """``start="now"``: take "now" as the high-water mark of the first fetch of each partition.

        Some Kafka-protocol brokers under-report the end offset that ``seek_to_end`` asks for (Tansu
        answers the last batch's base offset + 1), so the fetched high-water mark is the reliable end:
        messages below it were published before the subscriber started and are skipped.
        """
        for tp in list(self._ends_unknown):
            end = self.consumer.highwater(tp)
            if end is None:
                continue
            self._now[tp] = end
            if self.consumer.position(tp) < end:
                self.consumer.seek(tp, end)
            self._ends_unknown.discard(tp)

    def _accept(self, msg: _Message) -> dict[str, Any] | None:
        """The record in ``msg`` if it is checked and new (``on_invalid`` decides about a bad one: it may raise);
        a part of a release cut into parts is held until its last part, then the whole record is returned."""
        record: dict[str, Any] | None
        try:
            record = check_record(msg.value, where=f"{msg.partition.topic}/{msg.partition.partition}@{msg.offset}")
        except ReleaseRecordError as exc:
            self.on_invalid(exc)
            return None
        record = self._parts.offer(msg.partition, msg.offset, record)
        if record is None:
            return None
        if self.types and record["type"] not in self.types:
            return None
        return record if self._seen.first_time(record["release_id"]) else None

    def poll(self, timeout_ms: int = 500) -> list[dict[str, Any]]:
        """The next checked, first-seen records (in partition order), waiting at most ``timeout_ms``.

        When ``on_invalid`` raises for a message, the records before it are returned first and the next
        call raises (the message stays unprocessed, so a group never commits past it).
        """
        self.commit()
        if not self._pending:
            self._fill(timeout_ms)
        out: list[dict[str, Any]] = []
        while self._pending:
            msg = self._pending[0]
            try:
                record = self._accept(msg)
            except Exception:
                if out:
                    return out
                raise
            self._pending.popleft()
            self._done(msg)
            if record is not None:
                out.append(record)
        return out

    def unreachable(self) -> str | None:
        """Why no broker can be reached, or None. A poll during an outage returns nothing, as when nothing was
        published (the client reconnects by itself); ask this after an empty poll to tell the two apart
        (:class:`~stream_dp.broker_reach.BrokerReach`)."""
        return self._reach.unreachable()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.records()

    def records(self, *, stop: Callable[[], bool] = lambda: False, idle_timeout: float | None = None,
                poll_timeout_ms: int = 500) -> Iterator[dict[str, Any]]:
        """Records one at a time until ``stop()`` or ``idle_timeout`` seconds without a new record.

        The idle clock starts at this call, so in group mode it includes joining the group (a few seconds;
        longer while a member that died without leaving is still waited for): give ``idle_timeout`` that much
        headroom. (Starting it at the assignment instead would never stop a member the group gives no partition.)

        In group mode a record counts as processed (its offset is committed with the next commit) when
        the caller asks for the one after it.
        """
        last = time.monotonic()
        while not stop():
            self.commit()
            if not self._pending:
                self._fill(poll_timeout_ms)
            while self._pending:
                msg = self._pending[0]
                record = self._accept(msg)  # on_invalid may raise: the message stays unprocessed
                self._pending.popleft()
                if record is not None:
                    yield record
                    last = time.monotonic()
                self._done(msg)
                if stop():
                    return
            if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                return

    # ---- offsets ----------------------------------------------------------------------------------
    def _done(self, msg: _Message) -> None:
        if self.group is not None:
            # never past the first part of a release still being joined: a restart must read it again
            held = self._parts.first_offset(msg.partition)
            self._uncommitted[msg.partition] = msg.offset + 1 if held is None else held

    def commit(self) -> None:
        """Group mode: commit the offsets of every record processed so far (no-op without a group)."""
        if self.group is None or not self._uncommitted:
            return
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in self._uncommitted.items()}
        self.consumer.commit(offsets)
        self._uncommitted.clear()

    def close(self) -> None:
        """Commit what was processed (group mode) and leave the group / close the connections."""
        try:
            self.commit()
        finally:
            self.consumer.close()

    def __enter__(self) -> "ReleaseSubscriber":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def subscribe(kafka: KafkaConfig | str, topic: str | None = None, *, start: str = "beginning",
              group: str | None = None, types: Iterable[str] | None = None,
              on_invalid: Callable[[ReleaseRecordError], None] = report_invalid,
              stop: Callable[[], bool] = lambda: False, idle_timeout: float | None = None,
              poll_timeout_ms: int = 500, consumer_options: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Yield checked, de-duplicated release records from the releases topic (see the module docstring).

    ``types`` keeps only those release types; ``stop`` and ``idle_timeout`` (seconds without a new record)
    end the iteration; closing the generator (or leaving a ``for`` loop) closes the consumer, committing
    in group mode every record before the last one handed out. No broker answering at the start raises
    :class:`~stream_dp.broker_reach.BrokerUnreachable` (within ``consumer_options["bootstrap_timeout_ms"]``,
    kafka-python's default 30 s).
    """
    sub = ReleaseSubscriber(kafka, topic, start=start, group=group, types=types, on_invalid=on_invalid,
                            consumer_options=consumer_options)
    try:
        yield from sub.records(stop=stop, idle_timeout=idle_timeout, poll_timeout_ms=poll_timeout_ms)
    finally:
        sub.close()
