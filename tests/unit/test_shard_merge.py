"""The exact merge of window shards: top-n of the summed counts (threshold algorithm) vs brute force."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.store.keys import SHARD_HASH, shard_of
from stream_dp.release.shard_merge import merged_top, rank_key

KEYS = [f"k{i}" for i in range(40)]


def _shards(draw_counts: list[dict[str, int]]):
    """Per shard, members in Redis ZREVRANGE order (count desc, then key bytes desc)."""
    return [sorted(((k, float(c)) for k, c in shard.items()), key=rank_key, reverse=True) for shard in draw_counts]


def _brute_force(shards: list[dict[str, int]], n: int) -> dict[str, float]:
    total: Counter[str] = Counter()
    for shard in shards:
        total.update(shard)
    return dict(sorted(((k, float(c)) for k, c in total.items()), key=rank_key, reverse=True)[:n])


def _top(shards: list[dict[str, int]], n: int, first_chunk: int | None = None) -> tuple[dict[str, float], int]:
    ordered = _shards(shards)

    def read_desc(j: int, first: int, last: int):
        return ordered[j][first:last + 1]

    def sums_of(keys: list[str]) -> list[float]:
        return [float(sum(s.get(k, 0) for s in shards)) for k in keys]

    return merged_top(n, len(shards), read_desc, sums_of, first_chunk=first_chunk)


shard_counts = st.dictionaries(st.sampled_from(KEYS), st.integers(1, 6), max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.lists(shard_counts, min_size=1, max_size=6), st.integers(1, 45), st.one_of(st.none(), st.integers(1, 5)))
def test_merged_top_equals_the_top_of_the_brute_force_sum(shards, n, first_chunk):
    """Many ties (counts 1..6 over 40 keys), keys in several shards, n beyond the key count: the merge is
    the brute-force top n of the summed counts, in order, with Redis's tie-break."""
    top, _ = _top(shards, n, first_chunk)
    want = _brute_force(shards, n)
    assert list(top.items()) == list(want.items())


def test_a_key_second_everywhere_beats_one_first_in_one_shard():
    """The per-shard tops (k0, k1, k2 with 10) would miss 'x' (9 + 9 + 9 = 27): the merge does not."""
    shards = [{"k0": 10, "x": 9}, {"k1": 10, "x": 9}, {"k2": 10, "x": 9}]
    top, _ = _top(shards, 1, first_chunk=1)
    assert top == {"x": 27.0}


def test_a_tie_at_the_threshold_is_not_decided_by_what_was_read():
    """'b' (2 + 0) and the unread 'u' (1 + 1) tie at the threshold 2 after the first round; Redis's order puts
    'u' first. Stopping at "n-th best >= threshold" would return 'b': the stop must be strict."""
    shards = [{"b": 2, "x": 1, "u": 1}, {"y": 1, "w": 1, "u": 1}]
    top, _ = _top(shards, 1, first_chunk=2)
    assert top == {"u": 2.0} == _brute_force(shards, 1)


def test_the_merge_reads_only_the_heads_of_skewed_shards():
    """A skewed window: the top 10 is found without reading most of the 3 × 5000 members."""
    shards = [{f"k{i}": max(1, 5000 // (i + 1)) + j for i in range(5000)} for j in range(3)]
    top, read = _top(shards, 10)
    assert list(top) == [f"k{i}" for i in range(10)]
    assert read < 200


def test_the_shard_hash_is_stable_and_named():
    """CRC-32 of the UTF-8 bytes: fixed values (never Python's per-process salted hash), spread over shards."""
    assert SHARD_HASH == "crc32-utf8"
    assert [shard_of(u, 12) for u in ("alice", "bob", "user-1", "é")] == [11, 8, 8, 2]
    spread = Counter(shard_of(f"user-{i}", 12) for i in range(12_000))
    assert len(spread) == 12 and max(spread.values()) < 1.15 * min(spread.values())
    assert shard_of("anyone", 1) == 0
