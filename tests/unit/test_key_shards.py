"""Key-sharded windows (layout "key", docs/design/key-sharded-counts.md): the key → key shard hash, the key
shards' names, and the exact merge of disjoint key shards' tops against the single-shard read."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.release.key_shards import KeyShardsOverlap, merge_disjoint_top, route_by_key_shard
from stream_dp.release.shard_merge import rank_key
from stream_dp.store.keys import KEY_HASH, LAYOUTS, Keys, key_shard_of, shard_of

# ASCII, non-ASCII and keys that are prefixes of each other: the tie-break is on UTF-8 bytes
KEYS = [f"k{i}" for i in range(30)] + ["é", "e", "ée", "日本", "日", "", "k", "\x7f", "ÿ", "𝄞"]


def _zrevrange(counts: dict[str, int]) -> list[tuple[str, float]]:
    """What Redis's ``ZREVRANGE 0 -1 WITHSCORES`` returns for these counts: count desc, then key bytes desc."""
    return sorted(((k, float(c)) for k, c in counts.items()), key=rank_key, reverse=True)


def _key_shard_tops(counts: dict[str, int], shards: int, n: int) -> list[list[tuple[str, float]]]:
    """Each key shard's top n as its ZREVRANGE 0 n-1 reads it, the window split by :func:`key_shard_of`."""
    by_shard: list[dict[str, int]] = [{} for _ in range(shards)]
    for key, c in counts.items():
        by_shard[key_shard_of(key, shards)][key] = c
    return [_zrevrange(part)[:n] for part in by_shard]


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), st.integers(1, 5), max_size=len(KEYS)),
       st.sampled_from([1, 2, 3, 12]), st.integers(1, 45))
def test_the_merged_top_is_the_single_shard_top_in_order(counts, shards, n):
    """Many ties (counts 1..5 over 40 keys, some non-ASCII), n below and beyond the window's size: the merge of
    the key shards' tops is, item for item and in order, the top n one sorted set of the window returns."""
    merged = merge_disjoint_top(_key_shard_tops(counts, shards, n), n)
    assert list(merged.items()) == _zrevrange(counts)[:n]


def test_ties_at_the_cut_are_broken_as_redis_breaks_them_not_by_shard():
    """Three keys of count 2 in three shards and n = 2: the two with the largest bytes, as ZREVRANGE."""
    tops = [[("a", 2.0)], [("c", 2.0)], [("b", 2.0)]]
    assert list(merge_disjoint_top(tops, 2).items()) == [("c", 2.0), ("b", 2.0)]


def test_a_key_in_two_key_shards_is_refused_naming_the_layout():
    """A window written in the user layout read as key shards: the same key in two parts is not summed or
    dropped silently."""
    with pytest.raises(KeyShardsOverlap, match="windows.layout"):
        merge_disjoint_top([[("x", 3.0)], [("x", 2.0)]], 1)


def test_a_top_out_of_order_is_refused():
    with pytest.raises(KeyShardsOverlap, match="ZREVRANGE order"):
        merge_disjoint_top([[("a", 1.0), ("b", 3.0)]], 2)


def test_empty_windows_and_shards():
    assert merge_disjoint_top([], 3) == {}
    assert merge_disjoint_top([[], [("a", 1.0)], []], 3) == {"a": 1.0}
    assert merge_disjoint_top([[("a", 1.0)]], 0) == {}


def test_the_key_hash_is_stable_named_and_spreads():
    """CRC-32 of the UTF-8 bytes (the same function as the user hash, never Python's salted hash)."""
    assert KEY_HASH == "crc32-utf8"
    assert [key_shard_of(k, 12) for k in ("alice", "bob", "user-1", "é")] == [shard_of(k, 12) for k in
                                                                             ("alice", "bob", "user-1", "é")]
    assert [key_shard_of(k, 12) for k in ("alice", "bob", "user-1", "é")] == [11, 8, 8, 2]
    spread = Counter(key_shard_of(f"/page/{i}", 12) for i in range(12_000))
    assert len(spread) == 12 and max(spread.values()) < 1.15 * min(spread.values())
    assert key_shard_of("anything", 1) == 0


def test_routing_keeps_the_order_given_within_each_shard():
    keys = [f"k{i}" for i in range(50)]
    routed = route_by_key_shard(keys, 4)
    assert sorted(k for part in routed.values() for k in part) == sorted(keys)
    for shard, part in routed.items():
        assert part == [k for k in keys if key_shard_of(k, 4) == shard]


def test_the_default_layout_is_the_user_layout_and_key_shards_have_their_own_tags():
    """Default unchanged (user layout, today's names); key shards {w:<start>:k<j>} never collide with the user
    shards {w:<start>:<i>}; a shard outside 0..S-1 or an unknown layout is refused."""
    assert Keys().layout == "user" and LAYOUTS == ("user", "key")
    k = Keys("sdp", 12, "key")
    assert k.key_shard_counts(3600, 5) == "sdp:{w:3600:k5}:counts"
    assert k.window_counts(3600, 5) == "sdp:{w:3600:5}:counts"
    assert len({k.key_shard_tag(3600, j) for j in range(12)} | {k.window_tag(3600, i) for i in range(12)}) == 24
    with pytest.raises(ValueError, match="windows.shards = 12"):
        k.key_shard_tag(3600, 12)
    with pytest.raises(ValueError, match="layout"):
        Keys("sdp", 2, "keys")
