"""No client of the service makes a topic by accident (:mod:`stream_dp.topics`: topics come from
``stream-dp topics create`` only).

Apache Kafka creates a missing topic -- with one partition and the broker's 7-day retention -- for any client
whose metadata request allows it (``auto.create.topics.enable`` is true by default); kafka-python 3.0.x
allowed it even when told not to (:func:`stream_dp.connections.forbid_auto_create`). Each client the service
builds asks about a missing topic (consumers: a subscribed topic deleted under them; producers and the
subscriber: a topic never made) and the topic must not appear within a few seconds. On Tansu, which creates
no topic for a metadata request, this holds either way; it is the Kafka variant that tests.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from stream_dp.client import ReleaseSubscriber
from stream_dp.config import KafkaConfig
from stream_dp.connections import kafka_consumer, kafka_producer
from stream_dp.ingest.consumers import ingest_consumer
from stream_dp.release.producers import release_producer
from stream_dp.config import config_from_mapping

from topic_helpers import CheckedProducer, contract_topics
from waiting import wait_for

pytestmark = pytest.mark.integration


def _exists(bootstrap: str, topic: str) -> bool:
    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def _appears_within(bootstrap: str, topic: str, seconds: float) -> bool:
    """Whether ``topic`` exists at some point within ``seconds`` (a broker creates it asynchronously after the
    metadata request that asked for it): absence can only be observed for a bounded time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _exists(bootstrap, topic):
            return True
        time.sleep(0.2)
    return False


def _subscribed_then_deleted(bootstrap: str, topic: str, poll) -> None:
    """The topic exists while the consumer joins, then is deleted while it keeps polling (what happened to
    the ingest worker: kafka-python's next metadata request made the topic again, one partition)."""
    contract_topics(bootstrap, events=topic)
    wait_for(lambda: poll() or True, timeout=5, what="one poll")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result()
    wait_for(lambda: not _exists(bootstrap, topic), timeout=30, what=f"{topic} deleted")
    deadline = time.monotonic() + 5  # several metadata refreshes of a subscription that lost its topic
    while time.monotonic() < deadline:
        poll()


@pytest.mark.parametrize("client", ["kafka-python consumer", "confluent ingest consumer", "kafka-python producer",
                                    "confluent release producer", "subscriber", "test producer"])
def test_no_client_creates_a_missing_topic(bootstrap_servers, topic_name, client):
    topic = topic_name("never-created")
    kafka = KafkaConfig(bootstrap_servers=bootstrap_servers, events_topic=topic, ingest_group_id=topic_name("g"))
    if client in ("kafka-python consumer", "confluent ingest consumer"):
        consumer = (kafka_consumer(kafka, group_id=topic_name("g")) if client == "kafka-python consumer"
                    else ingest_consumer(kafka, "confluent"))
        try:
            consumer.subscribe([topic])
            _subscribed_then_deleted(bootstrap_servers, topic, lambda: consumer.poll(timeout_ms=250))
        finally:
            consumer.close()
    elif client in ("kafka-python producer", "test producer"):
        producer = (kafka_producer(kafka, max_block_ms=2000) if client == "kafka-python producer"
                    else CheckedProducer(bootstrap_servers=bootstrap_servers, max_block_ms=2000))
        with pytest.raises(Exception):  # noqa: B017 - whichever error: the topic is not there
            producer.send(topic, b"x").get(timeout=5)
        producer.close(timeout=1)
    elif client == "confluent release producer":
        cfg = config_from_mapping({"kafka": {"bootstrap_servers": bootstrap_servers, "releases_topic": topic},
                                   "release": {"kafka_client": "confluent"}}, environ={})
        producer = release_producer(cfg)
        try:
            with pytest.raises(Exception):  # noqa: B017 - unknown topic, or no acknowledgement in time
                producer.send(topic, key=b"k", value=b"{}").get(timeout=5)
        finally:
            producer.close(timeout=1)
    else:
        with ReleaseSubscriber(bootstrap_servers, topic) as sub:
            for _ in range(6):
                sub.poll(timeout_ms=250)
    assert not _appears_within(bootstrap_servers, topic, 3.0), f"the {client} made topic {topic}"
