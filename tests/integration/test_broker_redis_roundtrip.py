"""The foundation works end to end: real broker, real Redis, consumer group with manual commits."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest
import redis
from kafka import KafkaConsumer

from topic_helpers import CheckedProducer, contract_topics

pytestmark = pytest.mark.integration

N_EVENTS = 10_000
PARTITIONS = 4


def test_produce_consume_group_counts_into_redis(bootstrap_servers, redis_url, topic_name):
    topic = topic_name("events")
    contract_topics(bootstrap_servers, events=topic, partitions=PARTITIONS)

    rnd = random.Random(20261129)
    keys = [f"item-{i}" for i in range(50)]
    expected: Counter[str] = Counter()
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5)
    for i in range(N_EVENTS):
        user = f"user-{rnd.randrange(500)}"
        key = rnd.choice(keys)
        expected[key] += 1
        producer.send(topic, key=user.encode(), value=json.dumps({"user": user, "key": key, "ts": i}).encode())
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=topic_name("group"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    store = redis.Redis.from_url(redis_url)
    seen = 0
    deadline = time.monotonic() + 60
    while seen < N_EVENTS and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500, max_records=2000)
        if not batch:
            continue
        pipe = store.pipeline(transaction=True)
        for records in batch.values():
            for rec in records:
                pipe.zincrby("counts", 1, json.loads(rec.value)["key"])
                seen += 1
        pipe.execute()
        consumer.commit()  # only after Redis applied the batch
    assignment = consumer.assignment()
    committed = {tp.partition: consumer.committed(tp) for tp in assignment}
    consumer.close()

    assert seen == N_EVENTS
    assert {tp.partition for tp in assignment} == set(range(PARTITIONS))
    assert sum(committed.values()) == N_EVENTS  # committed offsets cover every record, none twice
    got = {k.decode(): int(v) for k, v in store.zrange("counts", 0, -1, withscores=True)}
    assert got == dict(expected)
    store.close()


def test_fixture_gives_each_test_a_clean_database(redis_client):
    assert redis_client.dbsize() == 0
    redis_client.set("x", 1)
