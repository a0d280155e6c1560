"""Sharded window state (``windows.shards``) against a real redis-server: exact counts per (window, shard),
the release reader's exact merge, the recorded shard count, the segmented bounding log and the capacity."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import redis

from tests.support.bounding_oracle import bounded_counts
from store_helpers import Log, apply_in_batches, random_log
from stream_dp.config import ConfigError, WindowsConfig
from stream_dp.dev.devstack import DevStack
from stream_dp.ingest.store import Chunk, WindowStore
from stream_dp.node_batches import RideAlong
from stream_dp.store.bounding_log import decode_log, log_pieces
from stream_dp.store.keys import Keys, shard_of
from stream_dp.release.sampling import count_classes
from stream_dp.release.windows import Window, WindowReader
from stream_dp.schedule import ScheduleMismatch, establish

pytestmark = pytest.mark.integration

SIZE = 60


def _logs(rnd: random.Random, n: int, partitions: int, users: int, keys: int) -> Log:
    return random_log(rnd, n, partitions=partitions, users=users, keys=keys, span=3 * SIZE, pareto=0.8)


def _apply(store: WindowStore, logs: Log, rnd: random.Random, *, replays: bool = True) -> None:
    apply_in_batches(store, logs, rnd, size=SIZE, replays=replays, most=300, shuffle=False)


def _truth(logs):
    events = [(ts, user, key) for p in sorted(logs) for _, ts, user, key in logs[p]]
    return bounded_counts(events, window_size=SIZE, max_keys_per_user=3)


def test_four_shards_count_exactly_and_keep_each_user_in_one_shard(redis_client):
    rnd = random.Random(11)
    logs = _logs(rnd, 8000, partitions=3, users=400, keys=60)
    keys = Keys("s", shards=4)
    store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=3, log_segment_bytes=1024)
    _apply(store, logs, rnd)
    truth = _truth(logs)
    assert store.windows() == sorted(truth)
    for start, counts in truth.items():
        assert store.counts(start) == counts
        applied = 0
        for shard in range(4):
            meta = store.meta(start, shard)
            applied += int(meta["events_applied"])
            segments = int(meta["log_bytes"]) // 1024 + 1
            raw = b"".join(redis_client.get(keys.window_users(start, shard) + (f":{i}" if i else "")) or b""
                           for i in range(segments))
            assert len(raw) == int(meta["log_bytes"])
            assert all(len(redis_client.get(keys.window_users(start, shard) + (f":{i}" if i else "")) or b"") <= 1024
                       for i in range(segments))
            users = {u for u, _ in decode_log(raw)}
            assert users and all(shard_of(u, 4) == shard for u in users)  # each user's state in its one shard
        assert applied == sum(counts.values())
    # one hash tag per shard (a cluster places them in different slots)
    assert len({keys.window_tag(0, s) for s in range(4)}) == 4


def test_a_restarted_store_catches_up_over_log_segments_exactly(redis_client):
    rnd = random.Random(5)
    logs = _logs(rnd, 3000, partitions=1, users=300, keys=30)
    keys = Keys("s", shards=2)
    first = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=3, log_segment_bytes=1024)
    half = {0: logs[0][:1500]}
    _apply(first, half, rnd, replays=False)
    restarted = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=3,
                            log_segment_bytes=1024, catch_up_chunk_bytes=700)  # reads cross segment borders
    _apply(restarted, logs, rnd, replays=True)
    assert {s: restarted.counts(s) for s in restarted.windows()} == _truth(logs)
    assert restarted.caches.catch_up_reads > 0


def test_the_reader_merges_shards_exactly(redis_client):
    """S = 4 against the same events unsharded: the same top n (order and ties), watched counts, whole window
    and count classes; members at sampled ranks have the summed count."""
    rnd = random.Random(3)
    logs = _logs(rnd, 6000, partitions=2, users=500, keys=200)
    for prefix, shards in (("one", 1), ("four", 4)):
        store = WindowStore(redis_client, keys=Keys(prefix, shards=shards), window_size=SIZE, max_keys_per_user=3)
        _apply(store, logs, random.Random(1), replays=False)
    one = WindowReader(redis_client, keys=Keys("one"), size_seconds=SIZE)
    four = WindowReader(redis_client, keys=Keys("four", shards=4), size_seconds=SIZE)
    w = Window(0, SIZE)
    # a key really is in several shards
    per_shard = [set(k.decode() for k in redis_client.zrange(Keys("four", 4).window_counts(0, s), 0, -1)) for s in range(4)]
    assert Counter(k for shard in per_shard for k in shard).most_common(1)[0][1] > 1
    for n in (1, 5, 17, 60, 500):
        assert list(four.top_counts(w, n).now().items()) == list(one.top_counts(w, n).now().items())
    watched = ["k1", "k7", "k30", "absent"]
    assert four.counts_of(w, watched).now() == one.counts_of(w, watched).now()
    # a sharded window's reads take rounds (one per shard, the threshold algorithm's): never one queued command
    assert four.top_counts(w, 5).later(RideAlong()) is None and four.counts_of(w, watched).later(RideAlong()) is None
    assert four.all_counts(w).as_dict() == one.all_counts(w).as_dict()
    assert four.count_histogram(w) == one.count_histogram(w)
    classes = count_classes(four.count_histogram(w))
    ranks = np.array([0, 3, len(four.all_counts(w)) - 1])
    merged = four.all_counts(w)
    got = four.members_at(w, ranks, merged.counts[ranks])
    truth = one.all_counts(w).as_dict()
    assert [truth[k] for k in got] == merged.counts[ranks].tolist()
    assert sum(n for _, n in four.count_histogram(w)) == len(truth) and len(classes) == len(four.count_histogram(w))
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):
        four.members_at(w, ranks, merged.counts[ranks] + 1)


def test_the_summed_top_is_not_the_union_of_the_shards_tops(redis_client):
    """Per shard 'x' is second to a key of its own; summed over 3 shards it is first (27 vs 10)."""
    keys = Keys("adv", shards=3)
    for s, mine in enumerate(("k0", "k1", "k2")):
        redis_client.zadd(keys.window_counts(0, s), {mine: 10, "x": 9})
    reader = WindowReader(redis_client, keys=keys, size_seconds=SIZE)
    assert reader.top_counts(Window(0, SIZE), 1).now() == {"x": 27.0}
    assert list(reader.top_counts(Window(0, SIZE), 2).now().items()) == [("x", 27.0), ("k2", 10.0)]


def test_a_restart_with_another_shard_count_is_refused(redis_client):
    keys = Keys("s", shards=4)
    establish(redis_client, keys, WindowsConfig(size_seconds=SIZE, start="0", shards=4))
    with pytest.raises(ScheduleMismatch, match=r"windows\.shards is 12 .* split into 4 shards"):
        establish(redis_client, Keys("s", shards=12), WindowsConfig(size_seconds=SIZE, start="0", shards=12))
    assert isinstance(ScheduleMismatch("x"), ConfigError)


def test_a_full_shard_dead_letters_its_events_and_replays_do_not_loop(redis_client):
    """Capacity 200 log bytes per (window, shard): chunks past it are refused with their offsets recorded
    (reported as full, counted in meta events_full), later chunks that fit still count, and replaying
    the whole log counts nothing again -- no stuck loop, no double count -- but reports the refused events
    as full again (their dead letters may not have been written before the replay)."""
    keys = Keys("c", shards=1)
    store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=1, max_shard_log_bytes=200)
    events = [(i, f"user-{i:03d}", "key") for i in range(40)]  # 13 bytes a pair
    results = [store.apply([Chunk.of(0, 0, events[lo:lo + 5])], closed_through=None)[0] for lo in range(0, 40, 5)]
    counted = sum(r.applied for r in results)
    full = [off for r in results for off in r.full]
    assert counted == 15 and full == list(range(15, 40))  # 3 chunks fit (195 bytes), the rest do not
    assert store.counts(0) == {"key": 15}
    assert int(store.meta(0)["events_full"]) == 25 and int(store.meta(0)["log_bytes"]) == 195
    assert store.meta(0)["full:0"] == "14:39"  # the refused offsets, (14, 39]: 5 chunks, one range
    again = store.apply([Chunk.of(0, 0, events)], closed_through=None)[0]  # the batch retried
    assert (again.duplicate, again.applied, again.full) == (15, 0, tuple(range(15, 40)))
    fresh = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=1, max_shard_log_bytes=200)
    again = fresh.apply([Chunk.of(0, 0, events + [(40, "user-new", "key")])], closed_through=None)[0]  # restart
    assert (again.duplicate, again.applied, again.full) == (15, 0, tuple(range(15, 41)))
    assert store.counts(0) == {"key": 15} and int(store.meta(0)["events_full"]) == 26
    assert store.meta(0)["full:0"] == "14:40"
    # a chunk that fits (a pair already counted adds no log) between two refused ones: two ranges
    store.apply([Chunk.of(0, 0, [(41, "user-000", "key")])], closed_through=None)
    store.apply([Chunk.of(0, 0, [(42, "user-x", "key"), (43, "user-y", "key")])], closed_through=None)
    assert store.meta(0)["full:0"] == "14:40,41:43"
    replay = events + [(40, "user-new", "key"), (41, "user-000", "key"), (42, "user-x", "key"), (43, "user-y", "key")]
    again = fresh.apply([Chunk.of(0, 0, replay)], closed_through=None)[0]
    assert (again.duplicate, again.full) == (16, tuple(range(15, 41)) + (42, 43))
    # the window closed meanwhile: the replay is told apart from late events, refused ones still full
    again = fresh.apply([Chunk.of(0, 0, replay + [(44, "user-z", "key")])], closed_through=float(SIZE))[0]
    assert (again.duplicate, again.late, again.full) == (16, 1, tuple(range(15, 41)) + (42, 43))


def test_segments_keep_every_value_under_redis_string_cap():
    """A private redis-server whose string cap (proto-max-bulk-len) is lowered to 1 MB: a window log of 1.5 MB
    is stored in 256 KiB segments and counts stay exact; written as one value (segment > cap), the same
    window fails in Redis -- the failure the segments prevent."""
    with DevStack(kafka=False) as stack:
        client = redis.Redis.from_url(stack.redis_url)
        client.config_set("proto-max-bulk-len", 1 << 20)
        events = [(i, f"user-{i:07d}", f"key-{i % 1000:04d}") for i in range(75_000)]  # ~1.5 MB of log
        for prefix, segment, fails in (("seg", 256 << 10, False), ("one", 255 << 20, True)):
            store = WindowStore(client, keys=Keys(prefix), window_size=SIZE, max_keys_per_user=1,
                                log_segment_bytes=segment)
            try:
                for lo in range(0, len(events), 5000):
                    store.apply([Chunk.of(0, 0, events[lo:lo + 5000])], closed_through=None)
            except redis.ResponseError as exc:
                assert fails and "string exceeds maximum allowed size" in str(exc)
                continue
            assert not fails
            assert sum(store.counts(0).values()) == len(events)
            names = [k.decode() for k in client.scan_iter(f"{prefix}:*:users*")]
            assert len(names) >= 6 and max(client.strlen(n) for n in names) <= segment
        client.close()


def test_log_pieces_cover_a_range_across_segments():
    assert log_pieces("u", 4, 0, 4) == [("u", 0, 3)]
    assert log_pieces("u", 4, 3, 9) == [("u", 3, 3), ("u:1", 0, 3), ("u:2", 0, 0)]
    assert log_pieces("u", 4, 5, 5) == []


def test_a_sharded_window_is_released_under_its_claim_and_a_crash_half_way_is_finished(redis_client):
    """The fenced mark (claim and released marker share {w:<start>}), then every shard: released state,
    the bounding log deleted, counts kept for the retention. A lost claim changes nothing; a crash after
    the fenced step leaves the window is_released, and finish_released completes the shards."""
    from stream_dp.release.claim import WindowClaims

    keys = Keys("rel", shards=3)
    store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=2, log_segment_bytes=1024)
    store.apply([Chunk.of(0, 0, [(i, f"user-{i}", f"k{i % 4}") for i in range(300)])], closed_through=None)
    reader = WindowReader(redis_client, keys=keys, size_seconds=SIZE)
    claims = WindowClaims(redis_client, keys=keys, worker_id="w1", ttl_seconds=30)
    claim = claims.acquire(0)
    w = Window(0, SIZE)
    assert not reader.mark_released(w, claim_key=claim.key, token="not-the-token", retention_seconds=600)
    assert not reader.is_released(w) and store.meta(0, 1)["state"] == "open"
    # a crash right after the fenced step: only the marker is set
    assert reader._mark_fence(keys=[claim.key, keys.window_released(0)], args=[claim.token, 600])
    assert reader.is_released(w) and store.meta(0, 2)["state"] == "open"
    reader.finish_released(w, retention_seconds=600)
    for shard in range(3):
        assert store.meta(0, shard)["state"] == "released"
        assert 0 < redis_client.ttl(keys.window_counts(0, shard)) <= 600
        assert not list(redis_client.scan_iter(keys.window_users(0, shard) + "*"))
    assert sum(store.counts(0).values()) == 300
    assert redis_client.zscore(keys.release_index("released"), "0") == 0


def test_an_apply_not_confirmed_on_replicas_is_not_acknowledged(redis_client):
    """redis.min_replicas_acked = 1 on a Redis without replicas: the apply's WAIT times out, the store raises
    the transient NotReplicated (the loop does not commit the batch's offsets; it replays it), and the
    replay -- once the writes count as confirmed -- applies nothing twice."""
    from stream_dp.replication import NotReplicated, ReplicationPolicy

    keys = Keys("rep", shards=2)
    events = [(i, f"user-{i}", f"k{i % 3}") for i in range(50)]
    waiting = WindowStore(redis_client, keys=keys, window_size=SIZE, replication=ReplicationPolicy(1, 50))
    with pytest.raises(NotReplicated, match="redis.min_replicas_acked"):
        waiting.apply([Chunk.of(0, 0, events)], closed_through=None)
    replay = WindowStore(redis_client, keys=keys, window_size=SIZE)
    r, = replay.apply([Chunk.of(0, 0, events)], closed_through=None)
    assert r.applied + r.duplicate == 50 and sum(replay.counts(0).values()) == 50
