"""The per-user weighted histogram end to end (docs/privacy.md §8d): events through the production ingest into a
real redis-server, the release worker reading the windows' bounding logs (in pieces that cut pairs apart, over one
shard and two), and the weighted counts it publishes."""

from __future__ import annotations

import pytest
from test_neighbouring_streams import DELTA_KEYS, SIZE, T0, harness_cfg

from stream_dp.mechanisms.weighted_histogram import WEIGHT_UNIT, user_weight
from stream_dp.release.windows import WindowReader
from tests.support.neighbours import StreamEvent, run_in_process, ticks

pytestmark = pytest.mark.integration


def cfg_for(weighting: str, shards: int):
    # ε = 2000 per window: σ ≈ 0.02 in count units, so the counts below are exact up to rounding
    return harness_cfg(shards=shards, topk={"enabled": False}, alerts={"enabled": False}, sample={"enabled": False},
                       histogram={"enabled": True, "epsilon": 2000.0, "delta": 1e-6, "weighting": weighting})


def light_and_full_users() -> list[StreamEvent]:
    """40 users on "solo" only, 40 users on a, b, c (Δ = 3) and again on d (bounded away: a fourth key)."""
    events = [StreamEvent(T0 + 1 + i * 0.01, f"s{i}", "solo") for i in range(40)]
    events += [StreamEvent(T0 + 2 + i * 0.01, f"f{i}", key) for i in range(40) for key in "abcd"]
    return events + ticks(T0 + SIZE + 1, 1)


class SmallPieces(WindowReader):
    """The production reader, reading bounding logs 5 bytes at a time (every pair is cut across pieces)."""

    def bounding_pairs(self, window, *, chunk_bytes=5):
        return super().bounding_pairs(window, chunk_bytes=chunk_bytes)


def small_pieces(worker, client):
    return SmallPieces(client, keys=worker.keys, size_seconds=SIZE)


@pytest.mark.parametrize("shards", [1, 2])
def test_light_users_weigh_more_and_full_users_count_one(redis_client, shards: int) -> None:
    view = run_in_process(light_and_full_users(), cfg_for("per_user", shards), redis_client, rng=3,
                          reader_factory=small_pieces)
    (record,) = view.records
    assert record["mechanism"]["name"] == "weighted_histogram" and record["status"] == "released"
    counts = {item["key"]: item["count"] for item in record["items"]}
    solo = 40 * user_weight(1, DELTA_KEYS) / WEIGHT_UNIT  # 40 · 27/16 = 67.5: each weighs ⌊16·√3⌋/16
    assert solo == 67.5 and abs(counts.pop("solo") - solo) <= 1
    assert counts == {"a": 40, "b": 40, "c": 40}  # a user on Δ keys weighs 1 on each; d was bounded away
    params = record["mechanism"]["parameters"]
    assert params["weighting"] == "per_user" and params["weight_unit"] == WEIGHT_UNIT
    assert all(item["ci_low"] <= item["count"] <= item["ci_high"] for item in record["items"])


def test_uniform_counts_of_the_same_stream_count_every_user_once(redis_client) -> None:
    (record,) = run_in_process(light_and_full_users(), cfg_for("uniform", 1), redis_client, rng=3).records
    assert record["mechanism"]["name"] == "gaussian_histogram"
    assert {item["key"]: item["count"] for item in record["items"]} == {"solo": 40, "a": 40, "b": 40, "c": 40}


def test_the_logs_are_read_from_a_redis_cluster(tmp_path) -> None:
    """Two shards on three masters: each shard's log is read from the master of its hash tag."""
    from cluster_helpers import local_cluster

    with local_cluster(tmp_path / "cluster", masters=3) as cluster:
        client = cluster.client()
        try:
            (record,) = run_in_process(light_and_full_users(), cfg_for("per_user", 2), client, rng=3,
                                       reader_factory=small_pieces).records
        finally:
            client.close()
    counts = {item["key"]: item["count"] for item in record["items"]}
    assert abs(counts.pop("solo") - 67.5) <= 1 and counts == {"a": 40, "b": 40, "c": 40}
