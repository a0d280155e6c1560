"""Evaluation data: bounding equals a plain reference implementation; MovieLens parsing; determinism."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.data import Stream, bounded_histogram, bounded_mask, load_movielens, window_histograms, zipf_stream


def _reference_counts(events, max_keys, window_size):
    """First Δ distinct keys per (window, user) in offset order, one count per (window, user, key)."""
    kept: dict[tuple[int, int], list[int]] = defaultdict(list)
    counts: dict[int, Counter] = defaultdict(Counter)
    for user, key, ts in events:
        w = ts - ts % window_size if window_size else 0
        seen = kept[(w, user)]
        if key in seen or len(seen) >= max_keys:
            continue
        seen.append(key)
        counts[w][key] += 1
    return counts


events_strategy = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9), st.integers(0, 50)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(events=events_strategy, max_keys=st.integers(1, 4), window_size=st.sampled_from([None, 7, 20]))
def test_bounding_matches_reference(events, max_keys, window_size):
    arr = np.array(events, dtype=np.int64).reshape(-1, 3)
    stream = Stream("t", arr[:, 0], arr[:, 1], arr[:, 2], 10, np.arange(10))
    expected = _reference_counts(events, max_keys, window_size)
    if window_size is None:
        hist = bounded_histogram(stream, max_keys)
        assert dict(zip(hist.keys.tolist(), hist.counts.tolist())) == dict(expected.get(0, {}))
        assert bounded_mask(stream, max_keys).sum() == sum(expected.get(0, Counter()).values())
    else:
        got = window_histograms(stream, max_keys, window_size)
        assert {w: dict(zip(h.keys.tolist(), h.counts.tolist())) for w, h in got.items()} == \
            {w: dict(c) for w, c in expected.items() if c}


def test_histogram_orders_by_count_then_key_and_drops_zeros():
    stream = Stream("t", np.array([1, 2, 3, 1]), np.array([4, 4, 2, 2]), np.zeros(4, int), 6, np.arange(6))
    hist = bounded_histogram(stream, 5)
    assert hist.keys.tolist() == [2, 4] and hist.counts.tolist() == [2, 2]
    assert hist.kth(2) == 2 and hist.kth(3) == 0
    assert hist.dense().tolist() == [0, 0, 2, 0, 2, 0]
    assert hist.top_mapping(1) == {"2": 2}
    unbounded = bounded_histogram(stream, None)
    assert unbounded.counts.tolist() == [2, 2]


def test_load_movielens_orders_by_time_and_indexes_the_catalogue(tmp_path):
    (tmp_path / "ratings.csv").write_text(
        "userId,movieId,rating,timestamp\n1,10,4.0,300\n1,30,3.5,100\n2,10,5.0,200\n", encoding="utf-8")
    (tmp_path / "movies.csv").write_text(
        'movieId,title,genres\n10,"Heat, The (1995)",Drama\n20,Film,Comedy\n30,Other,Drama\n', encoding="utf-8")
    s = load_movielens(tmp_path)
    assert s is not None and s.universe == 3
    assert s.ts.tolist() == [100, 200, 300]
    assert s.key_labels[s.key].tolist() == [30, 10, 10]
    assert s.user.tolist() == [1, 2, 1]
    assert load_movielens(tmp_path / "missing") is None


def test_zipf_stream_is_deterministic_and_skewed():
    a = zipf_stream(n_users=300, universe=200, seed=3)
    b = zipf_stream(n_users=300, universe=200, seed=3)
    assert np.array_equal(a.key, b.key) and np.array_equal(a.ts, b.ts)
    hist = bounded_histogram(a, 5)
    assert hist.keys[0] == 0  # the Zipf head is the most popular key
    with pytest.raises(ValueError):
        zipf_stream(n_users=0, universe=10)
    with pytest.raises(ValueError, match="max_keys_per_user"):
        bounded_mask(a, 0)
