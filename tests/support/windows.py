"""Write window state into Redis the way ingest does (the window contract of docs/ingest.md, "Redis layout").

For the release worker's own tests and the release benchmark: a legitimate fixture, because the contract
(counts ZSET, meta HASH, windows index, global watermark) is all the release worker reads. Not used by any
production path.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from stream_dp.store.key_counts import encode_increments
from stream_dp.store.keys import Keys, key_shard_of, shard_of

CHUNK = 20_000


def write_window(client: redis.Redis, keys: Keys, start: int, size: int, counts: Mapping[str, float]) -> None:
    """Store one window's counts, meta and index entry (does not move the watermark)."""
    name = keys.window_counts(start)
    items = list(counts.items())
    for i in range(0, len(items), CHUNK):
        pipe = client.pipeline(transaction=False)
        pipe.zadd(name, dict(items[i:i + CHUNK]))
        pipe.execute()
    client.hset(keys.window_meta(start), mapping={"start": start, "end": start + size,
                                                  "events_applied": int(sum(counts.values()))})
    client.zadd(keys.windows_index(), {str(start): start})


def write_key_window(client: redis.Redis, keys: Keys, start: int, size: int, counts: Mapping[str, int], *,
                     pending_every: int = 2) -> int:
    """Store one window in the key layout (``keys.layout == "key"``) as ingest would have left it after a crash
    between its two steps: every ``pending_every``-th key's count still *pending* in a user shard (one entry per
    key, source (user shard of the key's name, partition 0), increasing offsets), the others counted in their
    key shards; user-shard metas and the index entry. Returns the number of pending entries."""
    pending = 0
    for i, (key, count) in enumerate(sorted(counts.items())):
        shard = key_shard_of(key, keys.shards)
        if i % pending_every == 0:
            user_shard = shard_of(key, keys.shards)
            client.hset(keys.window_pending(start, user_shard), f"0:{i}:{shard}", encode_increments({key: int(count)}))
            pending += 1
        else:
            client.zadd(keys.key_shard_counts(start, shard), {key: float(count)})
    for user_shard in range(keys.shards):
        client.hset(keys.window_meta(start, user_shard), mapping={"start": start, "end": start + size})
    client.zadd(keys.windows_index(), {str(start): start})
    return pending


def set_watermark(client: redis.Redis, keys: Keys, watermark: float) -> None:
    """Set ingest's global watermark: every window with ``end <= watermark`` is closed; and add ingest's close
    notice (``store/lua/finalize_watermark.lua``), so a release worker waiting for one wakes now. (Ingest adds
    it only when a window end is passed; one more here only wakes a waiting worker for a poll that finds
    nothing new.)"""
    value = repr(float(watermark))
    pipe = client.pipeline(transaction=False)
    pipe.hset(keys.watermarks(), "global", value)
    pipe.xadd(keys.window_closes(), {"watermark": value}, maxlen=64, approximate=True)
    pipe.execute()
