"""What every kafka-python client of the service is built with, in a module of its own: the subscriber library
(:mod:`stream_dp.client`, the dashboard) uses it without loading the Redis side of :mod:`stream_dp.connections`."""

from __future__ import annotations

from typing import Any

#: Every kafka-python producer and consumer of the service: a send to or subscription of a missing topic
#: never makes the broker create it with the broker's defaults (one partition, 7-day retention; see
#: :mod:`stream_dp.topics`): topics are made by ``stream-dp topics create`` only.
NO_AUTO_CREATE: dict[str, Any] = {"allow_auto_create_topics": False}


def forbid_auto_create(client: Any) -> Any:
    """``client`` (a kafka-python producer or consumer) made to honour ``allow_auto_create_topics=False``.

    kafka-python 3.0.x builds the cluster metadata its requests come from without passing the client's
    ``allow_auto_create_topics`` on (its ClusterMetadata keeps the default, True), so every metadata request
    of a consumer subscribed to a deleted topic asked Apache Kafka to create it again -- with the broker's
    defaults (tests/integration/test_no_auto_create.py saw it). The setting is put where the requests read it."""
    cluster = getattr(client, "_metadata", None) or getattr(client, "_cluster", None)
    if cluster is not None and "allow_auto_create_topics" in getattr(cluster, "config", {}):
        cluster.config["allow_auto_create_topics"] = False
    return client
