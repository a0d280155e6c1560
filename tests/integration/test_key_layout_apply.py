"""Ingest's two-step apply in the key layout (``windows.layout = "key"``, docs/design/key-sharded-counts.md)
against a real redis-server, in process: the store bounds in the user shard and records the increments as
pending (step 1), then counts them into the key shards once each (step 2, ``count_keys.lua``).

- Random logs with replays, S = 1 and 4: the key shards hold exactly the oracle's counts
  (tests/support/bounding_oracle.py), each key in its own key shard only, the user layout's counts identical.
- A crash at each step (the store's crash point raises; a fresh store -- a restarted worker -- replays the
  batch), and part way through step 2 (some key shards counted by the real script, then the crash): the
  counts equal the oracle's, nothing pending is left uncounted.
- The rebalance case of the ordering rule: worker 1 records chunk A and dies; worker 2 replays A's events as
  duplicates within a longer chunk B; every key shard gets A before B.

The worker-process crash test (SIGKILL at each point) is tests/integration/test_key_layout_crash.py."""

from __future__ import annotations

import random

import pytest

from store_helpers import Log, apply_in_batches, random_log, uncounted_pending
from stream_dp.ingest.store import Chunk, WindowStore
from stream_dp.ingest.windowing import window_start
from stream_dp.store import scripts
from stream_dp.store.key_counts import CountEntry, count_args
from stream_dp.store.keys import Keys, key_shard_of
from tests.support.bounding_oracle import bounded_counts

pytestmark = pytest.mark.integration

SIZE = 60
MAX_KEYS = 3


class Crash(Exception):
    """Stands for the SIGKILL: the store is dropped, what Redis holds stays."""


class CrashAt:
    """Raises :class:`Crash` the ``nth`` time ``point`` is reached."""

    def __init__(self, point: str, nth: int = 1) -> None:
        self.point, self.nth, self.hits = point, nth, 0

    def reached(self, point: str) -> None:
        if point == self.point:
            self.hits += 1
            if self.hits == self.nth:
                raise Crash(point)


def _store(client, keys: Keys, crashpoints=None) -> WindowStore:
    extra = {} if crashpoints is None else {"crashpoints": crashpoints}
    return WindowStore(client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS, **extra)


def _truth(logs: Log) -> dict[int, dict[str, int]]:
    events = [(ts, user, key) for p in sorted(logs) for _, ts, user, key in logs[p]]
    return bounded_counts(events, window_size=SIZE, max_keys_per_user=MAX_KEYS)


def _chunks(logs: Log, lo: int, hi: int) -> list[Chunk]:
    out = []
    for p, log in logs.items():
        by_window: dict[int, list] = {}
        for off, ts, user, key in log[lo:hi]:
            by_window.setdefault(window_start(ts, SIZE), []).append((off, user, key))
        out += [Chunk.of(w, p, evs) for w, evs in by_window.items()]
    return out


def _apply(store: WindowStore, chunks: list[Chunk]) -> None:
    store.register_windows({c.start for c in chunks})
    store.apply(chunks, closed_through=None)


@pytest.mark.parametrize("shards", [1, 4])
def test_the_key_layout_counts_exactly_what_the_user_layout_counts(redis_client, shards):
    rnd = random.Random(shards)
    logs = random_log(rnd, 3000, partitions=3, users=300, keys=80, span=3 * SIZE, pareto=0.8)
    by_key = _store(redis_client, Keys(f"k{shards}", shards, "key"))
    by_user = _store(redis_client, Keys(f"u{shards}", shards))
    apply_in_batches(by_key, logs, random.Random(7), size=SIZE, replays=True, most=300, shuffle=True)
    apply_in_batches(by_user, logs, random.Random(7), size=SIZE, replays=True, most=300, shuffle=True)
    truth = _truth(logs)
    assert by_key.windows() == sorted(truth)
    for start, counts in truth.items():
        assert by_key.counts(start) == counts == by_user.counts(start)
        for j in range(shards):  # disjoint: each key counted in its own key shard only
            names = {m.decode() for m in redis_client.zrange(by_key.keys.key_shard_counts(start, j), 0, -1)}
            assert all(key_shard_of(k, shards) == j for k in names)
        assert not redis_client.exists(by_key.keys.window_counts(start, 0))  # user shards count nothing
        assert uncounted_pending(redis_client, by_key.keys, start) == []


@pytest.mark.parametrize("point", ["after_record", "after_count", "after_trim"])
def test_a_crash_at_each_step_is_healed_by_the_replay(redis_client, point):
    rnd = random.Random(3)
    logs = random_log(rnd, 1200, partitions=2, users=150, keys=40, span=2 * SIZE, pareto=0.8)
    keys = Keys(f"c-{point}", 4, "key")
    crashes = 0
    committed = 0  # the Kafka offset: a restarted worker replays from here
    step = 150
    while committed < 1200:
        store = _store(redis_client, keys, CrashAt(point, rnd.randint(1, 3)) if crashes < 3 else None)
        try:
            while committed < 1200:
                _apply(store, _chunks(logs, committed, committed + step))
                committed += step  # committed only once apply returned (steps 1 and 2)
        except Crash:
            crashes += 1
    assert crashes == 3, "the crash point must actually be reached"
    truth = _truth(logs)
    for start, counts in truth.items():
        assert _store(redis_client, keys).counts(start) == counts
        assert uncounted_pending(redis_client, keys, start) == []


def test_a_crash_part_way_through_step_two_is_healed_by_the_replay(redis_client):
    """Step 1 recorded, then only some key shards counted (by the real script), then the crash."""
    rnd = random.Random(4)
    logs = random_log(rnd, 600, partitions=2, users=100, keys=40, span=SIZE, pareto=0.8)
    keys = Keys("mid", 4, "key")
    _apply(_store(redis_client, keys), _chunks(logs, 0, 300))
    try:
        _apply(_store(redis_client, keys, CrashAt("after_record")), _chunks(logs, 300, 600))
    except Crash:
        pass
    count = scripts.register(redis_client, "count_keys")
    start = window_start(logs[0][0][1], SIZE)
    by_key_shard: dict[int, list[CountEntry]] = {}
    for user_shard in range(4):
        for field, value in redis_client.hgetall(keys.window_pending(start, user_shard)).items():
            partition, offset, key_shard = (int(x) for x in field.decode().split(":"))
            by_key_shard.setdefault(key_shard, []).append(CountEntry(user_shard, partition, offset, value.decode()))
    assert len(by_key_shard) >= 2
    for key_shard in sorted(by_key_shard)[:2]:  # two key shards counted, the others not
        entries = sorted(by_key_shard[key_shard], key=lambda e: (e.user_shard, e.partition, e.last_offset))
        redis_client.evalsha(count.sha, 3, *keys.key_shard(start, key_shard), *count_args(entries))
    _apply(_store(redis_client, keys), _chunks(logs, 300, 600))  # the replay
    assert _store(redis_client, keys).counts(start) == _truth(logs)[start]
    assert uncounted_pending(redis_client, keys, start) == []


def test_worker_two_sends_the_older_pending_entry_before_its_own(redis_client):
    """The ordering rule's case: W1 records A (offsets 0..99) and dies before step 2; W2 replays from offset 0
    with a longer batch (A's events are duplicates, B = 100..199 is new): each key shard gets A, then B."""
    rnd = random.Random(9)
    logs = {0: [(off, 1.0 + off / 1000, f"u{rnd.randrange(40)}", f"k{rnd.randrange(30)}") for off in range(200)]}
    keys = Keys("rebalance", 2, "key")
    try:
        _apply(_store(redis_client, keys, CrashAt("after_record")), _chunks(logs, 0, 100))
    except Crash:
        pass
    assert _store(redis_client, keys).counts(0) == {}  # A recorded, not counted
    _apply(_store(redis_client, keys), _chunks(logs, 0, 200))
    assert _store(redis_client, keys).counts(0) == _truth(logs)[0]
    assert uncounted_pending(redis_client, keys, 0) == []


def test_the_key_layout_on_a_real_cluster_counts_exactly(cluster):
    """12 shards on a 3-master cluster: both steps go one pipeline per master (key and user shards on every
    master), each script over one slot; with replays and a crash after step 1, the counts equal the oracle's."""
    keys = Keys("cl", 12, "key")
    masters = {cluster.get_node_from_key(keys.key_shard_counts(0, j)).name for j in range(12)}
    assert len(masters) == 3
    rnd = random.Random(12)
    logs = random_log(rnd, 1500, partitions=2, users=200, keys=60, span=2 * SIZE, pareto=0.8)
    crashing = CrashAt("after_record", 2)
    store = _store(cluster, keys, crashing)
    _apply(store, _chunks(logs, 0, 400))
    with pytest.raises(Crash):
        _apply(store, _chunks(logs, 400, 800))  # recorded in the user shards, counted nowhere
    apply_in_batches(_store(cluster, keys), logs, random.Random(5), size=SIZE, replays=True, most=300, shuffle=True)
    for start, counts in _truth(logs).items():
        assert _store(cluster, keys).counts(start) == counts
        assert uncounted_pending(cluster, keys, start) == []


@pytest.mark.parametrize("deployment", ["single", "cluster"])
def test_a_steady_stream_sends_each_pending_entry_to_its_key_shard_once(request, deployment):
    """Without replays or crashes every entry reaches its key shard once: the entries known counted are deleted
    from pending *ahead of* the next batch's step 1 on the same connection, so its reply names none of them
    (were they deleted after it, every batch would send the previous batch's entries again, skipped: the
    second step's cost doubled)."""
    client = request.getfixturevalue("redis_client" if deployment == "single" else "cluster")
    rnd = random.Random(21)
    logs = random_log(rnd, 2000, partitions=3, users=200, keys=60, span=2 * SIZE, pareto=0.8)
    keys = Keys(f"once-{deployment}", 12, "key")
    store = _store(client, keys)
    for lo in range(0, 2000, 100):
        _apply(store, _chunks(logs, lo, lo + 100))
    assert store.key_counter is not None
    assert store.key_counter.total.counted > 100
    assert store.key_counter.total.skipped == 0
    for start, counts in _truth(logs).items():
        assert store.counts(start) == counts
