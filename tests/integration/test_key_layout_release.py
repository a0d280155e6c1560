"""The key layout end to end, in process, on a real redis-server (and a 3-master cluster): the production
ingest applier writes the same stream in the user layout (S = 1) and in the key layout (S = 1, 2, 12), the
production release worker releases every due window with the same seed, and the records are compared
(docs/design/key-sharded-counts.md, "Every release type per key shard"):

- top-k and alerts read identical inputs (same dicts, same order), so their records are identical;
- the sample draws the same classes, ranks and tokens: its rows are identical up to which key of a count
  class sits at a drawn rank -- (token, estimate, true count) identical, the keys' law the single-shard law
  (tests/unit/test_key_classes.py);
- the histogram at an ε where the noise is 0 lists exactly the same keys and counts in the same order (its
  law at other ε: i.i.d. noise per key over the same keys, only the order of the draws differs).

The release ids, statuses, costs and parameters -- everything a subscriber sees besides the mechanisms'
outputs -- are identical (the harness runs the neighbouring-stream pairs in the key layout:
tests/integration/test_neighbouring_streams.py)."""

from __future__ import annotations

import random

import pytest

from stream_dp.config import Config, config_from_mapping
from tests.support.neighbours import Scenario, StreamEvent, View, run_in_process

pytestmark = pytest.mark.integration

SIZE = 60
T0 = 1_200_000
MAX_KEYS = 3
WINDOWS = 3


def _cfg(layout: str, shards: int) -> Config:
    return config_from_mapping({
        "windows": {"size_seconds": SIZE, "start": str(T0), "allowed_lateness_seconds": 0,
                    "max_event_delay_seconds": 0, "max_clock_skew_seconds": 5,
                    "idle_partition_timeout_seconds": 600, "retention_seconds": 600, "shards": shards,
                    "layout": layout},
        "contribution": {"max_keys_per_user": MAX_KEYS},
        "budget": {"epsilon": 1e9, "delta": 0.5, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": {
            "topk": {"enabled": True, "k": 5, "k_bar": 20, "window_epsilon": 2.0, "window_delta": 2e-6},
            "alerts": {"enabled": True, "watchlist": ["k1", "k2", "k7", "nobody"], "threshold": 5.0, "k": 3,
                       "epsilon": 1.0},
            "sample": {"enabled": True, "window_epsilon": 1.0, "window_delta": 1e-6},
            "histogram": {"enabled": True, "window_epsilon": 1e5, "window_delta": 1e-6, "max_keys": 10_000},
        },
    }, environ={})


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


def _release(client, layout: str, shards: int, seed: int) -> View:
    used: list[str] = []
    view = run_in_process(_stream(seed).stream(with_user=True), _cfg(layout, shards), client, rng=seed,
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
        counts = sample_counts[a["release_id"]]
        assert sorted((i["token"], i["estimate"], counts[i["key"]]) for i in a["items"]) == \
            sorted((i["token"], i["estimate"], counts[i["key"]]) for i in b["items"]), a["release_id"]


def _true_counts(view: View) -> dict[str, dict[str, int]]:
    """Each window's counts as the (noise-free) histogram published them, for the sample's release ids (a key
    the sample reports has a count ≥ 1; the histogram at this ε lists every key above a threshold of 1-2, so the
    few keys below it are looked up as count 1)."""
    out: dict[str, dict[str, int]] = {}
    for r in view.records:
        if r["type"] == "histogram":
            counts = {i["key"]: int(i["count"]) for i in r["items"]}
            out[r["release_id"].replace(".histogram", ".sample")] = _DefaultOne(counts)
    return out


class _DefaultOne(dict):
    def __missing__(self, key: str) -> int:
        return 1


@pytest.mark.parametrize("shards", [1, 2, 12])
def test_the_key_layout_publishes_the_user_layouts_records(redis_client, shards):
    user = _release(redis_client, "user", 1, seed=4)
    key = _release(redis_client, "key", shards, seed=4)
    assert len(user.records) == (WINDOWS + 1) * 4 and {r["status"] for r in user.records} == {"released"}
    assert any(r["items"] for r in user.records if r["type"] == "sample")
    _same_release(user, key, _true_counts(user))


def test_the_key_layout_on_a_real_cluster_publishes_the_user_layouts_records(cluster):
    user = _release(cluster, "user", 1, seed=8)
    key = _release(cluster, "key", 12, seed=8)
    _same_release(user, key, _true_counts(user))
