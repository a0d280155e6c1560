"""Both ingest consumer backends read the same records the same way, against the real broker.

The loop hands the decoder a record's offset, timestamp and value (:func:`~stream_dp.ingest.consumers.columns`)
and a dead letter's topic, partition, offset, key and value (``fields``): confluent-kafka's messages must
give exactly what kafka-python's records give, null keys and values and record timestamps included
(confluent reports a timestamp as ``(type, ms)``).
"""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from stream_dp.config import ConfigError, config_from_mapping
from stream_dp.ingest.consumers import (ConfluentConsumer, KafkaPythonRecords, confluent_settings, ingest_consumer,
                                        records_of)

from ingest_helpers import create_topic, wait_for

pytestmark = pytest.mark.integration

RECORDS = [  # (key, value, timestamp ms or None: the producer's clock)
    (b"user-1", b'{"user": "user-1", "key": "a", "ts": 1800000000.5}', 1_800_000_000_500),
    (None, b'{"user": "user-2", "key": "b"}', 1_800_000_001_000),
    (b"user-3", None, 1_800_000_002_000),  # a tombstone: a null value
    (b"user-4", b"\xff\xfe not json", 0),
    (b"user-5", b"{}", None),
]


def _produce(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for key, value, ts in RECORDS:
        producer.send(topic, key=key, value=value, partition=0, timestamp_ms=ts)
    producer.send(topic, key=b"other", value=b"{}", partition=1, timestamp_ms=1_800_000_003_000)
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


def test_the_client_setting_is_checked_and_named(bootstrap_servers):
    with pytest.raises(ConfigError, match="ingest.kafka_client"):
        config_from_mapping({"ingest": {"kafka_client": "librdkafka"}}, environ={})
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers}}, environ={}).kafka
    with pytest.raises(ValueError, match="ingest.kafka_client"):
        ingest_consumer(cfg, "librdkafka")
    settings = confluent_settings(cfg, group_id="g")
    assert settings["enable.auto.commit"] is False and settings["enable.auto.offset.store"] is False
    assert settings["group.id"] == "g" and settings["auto.offset.reset"] == "earliest"
