"""The large margin mechanism (CHS14 Algorithm 1) reading a sorted prefix equals the whole-window version draw
for draw: for any counts and seed, :func:`large_margin_argmax_sorted` over a source that gives the top m (a
merge of key shards' tops, as the release reads them) returns what main's whole-window code
(``tests/support/large_margin_oracle.py``) returns on the same counts listed in rank order, and what
:func:`large_margin_argmax` returns on the counts in any order -- ties at the prefix's boundaries, windows
smaller than the first prefix, empty windows and small universes included.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.mechanisms import UNLISTED, large_margin_argmax
from stream_dp.mechanisms._validation import tie_key
from stream_dp.mechanisms.large_margin import large_margin_argmax_sorted
from stream_dp.mechanisms.sorted_scores import ScoresInMemory, SortedPrefix
from stream_dp.release.key_shards import merge_disjoint_top
from stream_dp.store.keys import key_shard_of
from tests.support.large_margin_oracle import main_large_margin_argmax


class MergedShards:
    """Counts split over key shards (``crc32(key) mod S``), each in ``ZREVRANGE`` order; ``top(m)`` is what
    the release's key-layout read returns: each shard's top m merged (:func:`merge_disjoint_top`). Records the
    sizes asked and the members each read took from the shards."""

    def __init__(self, counts: dict[str, float], shards: int) -> None:
        parts: list[list[tuple[str, float]]] = [[] for _ in range(shards)]
        for key, count in counts.items():
            parts[key_shard_of(key, shards)].append((key, float(count)))
        self.parts = [sorted(p, key=lambda kc: (kc[1], kc[0].encode()), reverse=True) for p in parts]
        self.asked: list[int] = []
        self.members_read = 0
        self.keys: list[str] = []

    def top(self, m: int) -> np.ndarray:
        tops = [p[:m] for p in self.parts]
        self.asked.append(m)
        self.members_read += sum(len(t) for t in tops)
        merged = merge_disjoint_top(tops, m)
        self.keys = list(merged)
        return np.array(list(merged.values()), dtype=np.float64)

    def key_at(self, rank: int) -> str:
        return self.keys[rank]


def rank_ordered(counts: dict[str, float]) -> dict[str, float]:
    return dict(sorted(counts.items(), key=lambda kc: (kc[1], tie_key(kc[0])), reverse=True))


def shuffled(counts: dict[str, float], seed: int) -> dict[str, float]:
    items = list(counts.items())
    random.Random(seed).shuffle(items)
    return dict(items)


#: windows: a few large counts over a long run of small ones with many ties (so searches stop at every
#: depth: level 1, inside the first prefix, past one or more doublings, in the implicit phase)
@st.composite
def windows(draw) -> dict[str, float]:
    size = draw(st.sampled_from([0, 1, 2, 5, 40, 255, 256, 257, 258, 300, 513, 514, 515, 900, 1300]))
    tail = draw(st.integers(1, 6))
    heads = draw(st.lists(st.integers(1, 3000), max_size=4))
    counts = [draw(st.integers(0, tail)) for _ in range(max(0, size - len(heads)))] + heads[:size]
    names = draw(st.lists(st.text("abcé", min_size=1, max_size=4), min_size=size, max_size=size, unique=True))
    return dict(zip(names, map(float, counts)))


CASES = dict(counts=windows(), seed=st.integers(0, 2**32 - 1), epsilon=st.sampled_from([0.05, 0.5, 3.0, 40.0, 400.0]),
             n=st.sampled_from([1, 3]), shards=st.sampled_from([1, 2, 12]),
             extra=st.sampled_from([0, 1, 7, 10**6, 10**300]))


@settings(max_examples=400, deadline=None)
@given(**CASES)
def test_the_prefix_version_equals_the_whole_window_version(counts, seed, epsilon, n, shards, extra) -> None:
    universe = len(counts) + extra
    if universe < 1:
        return
    kw = dict(epsilon=epsilon, delta=1e-6, n=n)
    want = main_large_margin_argmax(rank_ordered(counts), universe_size=universe, rng=seed, **kw)
    assert large_margin_argmax(shuffled(counts, seed), universe_size=universe, rng=seed, **kw) == want
    source = MergedShards(counts, shards)
    assert large_margin_argmax_sorted(source, universe_size=universe, rng=seed, **kw) == want
    assert source.asked[0] == 257 and all(b == 2 * a or b > 2 * a for a, b in zip(source.asked, source.asked[1:]))


def test_a_clear_winner_reads_the_first_prefix_only() -> None:
    """10⁵ keys, one of them far ahead: the search stops at level 1 and reads one prefix of 257 per shard."""
    rng = np.random.default_rng(3)
    counts = {f"key-{i}": float(c) for i, c in enumerate(rng.integers(1, 50, 10**5))}
    counts["winner"] = 5000.0
    for shards in (1, 12):
        source = MergedShards(counts, shards)
        got = large_margin_argmax_sorted(source, epsilon=1.0, delta=1e-6, n=1, universe_size=10**30, rng=7)
        assert got == "winner" == main_large_margin_argmax(rank_ordered(counts), epsilon=1.0, delta=1e-6, n=1,
                                                           universe_size=10**30, rng=7)
        assert source.asked == [257] and source.members_read == 257 * shards


def test_a_deep_search_extends_the_prefix_by_doubling() -> None:
    """A run of 2000 near-equal counts under a lead the noise must find: levels past the first prefix are
    reached by doubling, and the result is still main's."""
    counts = {f"k{i:05d}": float(1000 - i // 400) for i in range(3000)}
    for seed in range(40):
        source = MergedShards(counts, 2)
        kw = dict(epsilon=30.0, delta=1e-6, n=1, universe_size=10**9, rng=seed)
        assert large_margin_argmax_sorted(source, **kw) == main_large_margin_argmax(rank_ordered(counts), **kw)
        if len(source.asked) > 1:
            break
    else:
        pytest.fail("no seed took the search past the first prefix")
    assert source.asked[:2] == [257, 514]


def test_no_clear_winner_reads_to_the_end_and_may_draw_an_unlisted_item() -> None:
    counts = {f"k{i}": 1.0 for i in range(700)}
    source = MergedShards(counts, 2)
    kw = dict(epsilon=1.0, delta=1e-6, n=1, universe_size=10**30, rng=5)
    got = large_margin_argmax_sorted(source, **kw)
    assert got is UNLISTED and got is main_large_margin_argmax(rank_ordered(counts), **kw)
    assert source.asked == [257, 514, 1028]  # the last one came back short: the whole window


def test_a_window_that_changes_between_reads_is_refused() -> None:
    class Changing:
        calls = 0

        def top(self, m: int) -> np.ndarray:
            self.calls += 1
            return np.full(min(m, 1000), 10.0 - self.calls)

        def key_at(self, rank: int) -> str:
            return "k"

    with pytest.raises(RuntimeError, match="closed window"):
        prefix = SortedPrefix(Changing(), first=4)
        prefix.upto(4)
        prefix.upto(100)


def test_scores_in_memory_resolve_a_rank_in_the_tie_order() -> None:
    scores = ScoresInMemory(["a", "c", "b", "d"], np.array([2.0, 2.0, 2.0, 5.0]))
    assert list(scores.top(3)) == [5.0, 2.0, 2.0]
    assert [scores.key_at(r) for r in range(4)] == ["d", "c", "b", "a"]
