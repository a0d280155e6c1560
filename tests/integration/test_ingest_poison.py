"""Poison records against the real broker and Redis: a record whose dead letter cannot be written as is
(too large for the producer, or refused for good) is dead-lettered once in bounded form, counted, and
ingest moves on — no retry loop, no duplicate dead letters."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from kafka import KafkaConsumer
from prometheus_client import CollectorRegistry

from stream_dp.config import config_from_mapping
from stream_dp.connections import kafka_producer
from stream_dp.ingest.consumers import KAFKA_CLIENTS
from stream_dp.ingest.dead_letters import PREFIX_BYTES, DeadLetterWriter, Rejected
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys

from topic_helpers import CheckedProducer, contract_topics
from ingest_helpers import Running, config_mapping, create_topic, wait_for

pytestmark = pytest.mark.integration

SIZE = 600
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
NEAR_MIB = 1_048_450  # under Kafka's default message.max.bytes (1048588): the broker admits it
FIVE_MB = 5_000_000  # over events.max_record_bytes: dead-lettered as record_too_large before any parsing


def _produce_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=8 * 1024 * 1024)
    for v in values:
        # stamped like the trusted collector would: the record time of the good events' window
        producer.send(topic, key=b"poison", value=v, timestamp_ms=(T0 + 1) * 1000).get(timeout=30)
    producer.close()


def _dead_letters(bootstrap: str, topic: str) -> list:
    dlq = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=4000,
                        max_partition_fetch_bytes=8 * 1024 * 1024)
    try:
        return list(dlq)
    finally:
        dlq.close()


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_near_mib_and_5mb_records_are_dead_lettered_once_in_bounded_form(bootstrap_servers, redis_client,
                                                                         redis_url, topic_name, client):
    topic = topic_name("events")
    # a deployment whose events topic admits larger records than ingest takes (events.max_record_bytes):
    # Apache Kafka refuses a 5 MB record on a topic of its default max.message.bytes (Tansu has no limit)
    contract_topics(bootstrap_servers, events=topic, dead_letter=f"{topic}-dlq",
                    events_configs={"max.message.bytes": str(8 * 1024 * 1024)})
    near = b"{" + b"x" * (NEAR_MIB - 1)  # not JSON: bad_json, and its dead letter exceeds 1 MiB with headers
    huge = b"{" + b"y" * (FIVE_MB - 1)
    small_bad = b"{not json"
    good = [json.dumps({"user": f"u{i}", "key": "k", "ts": T0 + i}).encode() for i in range(3)]
    _produce_raw(bootstrap_servers, topic, [good[0], near, small_bad, huge, good[1], good[2]])
    cfg = config_from_mapping(config_mapping(bootstrap_servers, redis_url, topic, group=topic_name("g"), size=SIZE,
                                             max_keys=3, ingest={"kafka_client": client}), environ={})
    store = WindowStore(redis_client, keys=Keys(cfg.redis.key_prefix), window_size=SIZE, unit="user",
                        max_keys_per_user=3)
    with Running(cfg) as run:
        wait_for(lambda: store.counts(T0 // SIZE * SIZE).get("k") == 3, timeout=60, what="the good events counted")
        wait_for(lambda: run.metric("dead_letters_produced_total") == 3, timeout=30, what="three dead letters")
        produced = run.metric("dead_letters_produced_total")
        bounded = run.metric("dead_letters_bounded_total")
        lost = run.metric("dead_letters_lost_total")
        kafka_errors = run.metric("dependency_errors_total", {"dependency": "kafka"})
        too_large = run.metric("events_rejected_total", {"reason": "record_too_large"})
        bad_json = run.metric("events_rejected_total", {"reason": "bad_json"})
    assert run.error is None
    letters = _dead_letters(bootstrap_servers, cfg.kafka.dead_letter_topic)
    print(f"\npoison: dead letters produced={produced:.0f} bounded={bounded:.0f} lost={lost:.0f} "
          f"in topic={len(letters)} kafka errors (retries)={kafka_errors:.0f} record_too_large={too_large:.0f} "
          f"bad_json={bad_json:.0f}")
    assert (produced, bounded, lost, kafka_errors) == (3, 2, 0, 0)
    assert (too_large, bad_json) == (1, 2)
    assert len(letters) == 3, "each rejected record is dead-lettered exactly once"
    by_offset = {int(dict(r.headers)["source_offset"]): r for r in letters}
    assert sorted(by_offset) == [1, 2, 3]
    assert by_offset[2].value == small_bad and dict(by_offset[2].headers)["dead_letter_form"] == b"full"
    for offset, original, reason in ((1, near, "bad_json"), (3, huge, "record_too_large")):
        rec = by_offset[offset]
        headers = dict(rec.headers)
        assert headers["dead_letter_form"] == b"bounded" and headers["reason"] == reason.encode()
        assert headers["dead_letter_id"] == f"{topic}/0/{offset}".encode()
        body = json.loads(rec.value)
        assert body["size"] == len(original) and body["sha256"] == hashlib.sha256(original).hexdigest()
        assert base64.b64decode(body["prefix_base64"]) == original[:PREFIX_BYTES]
        assert body["source_offset"] == offset and body["reason"] == reason
        assert len(rec.value) < 4096


def _writer(bootstrap: str, topic: str, *, producer_max: int, judged_max: int) -> tuple[DeadLetterWriter, CollectorRegistry]:
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap}}, environ={})
    producer = kafka_producer(cfg.kafka, max_request_size=producer_max, max_block_ms=10_000)
    reg = CollectorRegistry()
    return DeadLetterWriter(producer, topic, IngestMetrics(reg), max_request_bytes=judged_max,
                            timeout_seconds=10), reg


def test_a_dead_letter_refused_for_good_falls_back_to_bounded_form_once(bootstrap_servers, topic_name):
    """The full form passes the size estimate but the producer refuses it (MessageSizeTooLargeError, not
    retriable): written in bounded form, not retried; writing the same records again writes nothing."""
    dlq = topic_name("dlq")
    create_topic(bootstrap_servers, dlq, 1)
    writer, reg = _writer(bootstrap_servers, dlq, producer_max=20_000, judged_max=1_000_000)
    recs = [Rejected("events", 0, 10, b"k", b"z" * 50_000, "bad_json"), Rejected("events", 0, 11, b"k", b"{", "bad_json")]
    writer.write(recs)
    writer.write(recs)  # a retried batch: already written, nothing is sent again
    writer.producer.close()
    letters = _dead_letters(bootstrap_servers, dlq)
    forms = {int(dict(r.headers)["source_offset"]): dict(r.headers)["dead_letter_form"] for r in letters}
    assert len(letters) == 2 and forms == {10: b"bounded", 11: b"full"}
    assert reg.get_sample_value("stream_dp_ingest_dead_letters_bounded_total") == 1
    assert reg.get_sample_value("stream_dp_ingest_dead_letters_produced_total") == 2


def test_a_dead_letter_refused_even_bounded_is_counted_lost_and_skipped(bootstrap_servers, topic_name):
    dlq = topic_name("dlq")
    create_topic(bootstrap_servers, dlq, 1)
    writer, reg = _writer(bootstrap_servers, dlq, producer_max=600, judged_max=1_000_000)
    writer.write([Rejected("events", 0, 5, b"k", b"w" * 5000, "bad_json")])  # does not raise: moves on
    writer.write([Rejected("events", 0, 5, b"k", b"w" * 5000, "bad_json")])
    writer.producer.close()
    assert reg.get_sample_value("stream_dp_ingest_dead_letters_lost_total") == 1
    assert reg.get_sample_value("stream_dp_ingest_dead_letters_produced_total") == 0
    assert _dead_letters(bootstrap_servers, dlq) == []


def test_a_full_window_shard_dead_letters_the_rest_counts_them_and_moves_on(bootstrap_servers, redis_client,
                                                                          redis_url, topic_name):
    """windows.max_shard_log_bytes = 600 (about 40 counted pairs per shard, 2 shards): events past a full
    shard go to the dead-letter topic with reason window_shard_full, counted by that label, the fill gauge
    reads 1, and ingest commits past them (no stuck loop: a later window still counts)."""
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    first = [{"user": f"user-{i:03d}", "key": f"k{i % 3}", "ts": T0 + 1} for i in range(200)]
    later = [{"user": "late-comer", "key": "k9", "ts": T0 + SIZE + 1}]
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks="all")
    for ev in first + later:
        producer.send(topic, key=ev["user"].encode(), value=json.dumps(ev).encode(), timestamp_ms=int(ev["ts"] * 1000))
    producer.flush()
    producer.close()
    data = config_mapping(bootstrap_servers, redis_url, topic, group=topic_name("g"), size=SIZE, max_keys=3)
    data["windows"].update({"shards": 2, "max_shard_log_bytes": 600})
    data["kafka"]["max_poll_records"] = 20
    cfg = config_from_mapping(data, environ={})
    store = WindowStore(redis_client, keys=Keys(cfg.redis.key_prefix, 2), window_size=SIZE)
    with Running(cfg) as run:
        wait_for(lambda: store.counts(T0 // SIZE * SIZE + SIZE).get("k9") == 1, timeout=60,
                 what="the next window counted after the full one")
        # k9's count is in Redis as soon as its batch is applied; the worker counts the earlier batches'
        # rejections when it finishes them (it finishes a batch while the next one is applied): wait for all
        wait_for(lambda: sum(store.counts(T0 // SIZE * SIZE).values())
                 + run.metric("events_rejected_total", {"reason": "window_shard_full"}) == len(first),
                 timeout=30, what="every event of the full window counted or rejected")
        full = run.metric("events_rejected_total", {"reason": "window_shard_full"})
        fill = run.metric("shard_fill_ratio")
        wait_for(lambda: run.metric("dead_letters_produced_total") == full, timeout=30, what="the dead letters")
    assert run.error is None
    counted = sum(store.counts(T0 // SIZE * SIZE).values())
    print(f"\nfull shard: counted={counted} window_shard_full={full:.0f} fill at the end={fill:.2f}")
    assert counted + full == len(first) and 40 <= counted <= 100 and full > 0
    letters = _dead_letters(bootstrap_servers, cfg.kafka.dead_letter_topic)
    assert len(letters) == full and {dict(r.headers)["reason"] for r in letters} == {b"window_shard_full"}
    events_full = sum(int(store.meta(T0 // SIZE * SIZE, s).get("events_full", 0)) for s in range(2))
    assert events_full == full
