"""The ingest loop in-process against the real broker and Redis: exact counts, dead letters, lateness."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaConsumer

from stream_dp.config import config_from_mapping
from stream_dp.ingest.consumers import KAFKA_CLIENTS

from topic_helpers import CheckedProducer
from event_times import T0
from ingest_helpers import (Running, committed_total, config_mapping, create_topic, ground_truth, make_events, produce, redis_counts,
                            wait_for, window_store)

pytestmark = pytest.mark.integration

#: every test here runs on both consumer backends (``ingest.kafka_client``)
both_clients = pytest.mark.parametrize("client", KAFKA_CLIENTS)

SIZE = 600
MAX_KEYS = 3


@both_clients
@pytest.mark.parametrize("unit", ["user", "event"])
def test_random_events_over_several_windows_match_ground_truth(bootstrap_servers, redis_client, redis_url,
                                                               topic_name, unit, client):
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 4)
    events = make_events(11, 20_000, users=1500, keys=200, windows=5, size=SIZE)
    produce(bootstrap_servers, topic, events)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS, unit=unit)
    assert len(truth) == 5
    group = topic_name("group")
    cfg = config_from_mapping(config_mapping(bootstrap_servers, redis_url, topic, group=group, size=SIZE,
                                             max_keys=MAX_KEYS, contribution={"unit": unit},
                                             ingest={"kafka_client": client}), environ={})
    store = window_store(redis_client, cfg)
    with Running(cfg) as run:
        wait_for(lambda: run.metric("events_consumed_total") >= len(events) and
                 committed_total(bootstrap_servers, group, topic, 4) == len(events), timeout=90, what="all consumed")
    assert run.error is None and run.reason == "stop requested"
    assert redis_counts(store, truth) == truth
    applied = sum(sum(c.values()) for c in truth.values())
    assert run.metric("events_applied_total") == applied
    bounded = run.metric("events_bounded_total", {"rule": "linf"}) + run.metric("events_bounded_total", {"rule": "l0"})
    assert applied + bounded == len(events)
    if unit == "user":
        assert run.metric("events_bounded_total", {"rule": "l0"}) > 0
    assert run.metric("events_late_total") == 0
    assert run.metric("consumer_lag_records") == 0
    assert run.metric("up") == 0  # after the stop


@both_clients
def test_the_last_batch_of_a_burst_is_finished_without_waiting_for_the_poll_timeout(
        bootstrap_servers, redis_client, redis_url, topic_name, client):
    """Finishing a batch (metrics, dead letters, committed offsets) happens after the next poll. That poll must
    not wait ``ingest.poll_timeout_ms`` while a batch is in flight: the last batch of every burst would be
    finished that much later (here 20 s; with a poll that waits, this test fails at the second wait, whose
    10 s leave a loaded machine -- other test workers -- ample time for the work itself)."""
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    good = [json.dumps({"user": f"u{i}", "key": "k", "ts": T0}).encode() for i in range(3)]
    produce(bootstrap_servers, topic, [*good, b"{not json"], raw=True, record_time=T0)
    group = topic_name("g")
    cfg = config_from_mapping(config_mapping(bootstrap_servers, redis_url, topic, group=group, size=SIZE,
                                             max_keys=MAX_KEYS, ingest={"kafka_client": client,
                                                                        "poll_timeout_ms": 20000}), environ={})
    with Running(cfg) as run:
        wait_for(lambda: run.metric("events_consumed_total") == 4, timeout=60, what="the burst consumed")
        wait_for(lambda: run.metric("events_applied_total") == 3 and run.metric("dead_letters_produced_total") == 1
                 and committed_total(bootstrap_servers, group, topic, 1) == 4, timeout=10,
                 what="the batch finished well within the poll timeout")
    assert run.error is None
    assert window_store(redis_client, cfg).counts(T0 // SIZE * SIZE) == {"k": 3}


@both_clients
def test_malformed_records_go_to_the_dead_letter_topic_with_reason(bootstrap_servers, redis_client, redis_url,
                                                                   topic_name, client):
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    good = {"user": "u", "key": "k", "ts": T0}
    bad = [b"\xff\xfe", b"{not json", b"[1,2]", json.dumps({"key": "k"}).encode(),
           json.dumps({"user": "u", "key": "k" * 300}).encode(), json.dumps({"user": "u", "key": "k", "ts": "x"}).encode(),
           b"[" * 100_000,
           json.dumps({"user": "liar", "key": "k", "ts": T0 + 365 * 86400}).encode()]  # a year ahead
    produce(bootstrap_servers, topic, [json.dumps(good).encode(), *bad], raw=True, record_time=T0)
    cfg = config_from_mapping(config_mapping(bootstrap_servers, redis_url, topic, group=topic_name("g"), size=SIZE,
                                             max_keys=MAX_KEYS, ingest={"kafka_client": client}), environ={})
    with Running(cfg) as run:
        wait_for(lambda: run.metric("dead_letters_produced_total") == len(bad), timeout=60, what="dead letters")
    assert run.error is None
    reasons = {"not_utf8": 1, "bad_json": 2, "not_object": 1, "missing_user": 1, "key_too_long": 1, "bad_time": 1,
               "event_time_out_of_range": 1}
    for reason, n in reasons.items():
        assert run.metric("events_rejected_total", {"reason": reason}) == n, reason
    dlq = KafkaConsumer(cfg.kafka.dead_letter_topic, bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest",
                        consumer_timeout_ms=5000)
    got = {rec.value: dict(rec.headers) for rec in dlq}
    dlq.close()
    assert set(got) == set(bad)
    assert got[b"{not json"]["reason"] == b"bad_json"
    assert got[b"\xff\xfe"]["source_offset"] == b"1"
    assert window_store(redis_client, cfg).counts(T0 // SIZE * SIZE) == {"k": 1}


@both_clients
def test_watermark_closes_windows_and_late_events_are_dropped(bootstrap_servers, redis_client, redis_url, topic_name,
                                                              client):
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 2)
    t0 = T0 // SIZE * SIZE
    cfg = config_from_mapping(config_mapping(bootstrap_servers, redis_url, topic, group=topic_name("g"), size=SIZE,
                                             max_keys=MAX_KEYS, lateness=30, idle=2.0,
                                             ingest={"kafka_client": client}), environ={})
    store = window_store(redis_client, cfg)
    early = [{"user": f"u{i}", "key": "a", "ts": t0 + i} for i in range(20)]
    later = [{"user": f"u{i}", "key": "b", "ts": t0 + 3 * SIZE + i} for i in range(20)]
    with Running(cfg) as run:
        produce(bootstrap_servers, topic, early + later)
        # both partitions busy then idle: the global reaches the max watermark, closing windows 0..2
        wait_for(lambda: (store.global_watermark() or 0) >= t0 + 3 * SIZE + 19 - 30, timeout=60, what="watermark")
        assert store.meta(t0)["state"] == "closed"
        assert run.metric("windows_open") == 1
        produce(bootstrap_servers, topic, [{"user": "late", "key": "a", "ts": t0 + 5}])
        wait_for(lambda: run.metric("events_late_total") == 1, timeout=30, what="late event counted")
    assert store.counts(t0) == {"a": 20}
    assert store.counts(t0 + 3 * SIZE) == {"b": 20}
    assert run.metric("watermark_seconds") == store.global_watermark()


def _send(bootstrap: str, topic: str, partition: int, events: list[dict]) -> None:
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all")
    for ev in events:
        producer.send(topic, key=ev["user"].encode(), value=json.dumps(ev).encode(), partition=partition,
                      timestamp_ms=int(ev["ts"] * 1000))
    producer.flush()
    producer.close()


@both_clients
def test_an_owned_partition_that_receives_nothing_does_not_hold_the_watermark_back(
        bootstrap_servers, redis_client, redis_url, topic_name, client):
    """Events on partition 0 only: partition 1, owned and quiet, must count as caught up (its position is
    known though none of its records was consumed: the earliest offset of an empty partition, then the
    committed offset after a restart), so it turns idle and the global watermark follows partition 0."""
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 2)
    t0 = T0 // SIZE * SIZE
    cfg = config_from_mapping(config_mapping(bootstrap_servers, redis_url, topic, group=topic_name("g"), size=SIZE,
                                             max_keys=MAX_KEYS, lateness=30, idle=2.0,
                                             ingest={"kafka_client": client}), environ={})
    store = window_store(redis_client, cfg)
    with Running(cfg) as run:
        _send(bootstrap_servers, topic, 0, [{"user": f"u{i}", "key": "a", "ts": t0 + i} for i in range(20)])
        # partition 1 has never had a record
        wait_for(lambda: (store.global_watermark() or 0) >= t0 + 19 - 30, timeout=60, what="watermark, empty p1")
        _send(bootstrap_servers, topic, 1, [{"user": "p1", "key": "b", "ts": t0 + SIZE}])
        _send(bootstrap_servers, topic, 0, [{"user": f"v{i}", "key": "b", "ts": t0 + SIZE + i} for i in range(20)])
        wait_for(lambda: run.metric("events_consumed_total") == 41, timeout=60, what="both partitions consumed")
    # a new worker: partition 1's committed offset is its high-water mark, and nothing new arrives on it
    with Running(cfg) as run:
        _send(bootstrap_servers, topic, 0, [{"user": f"w{i}", "key": "c", "ts": t0 + 3 * SIZE + i} for i in range(20)])
        wait_for(lambda: (store.global_watermark() or 0) >= t0 + 3 * SIZE + 19 - 30, timeout=60,
                 what="watermark after the restart, quiet p1")
        assert run.metric("events_consumed_total") == 20
    assert store.meta(t0)["state"] == "closed" and store.meta(t0 + SIZE)["state"] == "closed"
