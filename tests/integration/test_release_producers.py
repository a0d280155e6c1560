"""The release publisher's producer on both clients (``release.kafka_client``), against the real broker: what
reaches the topic, and how a broker that cannot be reached fails a publish (a kafka-python ``KafkaError``,
within the publisher's timeout, so the worker counts it as the "kafka" dependency and retries the pass)."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from stream_dp.config import config_from_mapping
from stream_dp.processes import free_port  # nothing listens there: an unreachable broker
from stream_dp import topics
from stream_dp.connections import confluent_client_settings
from stream_dp.release.outbox import Publisher
from stream_dp.release.producers import ConfluentProducer, release_producer
from stream_dp.release.records import encode

from release_processes import read_topic
from release_records import record
from waiting import wait_for

pytestmark = pytest.mark.integration

CLIENTS = ("confluent", "kafka-python")


def _cfg(bootstrap: str, client: str, topic: str = "releases"):
    return config_from_mapping({"kafka": {"bootstrap_servers": bootstrap, "releases_topic": topic},
                                "release": {"kafka_client": client}}, environ={})


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_publishes_records_in_order_keyed_by_release_id(bootstrap_servers, topic_name, client):
    cfg = _cfg(bootstrap_servers, client, topic_name("releases"))
    topics.create(cfg.kafka, ("releases",))
    producer = release_producer(cfg)
    assert isinstance(producer, ConfluentProducer) == (client == "confluent")
    publisher = Publisher(producer, cfg.kafka.releases_topic, timeout=20)
    sent = [record(i) for i in range(5)]
    try:
        for r in sent:
            publisher.publish(r)  # returns once the broker acknowledged it
    finally:
        publisher.close()
    got = read_topic(bootstrap_servers, cfg.kafka.releases_topic, expect_at_least=len(sent))
    assert got == [(r["release_id"], encode(r)) for r in sent]


def test_an_unreachable_broker_fails_the_publish_with_a_kafka_error_in_time():
    """(kafka-python refuses already to build a producer without a broker, after retrying its bootstrap for
    about 40 s, and leaks its sockets doing so: not tested here.)"""
    cfg = _cfg(f"127.0.0.1:{free_port()}", "confluent")
    publisher = Publisher(release_producer(cfg), cfg.kafka.releases_topic, timeout=2.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(KafkaError, match="no acknowledgement"):
            publisher.publish(record(1))
    finally:
        publisher.producer.close(timeout=0.5)
    assert time.monotonic() - t0 < 10  # the publisher's own timeout decides


def test_the_worker_counts_a_failed_publish_as_the_kafka_dependency(redis_url, topic_name, monkeypatch):
    """The worker's loop labels a publish that failed with a kafka-python error ``kind="kafka"``, also the
    confluent producer's own error classes (derived from ``KafkaError``), and keeps the release stored."""
    import stream_dp.release.service as service
    from tests.support.windows import set_watermark

    cfg = config_from_mapping({
        "kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}", "releases_topic": topic_name("releases")},
        "redis": {"url": redis_url, "key_prefix": "prod"},
        "windows": {"size_seconds": 60, "start": "60"},
        "budget": {"epsilon": 1e6, "delta": 1e-2, "allow_partial_period": True},
        "release": {"backoff_initial_seconds": 0.05, "backoff_max_seconds": 0.2},
        "releases": {"topk": {"enabled": True}, "histogram": {"enabled": False}},  # the top-k release checked below
        "metrics": {"port": 0},
    }, environ={})
    # no broker: no releases topic to compare the ledger with at start (stream_dp.release.ledger_guard)
    from stream_dp.release.topic_reader import TopicContents

    monkeypatch.setattr(service, "read_releases", lambda kafka, **k: TopicContents(kafka.releases_topic))
    registry = CollectorRegistry()
    svc = service.build_worker(cfg, registry=registry, worker_id="w1", rng=1)
    # a delivery timeout below the publisher's: librdkafka reports the record failed (ProduceFailed, a class of
    # this project derived from KafkaError), not merely late
    svc.publisher.producer.close(timeout=0.5)
    svc.publisher.producer = ConfluentProducer({**confluent_client_settings(cfg.kafka), "enable.idempotence": True,
                                                "acks": "all", "delivery.timeout.ms": 300})
    svc.publisher.timeout = 10.0
    client = redis.Redis.from_url(redis_url)
    stop = threading.Event()
    thread = threading.Thread(target=svc.worker.run, args=(stop,), daemon=True)
    errors = lambda kind: registry.get_sample_value("stream_dp_release_errors_total", {"kind": kind}) or 0  # noqa: E731
    try:
        set_watermark(client, svc.worker.keys, 120)  # window [60, 120) closes
        thread.start()
        wait_for(lambda: errors("kafka") >= 1, timeout=30, what="a failed publish counted as kind=kafka")
        assert errors("other") == 0 and errors("redis") == 0
        assert svc.worker.outbox.ledger.stored(svc.worker.scope_for(60), "60-120.topk") is not None
    finally:
        stop.set()
        thread.join(10)
        svc.publisher.producer.close(timeout=0.5)
        svc.redis.close()
        client.close()
