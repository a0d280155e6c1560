"""Key-sharded counts (layout "key", docs/design/key-sharded-counts.md) against a real redis-server: the
window's counts written once into one sorted set and once into its key shards (``Keys.key_shard_counts``,
split by ``key_shard_of``); the merge of the key shards' ``ZREVRANGE 0 n-1`` equals the one set's
``ZREVRANGE 0 n-1``, members, counts and order -- Redis's own tie-break on the member bytes, not a model
of it."""

from __future__ import annotations

import random

import pytest

from stream_dp.release.key_shards import merge_disjoint_top
from stream_dp.store.keys import Keys, key_shard_of

pytestmark = pytest.mark.integration

START = 3600
# ASCII, Latin-1 and astral keys, prefixes of each other: ties among them are ordered by their UTF-8 bytes
ALPHABET = ["a", "b", "z", "é", "ÿ", "日", "𝄞", "0", "~"]


def _read(client, name: str, n: int) -> list[tuple[str, float]]:
    return [(m.decode(), s) for m, s in client.zrevrange(name, 0, n - 1, withscores=True)]


@pytest.mark.parametrize("shards", [2, 12])
def test_merged_key_shard_tops_equal_one_sorted_sets_top(redis_client, shards):
    rnd = random.Random(47 + shards)
    keys = Keys("ks", shards, "key")
    single = "ks:{single}:counts"
    for trial in range(40):
        redis_client.flushdb()
        size = rnd.randint(0, 300)
        counts = {"".join(rnd.choices(ALPHABET, k=rnd.randint(1, 3))): rnd.randint(1, 4) for _ in range(size)}
        pipe = redis_client.pipeline(transaction=False)
        if counts:
            pipe.zadd(single, counts)
        for key, c in counts.items():
            pipe.zadd(keys.key_shard_counts(START, key_shard_of(key, shards)), {key: c})
        pipe.execute()
        for n in (1, 7, 101, 400):
            parts = [_read(redis_client, keys.key_shard_counts(START, j), n) for j in range(shards)]
            assert list(merge_disjoint_top(parts, n).items()) == _read(redis_client, single, n), (trial, n)
