"""The key layout end to end, in process, on a real redis-server (and a 3-master cluster): the production
ingest applier writes the same stream in the user layout (S = 1) and in the key layout (S = 1, 2, 12), the
production release worker releases every due window with the same seed, and the records are compared
(docs/design/key-sharded-counts.md, "Every release type per key shard"):

- top-k and alerts read identical inputs (same dicts, same order), so their records are identical;
- the sample draws the same classes, ranks and tokens: its rows are identical up to which key of a count
  class sits at a drawn rank -- (token, estimate, true count) identical, the keys' law the single-shard law
  (tests/unit/test_key_classes.py);
- the histogram -- read one key shard at a time, thresholded per shard -- at an ε where the noise is 0 lists
  exactly the same keys and counts in the same order, the oracle's (its law at other ε:
  tests/unit/test_count_parts.py).

The release ids, statuses, costs and parameters -- everything a subscriber sees besides the mechanisms'
outputs -- are identical (the harness runs the neighbouring-stream pairs in the key layout:
tests/integration/test_neighbouring_streams.py)."""

from __future__ import annotations

import random

import pytest

from event_times import T0
from stream_dp.config import Config
from test_neighbouring_streams import DELTA_KEYS as MAX_KEYS
from test_neighbouring_streams import SIZE, harness_cfg
from tests.support.bounding_oracle import bounded_counts
from tests.support.neighbours import Scenario, StreamEvent, View, run_in_process

pytestmark = pytest.mark.integration

WINDOWS = 3


def _cfg(layout: str, shards: int, *, histogram: bool) -> Config:
    """The harness' config: top-k, alerts and the sample; or (``histogram``) the histogram alone, at an ε where
    its noise is 0 (its own draws differ in number between the layouts -- rejection sampling over other keys
    in another order -- so on a shared generator the types after it would not be comparable draw for draw)."""
    return harness_cfg(shards=shards, layout=layout,
                       topk={"enabled": not histogram, "k": 5, "k_bar": 20},
                       alerts={"enabled": not histogram, "watchlist": ["k1", "k2", "k7", "nobody"], "threshold": 5.0},
                       sample={"enabled": not histogram},
                       histogram={"enabled": histogram, "window_epsilon": 1e5, "window_delta": 1e-6,
                                  "max_keys": 10_000})


def _stream(seed: int) -> Scenario:
    rnd = random.Random(seed)
    events = []
    for w in range(WINDOWS):
        for i in range(400):
            user = f"user-{rnd.randrange(150)}"
            key = f"k{min(int(rnd.paretovariate(0.8)), 80)}"
            events.append(StreamEvent(T0 + w * SIZE + 1 + i * (SIZE - 2) / 400, user, key,
                                      partition=int(user.split("-")[1]) % 2))
    return Scenario("random", tuple(events), "user-0", horizon=T0 + (WINDOWS + 1) * SIZE, partitions=2)  # one empty window after them


def _release(client, layout: str, shards: int, seed: int, *, histogram: bool = False) -> View:
    used: list[str] = []
    view = run_in_process(_stream(seed).stream(with_user=True), _cfg(layout, shards, histogram=histogram), client,
                          rng=seed,
                          partitions=2, batch_size=64,
                          worker_hook=lambda worker: used.append(worker.keys.layout))
    assert used == [layout]
    return view


def _same_release(user: View, key: View, sample_counts: dict[str, dict[str, int]]) -> None:
    assert [r["release_id"] for r in key.records] == [r["release_id"] for r in user.records]
    for a, b in zip(user.records, key.records):
        assert (a["status"], a["cost"], a["mechanism"]) == (b["status"], b["cost"], b["mechanism"]), a["release_id"]
        if a["type"] != "sample":
            assert a["items"] == b["items"], a["release_id"]
            continue
        counts = sample_counts.get(a["release_id"], {})  # none for the empty window
        assert sorted((i["token"], i["estimate"], counts[i["key"]]) for i in a["items"]) == \
            sorted((i["token"], i["estimate"], counts[i["key"]]) for i in b["items"]), a["release_id"]


def _true_counts(seed: int) -> dict[str, dict[str, int]]:
    """The oracle's counts of each window (tests/support/bounding_oracle.py), by the sample's release id (a
    user's events are all in one partition, in stream order)."""
    events = [(e.record_time, e.user, e.key) for e in _stream(seed).events]
    by_window = bounded_counts(events, window_size=SIZE, max_keys_per_user=MAX_KEYS)
    return {f"{start}-{start + SIZE}.sample": counts for start, counts in by_window.items()}


@pytest.mark.parametrize("shards", [1, 2, 12])
def test_the_key_layout_publishes_the_user_layouts_records(redis_client, shards):
    user = _release(redis_client, "user", 1, seed=4)
    key = _release(redis_client, "key", shards, seed=4)
    assert len(user.records) == (WINDOWS + 1) * 3 and {r["status"] for r in user.records} == {"released"}
    assert any(r["items"] for r in user.records if r["type"] == "sample")
    _same_release(user, key, _true_counts(4))


@pytest.mark.parametrize("shards", [2, 12])
def test_the_key_layouts_noise_free_histogram_is_the_user_layouts(redis_client, shards):
    """The histogram read one key shard at a time (thresholded per shard, the union capped) lists the same keys
    with the same counts in the same order: the oracle's counts at or above its threshold, and the keys of
    the window's public domain (learned from earlier windows' releases) with their counts, 0 when absent."""
    user = _release(redis_client, "user", 1, seed=5, histogram=True)
    key = _release(redis_client, "key", shards, seed=5, histogram=True)
    _same_release(user, key, {})
    truth = _true_counts(5)
    for r in user.records:
        counts = truth.get(r["release_id"].replace(".histogram", ".sample"), {})
        released = {i["key"]: i["count"] for i in r["items"]}
        threshold = r["mechanism"]["parameters"]["threshold"]
        assert all(c == counts.get(k, 0) for k, c in released.items()), r["release_id"]
        assert {k for k, c in counts.items() if c >= threshold} <= set(released), r["release_id"]


def test_the_key_layout_on_a_real_cluster_publishes_the_user_layouts_records(cluster):
    user = _release(cluster, "user", 1, seed=8)
    key = _release(cluster, "key", 12, seed=8)
    _same_release(user, key, _true_counts(8))
    user = _release(cluster, "user", 1, seed=9, histogram=True)
    key = _release(cluster, "key", 12, seed=9, histogram=True)
    _same_release(user, key, {})
