"""A release record larger than one Kafka message (``kafka.release_message_max_bytes``), end to end on the real
broker and Redis: the worker publishes it as part messages, the releases after it are not held up, and a
subscriber gets the whole record once -- also when the same parts come again (a republication) and, in a
consumer group, when it restarts between two parts. Sent whole instead, the record is refused by the
producer on every pass and every later window waits behind it (the failure the parts remove)."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaConsumer

from stream_dp.client import ReleaseSubscriber
from stream_dp.config import config_from_mapping
from stream_dp.store.keys import Keys
from stream_dp.wire import message_parts
from stream_dp.release.records import validate_record
from stream_dp import topics
from stream_dp.release.service import build_worker
from tests.support.windows import set_watermark, write_window

from topic_helpers import CheckedProducer

pytestmark = pytest.mark.integration

SIZE = 60
LIMIT = 16_384  # kafka.release_message_max_bytes (its smallest allowed value)


def _cfg(bootstrap: str, redis_url: str, topic: str):
    return config_from_mapping({
        "kafka": {"bootstrap_servers": bootstrap, "releases_topic": topic, "release_message_max_bytes": LIMIT},
        "redis": {"url": redis_url, "key_prefix": "parts"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 600, "start": "0"},
        "budget": {"epsilon": 1e9, "delta": 1e-3, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": {"topk": {"enabled": True, "k": 3, "k_bar": 10, "epsilon": 1000.0, "delta": 1e-6},
                     "alerts": {"enabled": False}, "histogram": {"enabled": False},
                     "sample": {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 0.5, "delta": 1e-6}},
    }, environ={})


def _messages(bootstrap: str, topic: str, expect: int) -> list[tuple[str, bytes]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    got: list[tuple[str, bytes]] = []
    try:
        for _ in range(10):
            got += [(m.key.decode(), m.value) for m in consumer]
            if len(got) >= expect:
                break
    finally:
        consumer.close()
    return got


def _records(bootstrap: str, topic: str, want: int, **kw) -> list[dict]:
    out: list[dict] = []
    with ReleaseSubscriber(bootstrap, topic, **kw) as sub:
        for _ in range(40):
            out += sub.poll(timeout_ms=500)
            if len(out) >= want:
                break
    return out


def test_a_sample_larger_than_one_message_goes_out_in_parts_and_later_windows_follow(
        bootstrap_servers, redis_url, redis_client, topic_name):
    topic = topic_name("releases")
    cfg = _cfg(bootstrap_servers, redis_url, topic)
    topics.create(cfg.kafka, ("releases",))  # as `stream-dp topics create` makes it
    keys = Keys("parts")
    # window 0: 3000 keys, all far above the sample's threshold (~70 B per item: ~200 KB of items)
    write_window(redis_client, keys, 0, SIZE, {f"key-{j:05d}": 500.0 + j for j in range(3000)})
    write_window(redis_client, keys, SIZE, SIZE, {"a": 900.0, "b": 800.0, "c": 700.0})
    service = build_worker(cfg, rng=7)
    try:
        set_watermark(redis_client, keys, 2 * SIZE)
        assert service.worker.run_once() is not None and service.worker.run_once() is not None
    finally:
        service.close()
    ids = ["0-60.topk", "0-60.sample", "60-120.topk", "60-120.sample"]
    records = _records(bootstrap_servers, topic, len(ids))
    assert [r["release_id"] for r in records] == ids  # whole, once each, in release order
    big = records[1]
    assert "part" not in big and len(big["items"]) > 2000
    messages = _messages(bootstrap_servers, topic, 1)
    sample_parts = [json.loads(v) for k, v in messages if k == "0-60.sample"]
    count = sample_parts[0]["part"]["count"]
    print(f"\nsample of {len(big['items'])} items ({len(json.dumps(big))} B) in {count} parts of <= {LIMIT} B")
    assert count >= 10 and [p["part"]["index"] for p in sample_parts] == list(range(count))
    assert all(len(v) <= LIMIT for _, v in messages)
    for p in sample_parts:
        validate_record(p)  # each part follows the published schema
    assert [i for p in sample_parts for i in p["items"]] == big["items"]
    assert {k for k, v in messages} == set(ids)


def test_sent_whole_the_record_is_refused_by_the_producer(bootstrap_servers, redis_url, redis_client, topic_name):
    """The broken variant of the test above: a publisher that does not cut records (its limit far above the
    producer's) fails the sample on every pass, and the next window is never released."""
    topic = topic_name("releases")
    cfg = _cfg(bootstrap_servers, redis_url, topic)
    topics.create(cfg.kafka, ("releases",))  # as `stream-dp topics create` makes it
    keys = Keys("parts")
    write_window(redis_client, keys, 0, SIZE, {f"key-{j:05d}": 500.0 + j for j in range(3000)})
    write_window(redis_client, keys, SIZE, SIZE, {"a": 900.0})
    service = build_worker(cfg, rng=7)
    service.publisher.max_message_bytes = 1 << 30  # no parts
    try:
        set_watermark(redis_client, keys, 2 * SIZE)
        for _ in range(2):
            with pytest.raises(Exception, match="(?i)too large"):
                service.worker.run_once()
    finally:
        service.close()
    assert [r["release_id"] for r in _records(bootstrap_servers, topic, 1)] == ["0-60.topk"]


def _publish_raw(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for key, value in messages:
            producer.send(topic, key=key.encode(), value=value)
        producer.flush()
    finally:
        producer.close()


def _record(window: int, n: int) -> dict:
    from release_records import record

    return record(window, "sample", keys=tuple(f"key-{j:05d}" for j in range(n)))


def test_a_subscriber_joins_interrupted_and_repeated_parts_and_a_group_resumes_between_parts(
        bootstrap_servers, topic_name):
    """On the topic: parts 0-1 of release A (the publisher was interrupted), release B, then A again (its
    republication), part by part. A subscriber yields B, then A once, whole. A consumer group that stops
    after the republication's first part resumes at that part, not after it (else A would never be whole)."""
    topic = topic_name("releases")
    topics.create(config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers, "releases_topic": topic}},
                                      environ={}).kafka, ("releases",))
    a, b = _record(0, 1000), _record(1, 3)
    parts_a = message_parts(a, LIMIT)
    assert len(parts_a) >= 3
    rid = a["release_id"]
    _publish_raw(bootstrap_servers, topic, [(rid, v) for v in parts_a[:2]])
    _publish_raw(bootstrap_servers, topic, [(b["release_id"], message_parts(b, LIMIT)[0])])
    _publish_raw(bootstrap_servers, topic, [(rid, parts_a[0])])
    group = topic_name("group")
    with ReleaseSubscriber(bootstrap_servers, topic, group=group) as sub:  # stops after the first part
        got = []
        for _ in range(40):
            got += sub.poll(timeout_ms=500)
            if got:
                break
        sub.poll(timeout_ms=500)  # commits what was processed
    assert [r["release_id"] for r in got] == [b["release_id"]]
    _publish_raw(bootstrap_servers, topic, [(rid, v) for v in parts_a[1:]])  # the rest of the republication
    resumed = _records(bootstrap_servers, topic, 1, group=group)
    assert resumed == [a]  # the part it stopped at was read again: A is whole
    assert [r["release_id"] for r in _records(bootstrap_servers, topic, 2)] == [b["release_id"], rid]
