"""The confluent-kafka (librdkafka) consumer behind the kafka-python calls the ingest loop makes.

Its fetching and record decoding run in C: a bare poll loop on it costs about a quarter of kafka-python's
CPU per event (bench/README.md), the CPU the applier and redis-server need on a small machine
(``ingest.kafka_client = "confluent"``; :mod:`stream_dp.ingest.consumers` chooses the backend). What maps
how (the guarantees of :mod:`~stream_dp.ingest.commits` are unchanged):

- Records: confluent's ``timestamp()`` is ``(type, ms)``: the loop gets ``ms``, or None when the type says
  there is none (:meth:`ConfluentConsumer.columns`, :meth:`ConfluentConsumer.fields`).
- Partitions are kafka-python ``TopicPartition`` tuples, offsets ``OffsetAndMetadata``.
- Rebalance: librdkafka calls ``on_revoke`` / ``on_assign`` inside ``consume()``, on the loop's thread.
  The revoke path runs :meth:`~stream_dp.ingest.commits.RebalanceListener.revoke` with a *synchronous*
  commit: the batches in flight are applied and their offsets committed before the partitions go
  (as the kafka-python listener does on its IO thread). Partitions *lost* (the session expired: the group
  already moved on) are handed over without a commit — the new owner replays, which the offset records in
  Redis skip.
- Commits: ``enable.auto.commit`` and ``enable.auto.offset.store`` are off; only explicit offsets are
  committed. An asynchronous commit's outcome arrives through ``on_commit`` during a later ``consume()``
  and is matched to its request by the offsets it carries.
- Errors: librdkafka retries broker errors itself; a per-message error is logged and skipped (the records
  around it are kept: dropping them would let a later commit pass over them), a fatal error is raised. What
  is raised is a kafka-python ``KafkaError`` (a refused commit after a rebalance: ``CommitFailedError``), so
  the loop classifies failures the same way on both backends.
- ``highwater``: the high-water mark of the last fetch response (``get_watermark_offsets(cached=True)``),
  as kafka-python's; the lag never costs a round trip.
- Outages: librdkafka reconnects by itself, and a poll while no broker answers just returns nothing;
  :meth:`ConfluentConsumer.unreachable` says so, asked by the loop after an empty poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from itertools import compress, islice, repeat
from operator import is_not, ne
from typing import Any, Protocol, cast

from kafka import TopicPartition
from kafka.errors import CommitFailedError, KafkaError

from stream_dp.config import KafkaConfig
from stream_dp.connections import confluent_client_settings
from stream_dp.errors import StreamDPError
from stream_dp.ingest.commits import Offsets

log = logging.getLogger(__name__)


# --- settings ---------------------------------------------------------------------------------------------

#: Default of ``ingest.prefetch_max_kbytes``: most KiB of records librdkafka fetches ahead of the loop.
PREFETCH_MAX_KBYTES = 2048
#: How long librdkafka waits before fetching again once its prefetch queue is at its bound (its own
#: default, 1000 ms, would stall a bounded queue for a second each time the loop catches up).
FETCH_QUEUE_BACKOFF_MS = 10


def confluent_settings(cfg: KafkaConfig, *, group_id: str, prefetch_max_kbytes: int = PREFETCH_MAX_KBYTES
                       ) -> dict[str, Any]:
    """librdkafka settings equivalent to :func:`stream_dp.connections.kafka_consumer`'s (bootstrap,
    security, group timings, earliest reset) with commits only of explicit offsets.

    The prefetch queue is bounded (``ingest.prefetch_max_kbytes``; librdkafka's default is 64 MiB, and
    librdkafka keeps ~200 bytes of its own per queued record on top): a loop that lags holds at most that
    many KiB of records it has not polled yet -- plus up to one fetch per partition in flight
    (``max.partition.fetch.bytes``, 1 MiB) -- instead of growing by the whole default queue. Fetching
    resumes :data:`FETCH_QUEUE_BACKOFF_MS` after the queue drops below the bound."""
    conf: dict[str, Any] = {
        **confluent_client_settings(cfg),
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": cfg.session_timeout_ms,
        "heartbeat.interval.ms": cfg.heartbeat_interval_ms,
        "queued.max.messages.kbytes": prefetch_max_kbytes,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }
    return conf


class ConfluentError(KafkaError, StreamDPError):
    """A confluent-kafka error, raised as a kafka-python ``KafkaError`` (the loop's "kafka" dependency)."""

    retriable = True


def _raise_as_kafka_error(exc: Exception, doing: str) -> None:
    from confluent_kafka import KafkaError as CKError

    err: Any = exc.args[0] if exc.args else None  # a confluent KafkaError, or anything
    code = err.code() if hasattr(err, "code") else None
    text = err.str() if hasattr(err, "str") else str(exc)
    if code in (CKError.REBALANCE_IN_PROGRESS, CKError.ILLEGAL_GENERATION, CKError.UNKNOWN_MEMBER_ID,
                CKError._ASSIGNMENT_LOST):
        raise CommitFailedError(f"{doing}: {text}") from exc
    raise ConfluentError(f"{doing}: {text}") from exc


class _CommitInFlight:
    """An asynchronous commit not answered yet (``is_done`` as kafka-python's future)."""

    __slots__ = ("offsets", "callback", "is_done")

    def __init__(self, offsets: Offsets, callback: Callable[[Offsets, Any], None] | None) -> None:
        self.offsets = offsets
        self.callback = callback
        self.is_done = False


class RevokeListener(Protocol):
    """What :class:`ConfluentConsumer` calls on a rebalance (:class:`~stream_dp.ingest.commits.RebalanceListener`)."""

    def revoke(self, revoked: set[TopicPartition], commit: Callable[[Offsets], None] | None) -> None: ...

    def assigned(self, assigned: set[TopicPartition]) -> None: ...


class ConfluentConsumer:
    """A confluent-kafka consumer behind the kafka-python calls the ingest loop makes (module docstring).
    Not thread-safe: the loop owns it."""

    def __init__(self, settings: dict[str, Any], *, max_poll_records: int) -> None:
        from confluent_kafka import Consumer

        self.max_poll_records = max_poll_records
        self._assigned: set[TopicPartition] = set()
        self._revoked_in_poll: set[TopicPartition] = set()  # taken away by a rebalance inside the current poll
        # where consumption of an owned partition starts (its committed offset, or the low watermark when
        # the group has none: auto.offset.reset = earliest), for :meth:`position` before a record arrived
        self._start: dict[TopicPartition, int | None] = {}
        self._commits: list[_CommitInFlight] = []
        self._listener: RevokeListener | None = None
        self._fatal: str | None = None
        self._all_brokers_down: str | None = None  # librdkafka's last "all brokers down" report, until reached again
        self._consumer = Consumer({**settings, "on_commit": self._on_commit, "error_cb": self._on_error,
                                   "logger": logging.getLogger("stream_dp.ingest.librdkafka")})

    # --- group membership ------------------------------------------------------------------------------
    def subscribe(self, topics: list[str], listener: RevokeListener | None = None) -> None:
        self._listener = listener
        self._consumer.subscribe(list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    def _on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        assigned = {TopicPartition(p.topic, p.partition) for p in partitions}
        self._assigned |= assigned
        self._learn_starts(partitions)
        if self._listener is not None and assigned:
            self._listener.assigned(assigned)

    def _learn_starts(self, partitions: list[Any]) -> None:
        """The committed offsets of newly assigned partitions (one round trip per rebalance): librdkafka
        knows a partition's position only once a record of it was consumed, and an owned partition that
        receives nothing must still count as caught up (or it would hold the global watermark back)."""
        from confluent_kafka import KafkaException

        if not partitions:
            return
        try:
            committed = self._consumer.committed(partitions, timeout=10)
        except KafkaException as exc:
            log.warning("could not read the committed offsets of %s (%s); their lag is unknown until a record "
                        "arrives", sorted(p.partition for p in partitions), exc)
            return
        for p in committed:
            self._start[TopicPartition(p.topic, p.partition)] = p.offset if p.offset >= 0 else None

    def _on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        revoked = {TopicPartition(p.topic, p.partition) for p in partitions}
        self._revoked_in_poll |= revoked
        try:
            if self._listener is not None and revoked:
                self._listener.revoke(revoked, self.commit)
        finally:
            self._assigned -= revoked
            for tp in revoked:
                self._start.pop(tp, None)

    def _on_lost(self, _consumer: Any, partitions: list[Any]) -> None:
        lost = {TopicPartition(p.topic, p.partition) for p in partitions}
        self._revoked_in_poll |= lost
        log.warning("partitions lost (the group moved on without this worker): %s", sorted(tp.partition for tp in lost))
        try:
            if self._listener is not None and lost:
                self._listener.revoke(lost, None)  # no commit: the new owner replays (skipped in Redis)
        finally:
            self._assigned -= lost
            for tp in lost:
                self._start.pop(tp, None)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        try:
            meta = self._consumer.list_topics(topic, timeout=10)
        except Exception as exc:  # noqa: BLE001 - classified by the loop as a broker failure
            _raise_as_kafka_error(exc, f"reading the partitions of {topic}")
        t = meta.topics.get(topic)
        if t is None or t.error is not None:
            return None
        return set(t.partitions)

    # --- records -----------------------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        """Up to ``max_poll_records`` records, waiting at most ``timeout_ms`` for the first, then taking what
        is already fetched without waiting (as kafka-python's ``poll`` does).

        librdkafka's ``consume(n, timeout)`` waits until it has ``n`` messages or the timeout passed, so one
        call would hold fewer than ``max_poll_records`` waiting records for the whole ``poll_timeout_ms``:
        up to 0.5 s more latency for every batch of a stream slower than that, and for the last batch of a
        burst. Hence two calls: one message with the timeout, the rest with none.

        Each partition's records keep their order (librdkafka delivers a partition's messages in offset
        order; a consume mixes partitions in runs). The per-message reads are ``map`` over the message
        methods, so no Python bytecode runs per record here (nor in :meth:`columns`).

        A rebalance in the second call takes the first call's record away if it revoked that record's partition:
        the partition's new owner (or this worker, assigned it again) reads it from the committed offset, so
        applying it here would replay it there -- or apply it twice in one batch."""
        if self._fatal is not None:
            raise ConfluentError(f"the Kafka client failed for good: {self._fatal}")
        from confluent_kafka import KafkaException, Message

        try:  # the rebalance callbacks run in here: their own exceptions pass through unchanged
            msgs = self._consumer.consume(num_messages=1, timeout=timeout_ms / 1000.0)
            if msgs and self.max_poll_records > 1:
                self._revoked_in_poll = set()
                more = self._consumer.consume(num_messages=self.max_poll_records - 1, timeout=0)
                if self._revoked_in_poll:
                    msgs = [m for m in msgs if TopicPartition(m.topic(), m.partition()) not in self._revoked_in_poll]
                msgs += more
        except KafkaException as exc:
            _raise_as_kafka_error(exc, "polling")
        if not msgs:
            return {}
        self._all_brokers_down = None  # records came: the brokers are reachable
        errors = list(map(Message.error, msgs))
        if any(map(is_not, errors, repeat(None))):  # by identity: a KafkaError's == None raises
            for m, err in zip(msgs, errors):
                if err is not None:
                    self._message_error(m)
            msgs = [m for m, err in zip(msgs, errors) if err is None]
            if not msgs:
                return {}
        parts = cast("list[int]", list(map(Message.partition, msgs)))  # a fetched record has its partition
        topic = msgs[0].topic()  # the loop subscribes to one topic
        # runs of one partition: [cuts[i], cuts[i + 1])
        cuts = [0, *compress(range(1, len(parts)), map(ne, islice(parts, 1, None), parts)), len(parts)]
        by_partition: dict[int, list[Any]] = {}
        for lo, hi in zip(cuts, islice(cuts, 1, None)):
            recs = by_partition.get(parts[lo])
            if recs is None:
                by_partition[parts[lo]] = msgs[lo:hi]
            else:
                recs.extend(msgs[lo:hi])
        return {TopicPartition(topic, p): recs for p, recs in by_partition.items()}

    def _message_error(self, m: Any) -> None:
        err = m.error()
        if err.fatal():
            raise ConfluentError(f"consuming {m.topic()}[{m.partition()}]: {err.str()}")
        log.warning("Kafka reported %s on %s[%s]; the records around it are kept", err.str(), m.topic(),
                    m.partition())

    @staticmethod
    def columns(msgs: list[Any]) -> tuple[list[int], list[int | None], list[bytes | None]]:
        """Offsets, record timestamps (ms; None when the record has none) and values of one partition."""
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

        stamps = [ms if kind != TIMESTAMP_NOT_AVAILABLE else None for kind, ms in map(Message.timestamp, msgs)]
        offsets = cast("list[int]", list(map(Message.offset, msgs)))  # a fetched record has its offset
        return offsets, stamps, list(map(Message.value, msgs))

    @staticmethod
    def fields(m: Any) -> tuple[str, int, int, bytes | None, bytes | None]:
        return m.topic(), m.partition(), m.offset(), m.key(), m.value()

    # --- positions ---------------------------------------------------------------------------------------
    def seek(self, tp: TopicPartition, offset: int) -> None:
        from confluent_kafka import TopicPartition as CKPartition

        try:
            self._consumer.seek(CKPartition(tp.topic, tp.partition, offset))
        except Exception as exc:  # noqa: BLE001 - the loop logs a partition it could not rewind
            _raise_as_kafka_error(exc, f"seeking {tp.topic}[{tp.partition}] to {offset}")
        self._start[tp] = offset

    def position(self, tp: TopicPartition, timeout_ms: int = 0) -> int | None:  # local: never waits
        """The next offset to consume of ``tp``, if known: librdkafka's once a record was consumed; before
        that, the committed offset read at assignment, or the low watermark of the last fetch when the
        group has none (consumption starts at the earliest record)."""
        from confluent_kafka import TopicPartition as CKPartition

        ck = CKPartition(tp.topic, tp.partition)
        (p,) = self._consumer.position([ck])
        if p.offset >= 0:
            return p.offset
        if tp not in self._start:
            return None  # the committed offsets could not be read
        start = self._start[tp]
        if start is None:
            try:
                low, _high = self._consumer.get_watermark_offsets(ck, cached=True)
            except Exception:  # noqa: BLE001 - not fetched yet: unknown
                return None
            start = low if low >= 0 else None
        return start

    def highwater(self, tp: TopicPartition) -> int | None:
        from confluent_kafka import TopicPartition as CKPartition

        try:
            _low, high = self._consumer.get_watermark_offsets(CKPartition(tp.topic, tp.partition), cached=True)
        except Exception:  # noqa: BLE001 - not fetched yet: unknown
            return None
        return high if high >= 0 else None

    # --- commits -----------------------------------------------------------------------------------------
    def commit(self, offsets: Offsets) -> None:
        """Commit ``offsets`` and wait for the broker's answer."""
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=self._ck_offsets(offsets), asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - raised as a kafka-python error
            _raise_as_kafka_error(exc, "committing offsets")

    def commit_async(self, offsets: Offsets, callback: Callable[[Offsets, Any], None] | None = None
                     ) -> _CommitInFlight:
        """Send a commit of ``offsets``; ``callback(offsets, None | exception)`` runs in a later ``poll``."""
        pending = _CommitInFlight(offsets, callback)
        try:
            self._consumer.commit(offsets=self._ck_offsets(offsets), asynchronous=True)
        except Exception as exc:  # noqa: BLE001 - raised as a kafka-python error
            _raise_as_kafka_error(exc, "committing offsets")
        self._commits.append(pending)
        return pending

    @staticmethod
    def _ck_offsets(offsets: Offsets) -> list[Any]:
        from confluent_kafka import TopicPartition as CKPartition

        return [CKPartition(tp.topic, tp.partition, meta.offset) for tp, meta in offsets.items()]

    def _on_commit(self, err: Any, partitions: Iterable[Any]) -> None:
        """librdkafka's answer to a commit (synchronous ones too: those match no request and are ignored)."""
        answered = {(p.topic, p.partition): p.offset for p in partitions or ()}
        match = next((i for i, pending in enumerate(self._commits)
                      if {(tp.topic, tp.partition): m.offset for tp, m in pending.offsets.items()} == answered), None)
        if match is None and err is not None and not answered and self._commits:
            match = 0  # a failure that names no partition: the oldest request (never left waiting forever)
        if match is None:
            return
        pending = self._commits.pop(match)
        pending.is_done = True
        if pending.callback is not None:
            outcome: Any = None
            if err is not None:
                try:
                    _raise_as_kafka_error(Exception(err), "committing offsets")
                except KafkaError as exc:
                    outcome = exc
            pending.callback(pending.offsets, outcome)

    def _on_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError as CKError

        if err.fatal():
            self._fatal = err.str()
        if err.code() == CKError._ALL_BROKERS_DOWN:
            self._all_brokers_down = err.str()
        log.warning("Kafka client error: %s", err.str())

    def unreachable(self, timeout: float = 1.0) -> str | None:
        """Why the brokers cannot be reached, or None. librdkafka reports "all brokers down" only through its
        error callback (during :meth:`poll`) and keeps retrying by itself, so a poll during an outage just
        returns nothing; once such a report came, this asks the cluster for its metadata (one round trip of
        at most ``timeout`` seconds) and clears the report when it answers. Records arriving clear it too."""
        if self._all_brokers_down is None:
            return None
        try:
            self._consumer.list_topics(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a KafkaException: still unreachable
            return f"{self._all_brokers_down} ({exc})"
        self._all_brokers_down = None
        return None

    # --- end ---------------------------------------------------------------------------------------------
    def close(self, autocommit: bool = False) -> None:
        """Leave the group (the revoke path runs once more; nothing is committed automatically)."""
        if autocommit:
            raise ValueError("ConfluentConsumer.close: ingest commits explicitly (autocommit=False only)")
        self._consumer.close()
