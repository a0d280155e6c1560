"""The generated MovieLens-style stream: deterministic, heavy-tailed, weeks long, MovieLens-shaped."""

from __future__ import annotations

import collections
import csv
import io

import numpy as np
import pytest

from stream_dp.dev.demo_data import CSV_COLUMNS, DAY, DEFAULT_START, daily_popularity, generate_ratings, write_csv


@pytest.fixture(scope="module")
def ratings():
    return generate_ratings(users=1500, movies=800, days=14, seed=3)


def test_same_seed_same_stream_other_seed_other_stream(ratings):
    assert ratings == generate_ratings(users=1500, movies=800, days=14, seed=3)
    assert ratings != generate_ratings(users=1500, movies=800, days=14, seed=4)


def test_sorted_within_the_span_and_one_rating_per_movie_per_session(ratings):
    times = [r.timestamp for r in ratings]
    assert times == sorted(times)
    assert DEFAULT_START <= times[0] and times[-1] < DEFAULT_START + 14 * DAY
    days = {(t - DEFAULT_START) // DAY for t in times}
    assert days == set(range(14)), "every day of the two weeks has ratings"
    assert all(0.5 <= r.rating <= 5.0 and (r.rating * 2).is_integer() for r in ratings)


def test_movie_popularity_is_heavy_tailed(ratings):
    counts = np.array(sorted(collections.Counter(r.movie_id for r in ratings).values(), reverse=True))
    top_share = counts[: len(counts) // 100 or 1].sum() / counts.sum()
    # Zipf(1.05) over 800 movies puts ~25% of the mass on the top 1%; uniform would put 1%
    assert top_share > 0.15, top_share
    assert counts[0] > 30 * np.median(counts)


def test_users_rate_many_movies_with_a_heavy_tail(ratings):
    per_user = np.array(list(collections.Counter(r.user_id for r in ratings).values()))
    assert per_user.max() > 10 * np.median(per_user)
    assert (per_user > 5).mean() > 0.3, "many users exceed a per-window bound of 5 keys over the stream"


def test_trending_releases_change_the_daily_top():
    pop = daily_popularity(500, 20, zipf_exponent=1.05, trending_share=0.05, rng=np.random.default_rng(0))
    assert np.allclose(pop.sum(axis=1), 1.0)
    tops = {tuple(np.argsort(-row)[:5]) for row in pop}
    assert len(tops) > 3, "the top 5 changes over the days"


def test_csv_has_the_movielens_columns(ratings):
    buf = io.StringIO()
    assert write_csv(ratings[:50], buf) == 50
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert tuple(rows[0])[:4] == CSV_COLUMNS[:4] == ("userId", "movieId", "rating", "timestamp")
    assert rows[0]["timestamp"] == str(ratings[0].timestamp)
    titles = {}
    for r in ratings:
        assert titles.setdefault(r.movie_id, r.title) == r.title, "one title per movie"
    assert len(set(titles.values())) == len(titles), "titles are unique"


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="users"):
        generate_ratings(users=0)
    with pytest.raises(ValueError, match="trending_share"):
        generate_ratings(trending_share=2)
