"""The dev stack's KRaft cluster ids are ones Kafka's storage tool takes on its command line."""

from __future__ import annotations

import base64

from stream_dp.dev.kafka_broker import _random_cluster_id


def test_a_cluster_id_never_starts_with_a_dash_and_is_sixteen_bytes():
    """One url-safe base64 id in 64 starts with '-', which ``kafka-storage format -t <id>`` reads as an option
    (the CI run that failed 91 Kafka tests at once). 20,000 draws would see ~310 of them."""
    ids = [_random_cluster_id() for _ in range(20_000)]
    assert not [i for i in ids if i.startswith("-")]
    assert {len(base64.urlsafe_b64decode(i + "==")) for i in ids} == {16}
    assert sum(i.startswith("_") for i in ids) > 100  # the other characters keep their share: not a biased draw
