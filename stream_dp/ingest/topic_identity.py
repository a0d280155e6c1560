"""Which events topic the applied offsets in Redis belong to: the broker's topic id, kept with them.

Ingest skips every event at or below a window's recorded offset for its partition (that is how a replayed
batch changes nothing, :mod:`stream_dp.ingest.store`). Offsets identify records only within one topic
*incarnation*: a topic deleted and created again under the same name starts again at offset 0, so its
events would be taken for already applied and skipped -- counted nowhere, dead-lettered nowhere. So the
worker records the events topic's id (Kafka's topic_id, a UUID the broker gives each topic it creates; Tansu
gives one too) next to the offsets, and refuses to go on when the id it finds differs:
:class:`TopicRecreated` names the topic and the recovery command, ``stream-dp topics adopt``
(:func:`adopt`), which forgets the old topic's applied offsets of every window still in Redis and records
the new id, so the new topic's events are counted from its first offset.

Adopting never weakens the privacy bound: each window's contribution-bounding state (the keys each user
already has) is kept, so a user's events from both topics together stay within ``contribution.*``. A
record present in both topics (a backfill replayed again) may be counted twice within that bound: an
accuracy cost the operator accepts by running the command, stated in its output.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from stream_dp.errors import StreamDPError
from stream_dp.store.keys import Keys

log = logging.getLogger(__name__)

ADOPT_COMMAND = "stream-dp topics adopt"


class TopicRecreated(RuntimeError, StreamDPError):
    """The events topic's id is not the one the applied offsets in Redis belong to (one line: the topic,
    both ids, the recovery command)."""


def identity_key(keys: Keys) -> str:
    """Hash: events topic name → the topic id its applied offsets belong to (``{ingest}`` tag)."""
    return keys.topic_ids()


def current_topic_id(admin: Any, topic: str, timeout: float = 15.0) -> str | None:
    """The broker's id of ``topic`` (confluent-kafka AdminClient), or None when it does not exist."""
    from confluent_kafka import KafkaException, TopicCollection

    try:
        desc = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
    except KafkaException as exc:
        if exc.args[0].name() in ("UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"):
            return None
        raise
    return str(desc.topic_id)


def check(client: Any, keys: Keys, topic: str, topic_id: str) -> bool:
    """Record ``topic_id`` for ``topic`` if none is recorded yet (returns True then); raise
    :class:`TopicRecreated` if another id is. Atomic (HSETNX): two workers starting together agree."""
    key = identity_key(keys)
    if client.hsetnx(key, topic, topic_id):
        log.info("events topic %s: topic id %s recorded with the applied offsets", topic, topic_id)
        return True
    recorded = client.hget(key, topic)
    recorded = recorded.decode() if isinstance(recorded, bytes) else recorded
    if recorded != topic_id:
        raise TopicRecreated(
            f"events topic {topic!r} was deleted and created again (its topic id is {topic_id}, the applied "
            f"offsets in Redis belong to {recorded}): its offsets restart at 0, so its events would be skipped as "
            f"already applied. Stop every ingest worker, then run `{ADOPT_COMMAND}` to count the new topic from "
            "its start")
    return False


def adopt(client: Any, keys: Keys, topic: str, topic_id: str) -> int:
    """Forget the applied offsets (and offsets refused as full) of every window shard ingest knows, and record
    ``topic_id`` for ``topic``; returns the number of window shards whose offsets were forgotten. The counts
    and bounding state stay. Run with every ingest worker stopped."""
    starts = [int(s) for s in client.zrange(keys.windows_index(), 0, -1)]
    forgotten = 0
    for start in starts:
        for shard in range(keys.shards):
            meta = keys.window_meta(start, shard)
            full = [f for f in client.hkeys(meta) if (f.decode() if isinstance(f, bytes) else f).startswith("full:")]
            pipe = client.pipeline(transaction=True)
            pipe.delete(keys.window_offsets(start, shard))
            if full:
                pipe.hdel(meta, *full)
            deleted = pipe.execute()[0]
            forgotten += int(bool(deleted))
    client.hset(identity_key(keys), topic, topic_id)
    log.info("events topic %s: adopted topic id %s; forgot the applied offsets of %d window shard(s)",
             topic, topic_id, forgotten)
    return forgotten


#: How often a running ingest worker asks the broker for the events topic's id at least (one admin call).
CHECK_INTERVAL_SECONDS = 5.0
#: How long one check may wait for the broker (it runs on the ingest loop's thread).
GUARD_TIMEOUT_SECONDS = 2.0


class TopicWatch:
    """The ingest loop's view of the events topic's identity. ``guard`` (None: not watched) raises
    :class:`TopicRecreated` when the topic is not the one the applied offsets belong to. It runs at each
    partition assignment, whenever a partition is polled at or below the highest offset polled so far (a
    rewind after a failure, or a new topic under the same name), and every :data:`CHECK_INTERVAL_SECONDS`
    (:meth:`tick`): a client need not rebalance when a topic is deleted and created again -- it may keep
    its partitions and fetch the new topic from its old position on, past the new topic's first records, or
    stall. Between a recreation and the next check, events of the new topic beyond the old position may be
    applied; ``stream-dp topics adopt`` reads the new topic from its start, so those are applied again --
    which changes nothing with ``contribution.unit = "user"`` (a user counts once per key and window) and may
    count an event twice otherwise, within the contribution bounds. A client may swallow an error raised in a rebalance callback, so the error is kept
    and raised by :meth:`raise_if_recreated`, which the loop calls after each poll."""

    def __init__(self, guard: Callable[[], object] | None, clock: Callable[[], float] = time.monotonic,
                 interval: float = CHECK_INTERVAL_SECONDS) -> None:
        self.guard = guard
        self.clock, self.interval = clock, interval
        self.recreated: TopicRecreated | None = None
        self._highest: dict[int, int] = {}  # partition -> highest offset polled
        self._checked = clock()

    def assigned(self) -> None:
        self._verify()

    def tick(self) -> None:
        """Check when the last check is :attr:`interval` old (the loop calls this every step)."""
        if self.guard is not None and self.clock() - self._checked >= self.interval:
            self._verify()

    def polled(self, first: dict[Any, int], last: dict[Any, int]) -> None:
        """A poll's first and last offset per TopicPartition; raises when the topic was recreated."""
        back = any(offset <= self._highest.get(tp.partition, -1) for tp, offset in first.items())
        for tp, offset in last.items():
            self._highest[tp.partition] = max(offset, self._highest.get(tp.partition, -1))
        if back:
            self._verify()
            self.raise_if_recreated()

    def raise_if_recreated(self) -> None:
        if self.recreated is not None:
            raise self.recreated

    def _verify(self) -> None:
        if self.guard is None or self.recreated is not None:
            return
        self._checked = self.clock()
        try:
            self.guard()
        except TopicRecreated as exc:
            self.recreated = exc


def topic_guard(cfg: Any) -> Callable[[], None]:
    """The production guard for :class:`TopicWatch`: describes ``cfg.kafka.events_topic`` (confluent admin
    client) and checks its id against Redis's (:func:`check`). A topic missing right now (being deleted) passes:
    the next assignment of its new incarnation is checked."""
    from stream_dp import topics
    from stream_dp.connections import redis_client

    import redis
    from confluent_kafka import KafkaException

    # metadata refreshed every few seconds: after a broker dies the client finds another to ask
    admin = topics.admin_client(cfg.kafka, **{"topic.metadata.refresh.interval.ms": 5000})
    client = redis_client(cfg.redis)
    keys = Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout)
    topic = cfg.kafka.events_topic
    unchecked = [0]  # checks in a row that could not be made

    def guard() -> None:
        try:
            topic_id = current_topic_id(admin, topic, timeout=GUARD_TIMEOUT_SECONDS)
            if topic_id is not None:
                check(client, keys, topic, topic_id)
        except (KafkaException, redis.ConnectionError, redis.TimeoutError) as exc:
            # an outage is the loop's to handle (it backs off and retries); the identity is checked again
            # at the next assignment or tick, and no offset of an unchecked topic is skipped meanwhile any
            # more than the loop's own retries would
            unchecked[0] += 1
            if unchecked[0] == 1:
                log.warning("events topic %s: topic id not checked (%s: %s); checking again every %g s",
                            topic, type(exc).__name__, exc, CHECK_INTERVAL_SECONDS)
            return
        if unchecked[0]:
            log.info("events topic %s: topic id checked again after %d failed attempt(s)", topic, unchecked[0])
            unchecked[0] = 0

    return guard


def rewind_group(admin: Any, group: str, topic: str, timeout: float = 15.0) -> int:
    """Set ``group``'s committed offset of every partition of ``topic`` to the partition's earliest offset, so
    the next ingest worker reads the (new) topic from its start whatever the broker kept of the old topic's
    commits; returns the number of partitions. Fails while the group has members (stop the workers first)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    meta = admin.list_topics(topic, timeout=timeout).topics[topic]
    parts = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in parts}, request_timeout=timeout)
    offsets = [TopicPartition(topic, tp.partition, fut.result().offset) for tp, fut in earliest.items()]
    for fut in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)],
                                                  request_timeout=timeout).values():
        fut.result()
    return len(offsets)
