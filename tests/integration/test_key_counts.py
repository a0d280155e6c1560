"""Step 2 of the key layout's apply (``store/lua/count_keys.lua``, docs/design/key-sharded-counts.md) against a
real redis-server: each chunk's increments are counted into a key shard at most once whoever sends them and
however often, a released key shard counts nothing, a malformed entry is refused before any write -- and,
with step 2 interrupted at random and every still-pending entry re-sent under the ordering rule, the key
shards end with exactly the counts of every chunk counted once."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import redis

from stream_dp.store import scripts, window_state
from stream_dp.store.key_counts import CountEntry, count_args, split_by_key_shard
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration

START = 3600


def _count(client, keys: Keys, shard: int, entries: list[CountEntry]) -> list:
    script = scripts.register(client, "count_keys")
    return script(keys=keys.key_shard(START, shard), args=count_args(entries))


def _counts(client, keys: Keys) -> Counter:
    out: Counter = Counter()
    for j in range(keys.shards):
        for k, v in client.zrange(keys.key_shard_counts(START, j), 0, -1, withscores=True):
            assert k.decode() not in out, "a key in two key shards"
            out[k.decode()] = int(v)
    return out


def test_an_entry_sent_again_is_skipped(redis_client):
    keys = Keys("kc", 1, "key")
    a, b = CountEntry(0, 0, 10, {"x": 2, "y": 1}), CountEntry(0, 0, 20, {"x": 1})
    assert _count(redis_client, keys, 0, [a, b]) == [2, 0]
    assert _count(redis_client, keys, 0, [a, b]) == [0, 2]  # the replay of the whole batch
    assert _count(redis_client, keys, 0, [a]) == [0, 1]  # a late step 2 of the first chunk alone
    assert _counts(redis_client, keys) == {"x": 3, "y": 1}
    assert redis_client.hgetall(keys.key_shard_applied(START, 0)) == {b"0:0": b"20"}


def test_sources_are_independent_and_the_ordering_rule_is_what_keeps_a_chunk(redis_client):
    """Two user shards' chunks of the same partition count independently. Sent with its pending predecessor
    ([A, B]) chunk B keeps A; sent alone and first, B's mark makes the key shard skip A -- the loss the rule
    (step 1's reply names A, the sender sends A first) prevents."""
    keys = Keys("kr", 1, "key")
    a, b = CountEntry(0, 5, 100, {"x": 1}), CountEntry(0, 5, 200, {"y": 1})
    other = CountEntry(1, 5, 150, {"x": 1})
    assert _count(redis_client, keys, 0, [other, a, b]) == [3, 0]
    assert _counts(redis_client, keys) == {"x": 2, "y": 1}
    broken = Keys("kb", 1, "key")
    assert _count(redis_client, broken, 0, [b]) == [1, 0]
    assert _count(redis_client, broken, 0, [a]) == [0, 1]  # A is lost: never send an entry without its predecessors
    assert _counts(redis_client, broken) == {"y": 1}


def test_a_released_key_shard_counts_nothing(redis_client):
    keys = Keys("kd", 1, "key")
    redis_client.hset(keys.key_shard_meta(START, 0), "state", window_state.RELEASED)
    assert _count(redis_client, keys, 0, [CountEntry(0, 0, 1, {"x": 1})]) == [b"released", 0]
    assert not redis_client.exists(keys.key_shard_counts(START, 0), keys.key_shard_applied(START, 0))


def test_malformed_entries_are_refused_before_any_write(redis_client):
    keys = Keys("km", 1, "key")
    script = scripts.register(redis_client, "count_keys")
    good = count_args([CountEntry(0, 0, 1, {"x": 1})])
    with pytest.raises(redis.ResponseError, match="2 keys but 1 counts"):
        script(keys=keys.key_shard(START, 0), args=[*good, "0:1", "7", "1\0a\0b"])
    with pytest.raises(redis.ResponseError, match="not entries of 3"):
        script(keys=keys.key_shard(START, 0), args=[*good, "0:1"])
    assert not redis_client.exists(keys.key_shard_counts(START, 0))
    with pytest.raises(ValueError, match="out of offset order"):
        count_args([CountEntry(0, 0, 9, {"x": 1}), CountEntry(0, 0, 9, {"y": 1})])
    with pytest.raises(ValueError, match="empty or holds NUL"):
        count_args([CountEntry(0, 0, 9, {"a\0": 1})])


@pytest.mark.parametrize("seed", range(6))
def test_interrupted_step_twos_healed_by_resending_the_pending_entries_count_every_chunk_once(redis_client, seed):
    """A model of the protocol around the real script: 3 user shards × 2 partitions produce chunks (step 1
    records each as pending); each round one pending source's step 2 is sent to a random subset of the key
    shards (a crash part way), each getting every pending entry of the source it has increments of --
    including those it already counted, which it skips -- and an entry stops being pending only once every
    key shard it touches has counted it. At the end every pending entry is drained (the
    release worker's drain). The key shards then hold exactly the sum of every chunk's increments."""
    rnd = random.Random(seed)
    shards = 4
    keys = Keys(f"kp{seed}", shards, "key")
    truth: Counter = Counter()
    pending: dict[tuple[int, int], list[tuple[CountEntry, set[int]]]] = {}  # source -> [(entry, key shards left)]
    offset = Counter()
    for _ in range(120):
        source = (rnd.randrange(3), rnd.randrange(2))
        offset[source] += rnd.randint(1, 50)
        increments = {f"k{rnd.randrange(60)}": 1 for _ in range(rnd.randint(1, 8))}
        truth.update(increments)
        entry = CountEntry(source[0], source[1], offset[source], increments)
        pending.setdefault(source, []).append((entry, set(split_by_key_shard(increments, shards))))
        # step 2 of some source, reaching only some of its key shards (the sender crashed part way)
        src = rnd.choice(sorted(pending))
        for j in rnd.sample(range(shards), rnd.randint(0, shards)):
            _send(redis_client, keys, pending, src, j, shards)
        pending[src] = [(e, left) for e, left in pending[src] if left]
    for src in sorted(pending):  # the drain
        for j in range(shards):
            _send(redis_client, keys, pending, src, j, shards)
    assert _counts(redis_client, keys) == truth


def _send(client, keys: Keys, pending, src, shard: int, shards: int) -> None:
    """Every pending entry of ``src`` with increments for key shard ``shard``, in offset order (the rule)."""
    todo = [(e, left) for e, left in pending[src] if shard in split_by_key_shard(e.increments, shards)]
    if not todo:
        return
    entries = [CountEntry(e.user_shard, e.partition, e.last_offset, split_by_key_shard(e.increments, shards)[shard])
               for e, _ in todo]
    _count(client, keys, shard, entries)
    for _, left in todo:
        left.discard(shard)
