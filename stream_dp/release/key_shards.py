"""Exact merges over a window's key shards (layout ``"key"``, docs/design/key-sharded-counts.md).

In the key layout a window's counts live in S key shards, key ``k`` in shard ``crc32(k) mod S``
(:func:`stream_dp.store.keys.key_shard_of`), each shard's sorted set holding the *whole* window count of its
keys. The shards are disjoint, so -- unlike the user layout's shards, whose counts must be summed
(:mod:`stream_dp.release.shard_merge`, the threshold algorithm) -- the window's top ``n`` is simply the top
``n`` of the union of every shard's top ``n``: a key among the window's best ``n`` has fewer than ``n``
keys above it in the window, so fewer than ``n`` in its own shard, so it is in its shard's top ``n``.

Order and ties are those of one Redis sorted set read by ``ZREVRANGE`` (higher count first, then the key's
bytes in reverse lexicographic order: :func:`~stream_dp.release.shard_merge.rank_key`), so the merge returns
exactly the dict, in exactly the order, that an unsharded window's top-``n`` read returns: a release
computed from it is the single-shard release, draw for draw.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from stream_dp.errors import StreamDPError
from stream_dp.release.shard_merge import rank_key
from stream_dp.store.keys import key_shard_of

#: One key shard's top, best first (``ZREVRANGE ... WITHSCORES`` order): ``(key, count)`` pairs.
ShardTop = Sequence[tuple[str, float]]


class KeyShardsOverlap(ValueError, StreamDPError):
    """The key shards of a window are not disjoint, or a shard's top is not in ``ZREVRANGE`` order: the
    window was not written in the key layout it is read in (``windows.layout``)."""


def merge_disjoint_top(parts: Sequence[ShardTop], n: int) -> dict[str, float]:
    """The ``n`` largest counts of a window whose key shards' tops are ``parts``, key → count, best first.

    Each ``parts[j]`` must be key shard j's top ``min(n, its size)`` members in ``ZREVRANGE`` order; the
    result then equals ``ZREVRANGE 0 n-1`` of one sorted set holding every shard's members (module
    docstring). Raises :class:`KeyShardsOverlap` when a key appears in two parts or a part is out of order:
    either would make the result silently differ from the single-shard read.

    >>> merge_disjoint_top([[("b", 3.0), ("a", 1.0)], [("c", 3.0)]], 2)
    {'c': 3.0, 'b': 3.0}
    """
    if n < 1:
        return {}
    seen: set[str] = set()
    for j, part in enumerate(parts):
        for i, (key, _) in enumerate(part):
            if key in seen:
                raise KeyShardsOverlap(f"key shard {j} holds a key another key shard holds too: the window's "
                                       "counts are not split by key (windows.layout)")
            seen.add(key)
            if i and rank_key(part[i - 1]) < rank_key(part[i]):
                raise KeyShardsOverlap(f"key shard {j}'s top is not in ZREVRANGE order at rank {i}")
    merged = heapq.merge(*parts, key=rank_key, reverse=True)
    out: dict[str, float] = {}
    for key, count in merged:
        out[key] = float(count)
        if len(out) == n:
            break
    return out


def route_by_key_shard(keys: Iterable[str], shards: int) -> dict[int, list[str]]:
    """The given keys grouped by the key shard that holds them, each group in the order given (a key given
    twice is listed twice): a read of some keys' counts (``ZMSCORE``) then touches only their shards.

    >>> route_by_key_shard(["a", "b", "a"], 1)
    {0: ['a', 'b', 'a']}
    """
    out: dict[int, list[str]] = {}
    for key in keys:
        out.setdefault(key_shard_of(key, shards), []).append(key)
    return out
