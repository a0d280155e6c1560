"""The release's drain in the key layout (``stream_dp/release/key_drain.py``, docs/design/key-sharded-counts.md)
against a real redis-server: an ingest store crashes between step 1 and step 2 of a window's last chunk and is
never restarted (no replay will send its pending entries), ingest's watermark closes the window, and the
release worker releases it.

- The drain counts exactly the pending increments: the key shards then hold the oracle's counts
  (tests/support/bounding_oracle.py); a second drain changes nothing.
- End to end with the production release worker (in process): the released histogram -- at an ε so large
  that the discrete Gaussian's noise is 0 -- lists exactly the oracle's counts at or above its threshold; after
  the release the key shards are ``released`` (a zombie's late step 2 counts nothing) and the pending hashes
  are gone.
- On a real 3-master cluster (S = 12) the same, the drain's reads and counts one pipeline per master.
"""

from __future__ import annotations

import random

import pytest

from store_helpers import random_log, uncounted_pending
from stream_dp.config import config_from_mapping
from stream_dp.ingest.store import Chunk, WindowStore
from stream_dp.release.windows import Window, WindowReader
from stream_dp.store import scripts
from stream_dp.store.key_counts import CountEntry, count_args
from stream_dp.store.keys import Keys
from tests.support.bounding_oracle import bounded_counts
from tests.support.neighbours import release_in_process

pytestmark = pytest.mark.integration

SIZE = 60
T0 = 600_000  # the schedule's first window (a multiple of SIZE)
MAX_KEYS = 3


class Crash(Exception):
    """Stands for the SIGKILL: the store is dropped and never restarted."""


class CrashAfterRecord:
    """Raises :class:`Crash` the first time step 1 of a batch returned (``after_record``) once armed."""

    armed = False

    def reached(self, point: str) -> None:
        if self.armed and point == "after_record":
            raise Crash(point)


def _ingest_then_crash(client, keys: Keys, seed: int) -> dict[str, int]:
    """A random log applied in batches, the last one only to step 1 (its store dies); the window closed by
    ingest's watermark. Returns the oracle's counts of the window."""
    rnd = random.Random(seed)
    logs = random_log(rnd, 900, partitions=2, users=150, keys=60, span=SIZE - 1, pareto=0.8)
    logs = {p: [(off, T0 + ts % SIZE, user, key) for off, ts, user, key in log] for p, log in logs.items()}
    crash = CrashAfterRecord()
    store = WindowStore(client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS, crashpoints=crash)
    store.register_windows([T0])
    for lo in range(0, 450, 150):
        if lo == 300:
            crash.armed = True
        chunks = [Chunk.of(T0, p, [(off, user, key) for off, _, user, key in log[lo:lo + 150]])
                  for p, log in logs.items()]
        try:
            store.apply(chunks, closed_through=None)
        except Crash:
            break
    else:  # pragma: no cover
        raise AssertionError("the crash point was never reached")
    survivor = WindowStore(client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS)
    state = survivor.advance_watermark({0: (T0 + 2.0 * SIZE, False), 1: (T0 + 2.0 * SIZE, False)},
                                       known_partitions=[0, 1], idle_timeout=600)
    assert state.global_watermark is not None and state.global_watermark >= T0 + SIZE
    events = [(ts, user, key) for p in sorted(logs) for _, ts, user, key in logs[p][:450]]
    return bounded_counts(events, window_size=SIZE, max_keys_per_user=MAX_KEYS)[T0]


def _cfg(prefix: str, shards: int) -> object:
    return config_from_mapping({
        "redis": {"key_prefix": prefix},
        "windows": {"size_seconds": SIZE, "start": str(T0), "allowed_lateness_seconds": 0,
                    "max_event_delay_seconds": 0, "idle_partition_timeout_seconds": 600, "retention_seconds": 600,
                    "shards": shards, "layout": "key"},
        "contribution": {"max_keys_per_user": MAX_KEYS},
        "budget": {"epsilon": 1e9, "delta": 0.5, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": {"topk": {"enabled": False}, "alerts": {"enabled": False},
                     "sample": {"enabled": True, "window_epsilon": 1.0, "window_delta": 1e-6},
                     "histogram": {"enabled": True, "window_epsilon": 1e5, "window_delta": 1e-6,
                                   "max_keys": 10_000}},
    }, environ={})


@pytest.mark.parametrize("shards", [1, 4])
def test_the_drain_counts_what_a_crashed_ingest_left_pending(redis_client, shards):
    keys = Keys(f"drain{shards}", shards, "key")
    truth = _ingest_then_crash(redis_client, keys, seed=shards)
    reader_store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS)
    assert uncounted_pending(redis_client, keys, T0), "the crash must leave entries pending"
    assert reader_store.counts(T0) != truth  # without the drain the window would be released short
    reader = WindowReader(redis_client, keys=keys, size_seconds=SIZE)
    assert reader.make_final(Window(T0, T0 + SIZE)) > 0
    assert reader_store.counts(T0) == truth
    assert uncounted_pending(redis_client, keys, T0) == []
    reader.make_final(Window(T0, T0 + SIZE))  # again: every entry skipped
    assert reader_store.counts(T0) == truth


def _released_counts(view) -> dict[str, int]:
    [histogram] = [r for r in view.records if r["type"] == "histogram" and r["window"]["start"] == T0]
    assert histogram["status"] == "released"
    return {item["key"]: item["count"] for item in histogram["items"]}


def _check_release(client, keys: Keys, truth: dict[str, int]) -> None:
    view = release_in_process(_cfg(keys.prefix, keys.shards), client, rng=3)
    released = _released_counts(view)
    assert released, "the window must release keys"
    threshold = min(released.values())
    assert released == {k: c for k, c in truth.items() if c >= threshold}
    assert {r["type"] for r in view.records} == {"histogram", "sample"}
    # released: the key shards count nothing more (a zombie's step 2), the pending hashes are gone
    count = scripts.register(client, "count_keys")
    for j in range(keys.shards):
        assert client.hget(keys.key_shard_meta(T0, j), "state") == b"released"
        before = client.zscore(keys.key_shard_counts(T0, j), "late-key")
        client.evalsha(count.sha, 3, *keys.key_shard(T0, j), *count_args([CountEntry(0, 0, 10**9, {"late-key": 1})]))
        assert client.zscore(keys.key_shard_counts(T0, j), "late-key") == before
    assert not any(client.exists(keys.window_pending(T0, s)) for s in range(keys.shards))


@pytest.mark.parametrize("shards", [1, 4])
def test_a_release_after_a_crash_between_the_steps_publishes_the_oracle_counts(redis_client, shards):
    keys = Keys(f"drainrel{shards}", shards, "key")
    truth = _ingest_then_crash(redis_client, keys, seed=10 + shards)
    assert uncounted_pending(redis_client, keys, T0)
    _check_release(redis_client, keys, truth)


def test_the_drain_on_a_real_cluster(cluster):
    keys = Keys("draincl", 12, "key")
    masters = {cluster.get_node_from_key(keys.window_pending(T0, j)).name for j in range(12)}
    assert len(masters) == 3
    truth = _ingest_then_crash(cluster, keys, seed=12)
    assert uncounted_pending(cluster, keys, T0)
    _check_release(cluster, keys, truth)



def test_the_drain_is_confirmed_on_the_replicas(tmp_path):
    """``redis.min_replicas_acked`` = 1: when the drain returns, the counts it added are on the replica (read
    there, no waiting); with the replica paused it raises NotReplicated (the pass is retried) rather than let
    the release read counts a failover could take back."""
    import os
    import signal

    import redis as redis_py

    from cluster_helpers import master_with_replica
    from stream_dp.replication import NotReplicated, ReplicationPolicy

    with master_with_replica(tmp_path) as (master, replica):
        client = redis_py.Redis(port=master.port)
        keys = Keys("drainrep", 4, "key")
        truth = _ingest_then_crash(client, keys, seed=21)
        reader = WindowReader(client, keys=keys, size_seconds=SIZE)
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            with pytest.raises(NotReplicated):
                reader.make_final(Window(T0, T0 + SIZE), ReplicationPolicy(1, 200))
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        assert reader.make_final(Window(T0, T0 + SIZE), ReplicationPolicy(1, 5000)) > 0
        on_replica = WindowStore(redis_py.Redis(port=replica.port), keys=keys, window_size=SIZE,
                                 max_keys_per_user=MAX_KEYS)
        assert on_replica.counts(T0) == truth
