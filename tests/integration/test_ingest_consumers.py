"""Both ingest consumer backends read the same records the same way, against the real broker.

The loop hands the decoder a record's offset, timestamp and value (:func:`~stream_dp.ingest.consumers.columns`)
and a dead letter's topic, partition, offset, key and value (``fields``): confluent-kafka's messages must
give exactly what kafka-python's records give, null keys and values and record timestamps included
(confluent reports a timestamp as ``(type, ms)``).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from prometheus_client import CollectorRegistry

from stream_dp.config import ConfigError, config_from_mapping
from stream_dp.connections import kafka_producer
from stream_dp.topics import admin_client
from stream_dp.ingest.caught_up import CaughtUpCheck, LeaderEndOffsets
from stream_dp.ingest.commits import OffsetCommits, RebalanceListener
from stream_dp.ingest.dead_letters import DeadLetterWriter
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.consumers import (ConfluentConsumer, KafkaPythonRecords, confluent_settings, ingest_consumer,
                                        records_of)

from topic_helpers import CheckedProducer
from event_times import T0
from ingest_helpers import create_topic, wait_for

pytestmark = pytest.mark.integration

RECORDS = [  # (key, value, timestamp ms or None: the producer's clock)
    (b"user-1", b'{"user": "user-1", "key": "a", "ts": %d.5}' % T0, T0 * 1000 + 500),
    (None, b'{"user": "user-2", "key": "b"}', T0 * 1000 + 1000),
    (b"user-3", None, T0 * 1000 + 2000),  # a tombstone: a null value
    (b"user-4", b"\xff\xfe not json", 0),
    (b"user-5", b"{}", None),
]


def _produce(bootstrap: str, topic: str) -> None:
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all")
    for key, value, ts in RECORDS:
        producer.send(topic, key=key, value=value, partition=0, timestamp_ms=ts)
    producer.send(topic, key=b"other", value=b"{}", partition=1, timestamp_ms=T0 * 1000 + 3000)
    producer.flush()
    producer.close()


def _read_all(poll, n: int) -> dict:
    got: dict = {}

    def more() -> bool:
        for tp, recs in poll().items():
            got.setdefault(tp, []).extend(recs)
        return sum(len(v) for v in got.values()) >= n

    wait_for(more, timeout=60, interval=0.01, what=f"{n} records")
    return got


def test_confluent_and_kafka_python_records_map_identically(bootstrap_servers, topic_name):
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 2)
    _produce(bootstrap_servers, topic)
    n = len(RECORDS) + 1
    kp = KafkaConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest", enable_auto_commit=False)
    kp.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])  # the reference side: no group join
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    ck = ConfluentConsumer(confluent_settings(cfg, group_id=topic_name("ck")), max_poll_records=100)
    ck.subscribe([topic])
    try:
        by_kp = _read_all(lambda: kp.poll(timeout_ms=200), n)
        by_ck = _read_all(lambda: ck.poll(timeout_ms=200), n)
        assert set(by_ck) == set(by_kp) and len(by_ck) == 2  # kafka-python TopicPartition keys on both
        kp_read, ck_read = KafkaPythonRecords(), records_of(ck)
        assert ck_read is ck
        for tp in by_kp:
            assert ck_read.columns(by_ck[tp]) == kp_read.columns(by_kp[tp])
            assert [ck_read.fields(m) for m in by_ck[tp]] == [kp_read.fields(r) for r in by_kp[tp]]
        p0 = next(tp for tp in by_ck if tp.partition == 0)
        offsets, stamps, values = ck_read.columns(by_ck[p0])
        assert offsets == [0, 1, 2, 3, 4]
        assert values == [v for _k, v, _t in RECORDS]
        assert stamps[:4] == [t for _k, _v, t in RECORDS][:4]
        assert isinstance(stamps[4], int) and stamps[4] > 0  # stamped by the producer's clock
        assert ck.highwater(p0) == 5 and ck.position(p0) == 5
        assert ck.partitions_for_topic(topic) == {0, 1}
    finally:
        kp.close()
        ck.close()


def test_confluent_message_errors_are_skipped_not_raised(bootstrap_servers, topic_name):
    """librdkafka reports some conditions as messages that carry an error (here: the subscribed topic does
    not exist): poll logs and drops them and returns the records around them (none here)."""
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    ck = ConfluentConsumer(confluent_settings(cfg, group_id=topic_name("ck")), max_poll_records=100)
    ck.subscribe([topic_name("missing")])
    errors: list = []
    original = ck._message_error
    ck._message_error = lambda m: (errors.append(m.error()), original(m))  # type: ignore[method-assign]
    try:
        def reported() -> bool:
            assert ck.poll(timeout_ms=200) == {}
            return bool(errors)

        wait_for(reported, timeout=30, interval=0.01, what="a message carrying an error")
    finally:
        ck.close()


def test_confluent_poll_returns_what_is_fetched_without_waiting_to_fill_a_batch(bootstrap_servers, topic_name):
    """A poll waits for the first record only: librdkafka's ``consume(n, timeout)`` alone waits until it has
    n messages, so 3 records polled with max_poll_records = 1000 came back only when the timeout ran out --
    every batch of a slow stream, and the last of every burst, late by ingest.poll_timeout_ms."""
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    ck = ConfluentConsumer(confluent_settings(cfg, group_id=topic_name("ck")), max_poll_records=1000)
    ck.subscribe([topic])
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks="all")
    try:
        producer.send(topic, value=b"{}", partition=0)
        producer.flush()
        _read_all(lambda: ck.poll(timeout_ms=200), 1)  # joined, assigned, caught up
        for _ in range(3):
            producer.send(topic, value=b"{}", partition=0)
        producer.flush()
        timeout_s = 20.0
        started = time.monotonic()
        got: list = []
        while len(got) < 3 and time.monotonic() - started < timeout_s:
            for recs in ck.poll(timeout_ms=int(timeout_s * 1000)).values():
                got.extend(recs)
        took = time.monotonic() - started
        assert [ck.columns(got)[0]] == [[1, 2, 3]]
        assert took < timeout_s / 2, f"3 fetched records took {took:.1f} s: the poll waited to fill its batch"
    finally:
        producer.close()
        ck.close()


RECORD_BYTES = 1024  # the backlog's record size (value bytes, about)


def _fetched_ahead_while_lagging(bootstrap: str, topic: str, group: str, prefetch_max_kbytes: int) -> int:
    """The most records librdkafka had fetched beyond what the consumer had polled (its statistics'
    ``next_offset - app_offset``) while the consumer polled one record per 50 ms, far slower than it fetches."""
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap}}, environ={}).kafka
    most = [0]
    seen = [0]

    def stats(raw: str) -> None:
        part = json.loads(raw).get("topics", {}).get(topic, {}).get("partitions", {}).get("0")
        if part and part.get("app_offset", -1) >= 0:
            most[0] = max(most[0], part["next_offset"] - part["app_offset"])
            seen[0] += 1

    settings = {**confluent_settings(cfg, group_id=group, prefetch_max_kbytes=prefetch_max_kbytes),
                "statistics.interval.ms": 50, "stats_cb": stats}
    ck = ConfluentConsumer(settings, max_poll_records=1)
    ck.subscribe([topic])
    try:
        def lagged() -> bool:
            ck.poll(timeout_ms=20)
            return seen[0] >= 30  # ~1.5 s of statistics after the first record

        # one record per 50 ms: far slower than librdkafka fetches (the loop lags)
        wait_for(lagged, timeout=60, interval=0.05, what="statistics of a lagging consumer")
    finally:
        ck.close()
    return most[0]


@pytest.mark.slow
def test_confluent_prefetch_is_bounded_by_the_setting(bootstrap_servers, topic_name):
    """A loop that lags: librdkafka fetches ahead about ``ingest.prefetch_max_kbytes`` (+ one fetch
    response, ~1 MiB), where its own default (64 MiB) queues the whole 8 MiB backlog."""
    topic = topic_name("backlog")
    create_topic(bootstrap_servers, topic, 1)
    backlog = 8192
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks=1, linger_ms=20, batch_size=256 * 1024)
    for i in range(backlog):
        producer.send(topic, value=b'{"user": "u%05d", "key": "k", "pad": "%s"}' % (i, b"x" * (RECORD_BYTES - 40)))
    producer.flush()
    producer.close()
    bounded = _fetched_ahead_while_lagging(bootstrap_servers, topic, topic_name("small"), 256)
    assert 0 < bounded * RECORD_BYTES <= (256 + 1024 + 256) * 1024  # the bound, one fetch, one record batch
    unbounded = _fetched_ahead_while_lagging(bootstrap_servers, topic, topic_name("large"), 65536)
    assert unbounded > backlog * 0.9  # the contrast: the default would queue all of it


@pytest.mark.slow
def test_a_full_bounded_prefetch_queue_does_not_starve_the_loop(bootstrap_servers, topic_name):
    """With the queue at its bound, librdkafka fetches again 10 ms after the loop makes room: a loop reading
    one record per poll always finds the next one queued (librdkafka's default 1 s back-off leaves ~5 empty
    200 ms polls per refill, ~40 over this backlog)."""
    topic, n = topic_name("refill"), 30_000
    create_topic(bootstrap_servers, topic, 1)
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks=1, linger_ms=5, batch_size=256 * 1024)
    for _ in range(n):
        producer.send(topic, value=b"x" * 500, partition=0)
    producer.flush()
    producer.close()
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    consumer = ConfluentConsumer(confluent_settings(cfg, group_id=topic_name("g"), prefetch_max_kbytes=1024),
                                 max_poll_records=1)
    consumer.subscribe([topic])
    got = starved = 0

    def all_read() -> bool:  # once records flow, a poll that waits 200 ms for nothing: the loop starved
        nonlocal got, starved
        read = sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        starved += bool(got and not read)
        got += read
        return got >= n

    try:
        wait_for(all_read, timeout=120, interval=0, what=f"{n} records one per poll")
        assert starved <= 10, f"{starved} polls found the queue empty while the broker had records"
    finally:
        consumer.close()


def test_the_client_setting_is_checked_and_named(bootstrap_servers):
    with pytest.raises(ConfigError, match="ingest.kafka_client"):
        config_from_mapping({"ingest": {"kafka_client": "librdkafka"}}, environ={})
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    with pytest.raises(ValueError, match="ingest.kafka_client"):
        ingest_consumer(cfg, "librdkafka")
    settings = confluent_settings(cfg, group_id="g")
    assert settings["enable.auto.commit"] is False and settings["enable.auto.offset.store"] is False
    assert settings["group.id"] == "g" and settings["auto.offset.reset"] == "earliest"
    assert settings["queued.max.messages.kbytes"] == 2048  # ingest.prefetch_max_kbytes' default
    assert confluent_settings(cfg, group_id="g", prefetch_max_kbytes=512)["queued.max.messages.kbytes"] == 512
    with pytest.raises(ConfigError, match="ingest.prefetch_max_kbytes"):
        config_from_mapping({"ingest": {"prefetch_max_kbytes": 0}}, environ={})


def test_kafka_python_reports_no_outage_while_connected_nor_without_metrics(bootstrap_servers, topic_name):
    """The outage report of the kafka-python backend (the broker stopped: test_ingest_crash) stays None
    while the client holds a connection, and when it keeps no metrics to tell from."""
    from stream_dp.ingest.consumers import KafkaPythonConsumer

    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    consumer = ingest_consumer(cfg, "kafka-python")
    blind = KafkaPythonConsumer(topic, bootstrap_servers=bootstrap_servers, metrics_enabled=False)
    try:
        assert isinstance(consumer, KafkaPythonConsumer)
        consumer.subscribe([topic])
        consumer.poll(timeout_ms=500)  # connects: bootstrap, then the group coordinator
        assert consumer.unreachable() is None
        blind.poll(timeout_ms=100)
        assert blind.unreachable() is None
    finally:
        consumer.close()
        blind.close()


class _Loop:
    """The loop side of a handover (:class:`~stream_dp.ingest.commits.Handover`): ``applied`` offsets are
    applied in Redis and not committed yet; records what the listener told it."""

    def __init__(self, commits: OffsetCommits, applied: dict[TopicPartition, int]) -> None:
        self.commits = commits
        self.applied = applied
        self.events: list[tuple[str, set[TopicPartition]]] = []

    def prepare_handover(self, revoked: set[TopicPartition]):  # Offsets
        self.events.append(("prepare", revoked))
        self.commits.applied({tp: off - 1 for tp, off in self.applied.items() if tp in revoked})
        return self.commits.pending_offsets()

    def hand_over(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("hand_over", revoked))
        self.commits.hand_over(revoked)

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))


def test_confluent_revoke_commits_what_was_applied_before_the_partitions_go(bootstrap_servers, topic_name):
    """librdkafka runs the revoke inside ``consume()``: the offsets the loop applied but had not committed
    are committed (synchronously) before the partitions go — here on a second member joining the group."""
    topic, group = topic_name("events"), topic_name("group")
    create_topic(bootstrap_servers, topic, 2)
    _produce(bootstrap_servers, topic)
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    registry = CollectorRegistry()
    producer = kafka_producer(cfg)
    first = ConfluentConsumer(confluent_settings(cfg, group_id=group), max_poll_records=100)
    commits = OffsetCommits(first, topic, IngestMetrics(registry),
                            DeadLetterWriter(producer, f"{topic}-dlq", IngestMetrics(CollectorRegistry()),
                                             max_request_bytes=1 << 20, timeout_seconds=10),
                            caught_up=CaughtUpCheck(LeaderEndOffsets(admin_client(cfg)), valid_for=5.0))
    applied = {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 1}  # next offsets to apply
    loop = _Loop(commits, applied)
    first.subscribe([topic], listener=RebalanceListener(loop))
    second = ConfluentConsumer(confluent_settings(cfg, group_id=group), max_poll_records=100)
    try:
        wait_for(lambda: first.poll(timeout_ms=100) is not None and len(first.assignment()) == 2, timeout=60,
                 what="the first member owning both partitions")
        second.subscribe([topic])
        # both members poll (the group waits for each to rejoin) until the first has handed a partition over
        wait_for(lambda: (first.poll(timeout_ms=50), second.poll(timeout_ms=50)) and len(first.assignment()) == 1,
                 timeout=60, what="a rebalance moving one partition to the second member")
        revoked = next(tps for what, tps in loop.events if what == "hand_over")
        reader = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False)
        committed = {tp: reader.committed(tp) for tp in revoked}
        reader.close()
        assert committed == {tp: applied[tp] for tp in revoked}, "the revoke path must commit what was applied"
        assert [what for what, _ in loop.events][:3] == ["assigned", "prepare", "hand_over"]
        assert registry.get_sample_value("stream_dp_ingest_commits_failed_total") == 0
    finally:
        first.close()
        second.close()
        producer.close()


def test_the_leaders_end_offset_is_asked_on_its_own_connection_without_waiting(bootstrap_servers, topic_name,
                                                                              broker_kind):
    """The caught-up check's question (stream_dp/ingest/caught_up.py): the end offset as the partition's leader
    answers it -- records no consumer fetched included -- as futures, and an error (not a hang) for a
    partition no leader answers for."""
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 2)
    _produce(bootstrap_servers, topic)
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    asker = LeaderEndOffsets(admin_client(cfg))
    tp, missing = TopicPartition(topic, 1), TopicPartition(topic, 7)

    def answers(partitions: list[TopicPartition]) -> dict:
        futures = asker.ask(partitions, 5.0)
        wait_for(lambda: all(f.done() for f in futures.values()), timeout=30, what="the leaders' answers")
        return {p.partition: f.exception() or f.result() for p, f in futures.items()}

    assert answers([tp]) == {1: 1}
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks="all")
    for _ in range(3):
        producer.send(topic, key=b"later", value=b"{}", partition=1, timestamp_ms=T0 * 1000 + 4000)
    producer.close()
    end = answers([tp])[1]
    # Tansu counts the 3-record batch as one offset -- the check then stays as permissive as the fetched
    # mark, never stricter (it never lowers a cached lag)
    assert end == 4 if broker_kind == "kafka" else 1 < end <= 4
    got = answers([tp, missing])
    assert got[1] == end and isinstance(got[7], Exception)


class _Membership:
    """A revoke listener that only records the rebalance (nothing applied, nothing committed)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def revoke(self, revoked: set[TopicPartition], commit) -> None:
        self.events.append("revoked")

    def assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append("assigned")

    def rebalanced(self) -> bool:
        return "revoked" in self.events and "assigned" in self.events[self.events.index("revoked"):]


class _RebalanceInSecondConsume:
    """librdkafka's consumer with the real one behind it, whose second ``consume()`` of a poll (the one that takes
    the rest of a batch without waiting) has a rebalance -- a revoke and the assignment after it -- run inside it:
    it starts another member joining, then keeps consuming until the rebalance has run, returning what came."""

    def __init__(self, real, membership: _Membership, join) -> None:
        self.real, self.membership, self.join = real, membership, join
        self.first: list = []  # what the first consume() of the poll returned

    def consume(self, num_messages: int, timeout: float) -> list:
        if num_messages == 1:
            got = self.real.consume(num_messages=1, timeout=timeout)
            self.first = list(got)  # a copy: the poll extends the list it is given
            return got
        self.join()
        got: list = []
        wait_for(lambda: got.extend(self.real.consume(num_messages=num_messages, timeout=0.1))
                 or self.membership.rebalanced(), timeout=60, interval=0, what="the rebalance inside the consume")
        return got

    def __getattr__(self, name: str):
        return getattr(self.real, name)


def test_a_rebalance_inside_a_poll_drops_what_was_fetched_before_it(bootstrap_servers, topic_name):
    """confluent's poll is two ``consume()`` calls; a rebalance inside the second takes the partition of the
    record the first returned. That record is read again from the committed offset -- by its new owner, or by this
    consumer when assigned it again -- so the poll must not return it: CI once saw the ingest worker joining
    mid-stream skip one event "already applied" (the old owner had applied it after the revoke; its commit was
    dropped, the partition no longer owned). Here each partition's records after the rebalance are read exactly
    once, in order, and only by their owner."""
    topic, group = topic_name("events"), topic_name("group")
    create_topic(bootstrap_servers, topic, 2)
    sizes = {0: 20, 1: 20}
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks="all")

    def produce(partition: int, n: int) -> None:
        for i in range(n):
            producer.send(topic, key=b"k", value=b'{"i": %d}' % i, partition=partition)
        producer.flush()

    for p, n in sizes.items():
        produce(p, n)
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    first = ConfluentConsumer(confluent_settings(cfg, group_id=group), max_poll_records=100)
    second = ConfluentConsumer(confluent_settings(cfg, group_id=group), max_poll_records=100)
    membership = _Membership()
    stop = threading.Event()

    def second_member() -> None:  # polls until the test ends: the group's rebalance waits for each member to rejoin
        while not stop.is_set():
            second.poll(timeout_ms=50)

    joined = threading.Thread(target=second_member)
    try:
        first.subscribe([topic], listener=membership)
        _read_all(lambda: first.poll(timeout_ms=100), sum(sizes.values()))  # alone: both partitions, all read
        produce(0, 1)  # one more record: the first consume() of the next poll returns it
        sizes[0] += 1
        real = first._consumer
        proxy = _RebalanceInSecondConsume(real, membership, join=lambda: (second.subscribe([topic]), joined.start()))
        first._consumer = proxy
        after = first.poll(timeout_ms=10_000)
        first._consumer = real
        # the premise: the first consume() returned the new record, and the rebalance ran in the second
        assert [(m.partition(), m.offset()) for m in proxy.first] == [(0, sizes[0] - 1)]
        assert membership.rebalanced()
        owned = {tp.partition for tp in first.assignment()}
        assert len(owned) == 1, owned
        seen = {tp.partition: [r.offset() for r in recs] for tp, recs in after.items()}
        assert set(seen) <= owned, f"records of a partition the rebalance took away: {seen}"

        def read_owned() -> bool:
            for tp, recs in first.poll(timeout_ms=100).items():
                seen.setdefault(tp.partition, []).extend(r.offset() for r in recs)
            return all(len(seen.get(p, [])) >= sizes[p] for p in owned)

        wait_for(read_owned, timeout=60, interval=0, what="the owned partition read from its committed offset")
        # nothing was committed: the owner reads its partition from the start, each record once
        assert {p: seen[p] for p in owned} == {p: list(range(sizes[p])) for p in owned}
        assert set(seen) == owned
    finally:
        stop.set()
        if joined.is_alive():
            joined.join(10)
        first.close()
        second.close()
        producer.close()
