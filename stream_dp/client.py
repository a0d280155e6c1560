"""Subscribe to the releases topic: schema-checked, de-duplicated release records, for any downstream reader.

A release record (``config/release.schema.json``) is what the service publishes per window and release
type. :func:`subscribe` yields them as dicts, each one

- **checked**: its ``schema_version`` is one this client reads (an unknown version raises
  :class:`UnsupportedSchemaVersion` by default -- a newer producer is never misread silently), and it
  follows the JSON schema shipped with the package (a record that does not is skipped and reported);
- **once**: a release the worker republished after a crash (same ``release_id``, same bytes) is yielded
  only the first time it is seen;

from one of three starting points:

- ``start="beginning"`` (default): every release still on the topic, then new ones;
- ``start="now"``: only releases published after the subscriber was assigned its partitions (the end is
  the high-water mark of the first fetch, not the broker's end offset, which some Kafka-protocol brokers
  under-report);
- ``group="my-service"``: a Kafka consumer group for a downstream service. It resumes where the group
  left off after a restart (``start`` then only chooses where a *new* group begins). Delivery is at least
  once: a record's offset is committed once the caller asks for the next record (or calls
  :meth:`ReleaseSubscriber.commit`), so the record being processed when the service died is delivered
  again -- make processing idempotent by ``release_id``.

The module imports no Redis client: subscribers only ever see what the service published.

>>> check_record(b'{"schema_version": 2, "release_id": "0-60.topk"}')
Traceback (most recent call last):
...
stream_dp.client.UnsupportedSchemaVersion: release record 0-60.topk has schema_version 2; this stream-dp client reads schema_version 1 only (upgrade stream-dp to read newer records)
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from stream_dp import kafka_sockets
from stream_dp.broker_reach import BOOTSTRAP_ERRORS, BrokerReach, BrokerUnreachable, unreachable
from stream_dp.errors import StreamDPError
from stream_dp.kafka_options import forbid_auto_create
from stream_dp.config import KafkaConfig
from stream_dp.wire import join_parts

log = logging.getLogger(__name__)

__all__ = ["BrokerUnreachable", "InvalidReleaseRecord", "ReleaseRecordError", "ReleaseSubscriber",
           "UnsupportedSchemaVersion", "check_record", "subscribe"]

kafka_sockets.install()  # the subscriber's consumer closes its sockets on kafka-python 3.0's leaking paths

SUPPORTED_SCHEMA_VERSIONS: frozenset[int] = frozenset({1})
SCHEMA_PATH = Path(__file__).resolve().parent / "defaults" / "release.schema.json"
STARTS = ("beginning", "now")
DEFAULT_SEEN_CAPACITY = 100_000  # release ids remembered for de-duplication (a year of hourly windows x 10 types)


class ReleaseRecordError(ValueError, StreamDPError):
    """A message on the releases topic that this client will not hand out as a release record."""

    def __init__(self, message: str, *, release_id: str | None = None, where: str | None = None) -> None:
        super().__init__(message + (f" (at {where})" if where else ""))
        self.release_id = release_id
        self.where = where


class UnsupportedSchemaVersion(ReleaseRecordError):
    """The record declares a ``schema_version`` this client does not know (a newer or foreign producer)."""


class InvalidReleaseRecord(ReleaseRecordError):
    """Not JSON, not an object, or not following the release schema."""


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def release_types() -> tuple[str, ...]:
    """The release types the shipped schema knows (``type`` enum), e.g. ``("topk", "alerts", …)``."""
    return tuple(_validator().schema["properties"]["type"]["enum"])


def check_record(value: bytes | str | dict[str, Any], *, where: str | None = None) -> dict[str, Any]:
    """The release record in ``value`` (a message value or a decoded dict), checked.

    Raises :class:`UnsupportedSchemaVersion` if its ``schema_version`` is not one of
    :data:`SUPPORTED_SCHEMA_VERSIONS`, :class:`InvalidReleaseRecord` if it is not a JSON object following
    the schema. The version is checked first, so a newer record is reported as newer, not as invalid.
    """
    if isinstance(value, dict):
        record = value
    else:
        try:
            record = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidReleaseRecord(f"message is not JSON ({exc.__class__.__name__})", where=where) from None
        if not isinstance(record, dict):
            raise InvalidReleaseRecord(f"message is JSON but not an object ({type(record).__name__})", where=where)
    rid = record.get("release_id")
    rid = rid if isinstance(rid, str) else None
    version = record.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS or isinstance(version, bool):
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_SCHEMA_VERSIONS))
        raise UnsupportedSchemaVersion(
            f"release record {rid or '(no release_id)'} has schema_version {version!r}; this stream-dp client "
            f"reads schema_version {supported} only (upgrade stream-dp to read newer records)",
            release_id=rid, where=where)
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.absolute_path) or "(the record)"
        raise InvalidReleaseRecord(
            f"release record {rid or '(no release_id)'} does not follow the release schema: {path}: {first.message}",
            release_id=rid, where=where)
    return record


def report_invalid(error: ReleaseRecordError) -> None:
    """The default ``on_invalid``: an unknown schema version stops the reader (raise); a malformed record is
    logged and skipped (a dead message must not stop every subscriber)."""
    if isinstance(error, UnsupportedSchemaVersion):
        raise error
    log.warning("skipped a message on the releases topic: %s", error)


class SeenIds:
    """Release ids already handed out, the most recent ``capacity`` of them (oldest forgotten first)."""

    def __init__(self, capacity: int = DEFAULT_SEEN_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, release_id: str) -> bool:
        """True the first time ``release_id`` is offered (and remembers it), False afterwards."""
        if release_id in self._ids:
            self._ids.move_to_end(release_id)
            return False
        self._ids[release_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True


class PartJoiner:
    """Joins the part messages of releases too large for one message (field ``part``; the publisher sends a
    release's parts one after the other on its partition, :func:`stream_dp.wire.message_parts`).

    Per partition at most one release is being joined. A message of another release on that partition ends
    it: the publisher was interrupted between two parts (a crash, a failed send), and it publishes that
    release again, whole, later. Parts of one release seen twice (such a republication) are the same bytes."""

    def __init__(self) -> None:
        self._open: dict[Any, tuple[str, int, dict[int, dict[str, Any]]]] = {}  # partition -> (id, offset, parts)

    def offer(self, partition: Any, offset: int, record: dict[str, Any]) -> dict[str, Any] | None:
        """``record`` itself when it is whole; for a part, None until the release's last part, then the
        joined record (:func:`~stream_dp.wire.join_parts`)."""
        rid = record["release_id"]
        current = self._open.get(partition)
        if current is not None and current[0] != rid:
            log.warning("release %s: only parts %s of %d arrived before release %s; it is published again whole",
                        current[0], sorted(current[2]), next(iter(current[2].values()))["part"]["count"], rid)
            del self._open[partition]
            current = None
        part = record.get("part")
        if part is None:
            return record
        if current is None:
            current = self._open[partition] = (rid, offset, {})
        current[2][int(part["index"])] = record
        if len(current[2]) < int(part["count"]):
            return None
        del self._open[partition]
        return join_parts(list(current[2].values()))

    def first_offset(self, partition: Any) -> int | None:
        """The offset of the first part of the release being joined on ``partition`` (None: none is)."""
        current = self._open.get(partition)
        return None if current is None else current[1]


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
