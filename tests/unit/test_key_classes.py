"""A window's count classes over disjoint key shards (``stream_dp/release/key_classes.py``) and the sample drawn
through them (docs/design/key-sharded-counts.md): the window ranks are a bijection onto the shards' ranks
that keeps every key's count; with the same seed the sample draws the same ranks, counts and tokens as over
one sorted set; and the released sample's joint law (each key's token) is exactly Π π_{w,t} -- the
single-shard law -- at S = 1, 2, 12 (chi-square against the exact distribution)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from stream_dp.mechanisms.pws import sanitizer_table
from stream_dp.release.key_classes import ShardedClasses
from stream_dp.release.key_shards import route_by_key_shard
from stream_dp.release.sampling import count_classes, sample_count_classes
from stream_dp.store.keys import key_shard_of

PARAMS = {"scheme": "none", "tau": None, "epsilon": 1.0, "delta": 0.1, "max_keys_per_user": 1}


def _zrange(counts: dict[str, int]) -> list[str]:
    """One Redis sorted set's ``ZRANGE`` order: count, then the key's bytes."""
    return sorted(counts, key=lambda k: (counts[k], k.encode()))


class KeyShards:
    """A window's counts as S key shards, each read in its own ``ZRANGE`` order (what Redis does per shard)."""

    def __init__(self, counts: dict[str, int], shards: int) -> None:
        self.counts = counts
        self.parts = [_zrange({k: counts[k] for k in part}) if part else []
                      for part in (route_by_key_shard(counts, shards).get(j, []) for j in range(shards))]
        self.classes = ShardedClasses.of([sorted(Counter(counts[k] for k in part).items()) for part in self.parts])

    def members_at(self, ranks: np.ndarray, want: np.ndarray) -> list[str]:
        shard, within = self.classes.locate(ranks)
        keys = [self.parts[j][r] for j, r in zip(shard.tolist(), within.tolist())]
        assert [self.counts[k] for k in keys] == np.asarray(want).astype(int).tolist()
        return keys


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=3), st.integers(1, 6), max_size=40), st.sampled_from([1, 2, 3, 12]))
def test_window_ranks_are_a_bijection_onto_the_shards_keeping_counts(counts, shards):
    window = KeyShards(counts, shards)
    one_set = _zrange(counts)
    assert window.classes.histogram() == sorted((float(c), n) for c, n in Counter(counts.values()).items())
    ranks = np.arange(len(counts))
    got = window.members_at(ranks, np.array([counts[k] for k in one_set]))  # the count of each rank checked
    assert sorted(got) == sorted(counts)  # each key at exactly one window rank
    for j, part in enumerate(window.parts):
        assert all(key_shard_of(k, shards) == j for k in part)
    with pytest.raises(ValueError, match="outside"):
        window.classes.locate(np.array([len(counts)]))


def test_the_same_seed_draws_the_same_ranks_counts_and_tokens():
    """Over key shards and over one sorted set, the draw sees the same classes: same ranks, counts and tokens
    for the same seed; only which key of a class sits at a drawn rank differs."""
    rnd = np.random.default_rng(5)
    counts = {f"key-{i}": int(c) for i, c in enumerate(rnd.choice([1, 1, 1, 2, 3, 7, 20], size=300))}
    for shards in (1, 2, 12):
        single = sample_count_classes(count_classes(sorted(Counter(counts.values()).items())),
                                      lambda r, w: [_zrange(counts)[i] for i in r.tolist()], rng=9, **PARAMS)
        window = KeyShards(counts, shards)
        sharded = sample_count_classes(count_classes(window.classes.histogram()), window.members_at, rng=9, **PARAMS)
        assert sorted((r.token, r.estimate, counts[r.key]) for r in sharded.rows) == \
            sorted((r.token, r.estimate, counts[r.key]) for r in single.rows)
        if shards == 1:
            assert sharded.rows == single.rows


SMALL = {"a": 1, "b": 1, "c": 1, "d": 2, "e": 2, "f": 4}  # 3 count classes; keys over several key shards
REPS = 12_000


def _merged(window: KeyShards, gen: np.random.Generator) -> list:
    """The production way: the window's classes summed over the shards, one draw, keys read on their shards."""
    return sample_count_classes(count_classes(window.classes.histogram()), window.members_at, rng=gen, **PARAMS).rows


def _joint(shards: int, reps: int, seed: int, release=_merged) -> Counter:
    """The released sample's joint outcome (each key's token, 0 = not reported) over ``reps`` releases."""
    window = KeyShards(SMALL, shards)
    gen = np.random.default_rng(seed)
    keys = sorted(SMALL)
    out: Counter = Counter()
    for _ in range(reps):
        token = {r.key: r.token for r in release(window, gen)}
        out[tuple(token.get(k, 0) for k in keys)] += 1
    return out


def _exact() -> dict[tuple, float]:
    table = sanitizer_table(**PARAMS)
    probs: dict[tuple, float] = {(): 1.0}
    for k in sorted(SMALL):
        row = table.dense_row(SMALL[k])
        probs = {o + (t,): p * float(row[t]) for o, p in probs.items() for t in range(len(row)) if row[t] > 0}
    return probs


def _gof(observed: Counter, reps: int) -> float:
    exact = _exact()
    if not set(observed) <= set(exact):
        return 0.0  # an impossible outcome
    big = [o for o, p in exact.items() if p * reps >= 5]
    f_obs = [observed.get(o, 0) for o in big] + [reps - sum(observed.get(o, 0) for o in big)]
    f_exp = [exact[o] * reps for o in big] + [reps * (1 - sum(exact[o] for o in big))]
    return float(stats.chisquare(f_obs, f_exp).pvalue)


@pytest.mark.slow  # a statistical audit: chi-square over 3 x 12,000 releases
@pytest.mark.parametrize("shards", [1, 2, 12])
def test_the_sample_over_key_shards_has_the_single_shard_joint_law(shards):
    assert _gof(_joint(shards, REPS, seed=shards), REPS) > 1e-3


def _per_shard_reseeded(window: KeyShards, gen: np.random.Generator) -> list:
    """Broken: each key shard sampled on its own classes, every shard from a generator seeded alike -- the
    shards' draws are then copies of each other (keys of one count in different shards share a token)."""
    seed = int(gen.integers(2**32))
    rows = []
    for part in window.parts:
        if part:
            counts = {k: SMALL[k] for k in part}
            rows += sample_count_classes(count_classes(sorted(Counter(counts.values()).items())),
                                         lambda r, w, part=part: [part[i] for i in r.tolist()],
                                         rng=np.random.default_rng(seed), **PARAMS).rows
    return rows


@pytest.mark.slow
def test_the_law_test_rejects_shards_drawn_from_one_seed():
    assert _gof(_joint(12, REPS, seed=3, release=_per_shard_reseeded), REPS) < 1e-6
