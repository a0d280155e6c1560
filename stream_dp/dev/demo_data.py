"""A MovieLens-style ratings stream, generated in-tree so the demo needs no download.

The shape follows MovieLens' ``ratings.csv`` (columns ``userId,movieId,rating,timestamp``, one row per
rating, timestamps in epoch seconds; plus a ``title`` column, made-up titles that read better in the demo
than ids) and the traits that matter for heavy hitters:

- **heavy-tailed movie popularity**: a Zipf law over movie ranks (exponent ``zipf_exponent``), so a few
  movies collect most ratings and the long tail is rated by a handful of users;
- **trending releases**: a share of the movies is "released" on a day of the stream and is hot for a few
  days (popularity boost decaying exponentially), so the top-k changes from window to window;
- **heavy-tailed user activity**: users rate in sessions; the number of sessions per user is log-normal
  and a session holds a geometric number of distinct movies, so some users rate hundreds of movies (their
  contribution is what the per-window bound ``max_keys_per_user`` cuts);
- **time over weeks** with a daily rhythm (more ratings in the evening, UTC).

Everything is drawn from ``numpy.random.default_rng(seed)``: the same arguments give the same stream.

>>> ratings = generate_ratings(users=50, movies=40, days=2, seed=1)
>>> ratings == generate_ratings(users=50, movies=40, days=2, seed=1)
True
>>> all(a.timestamp <= b.timestamp for a, b in zip(ratings, ratings[1:]))
True
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO

import numpy as np

CSV_COLUMNS = ("userId", "movieId", "rating", "timestamp", "title")
DEFAULT_START = 1_793_577_600  # 2026-11-02 00:00:00 UTC, a Monday; fixed so a seed pins the whole stream
DAY = 86_400


@dataclass(frozen=True, order=True)
class Rating:
    """One rating event: ``user_id`` rated ``movie_id`` with ``rating`` stars at ``timestamp`` (epoch s)."""

    timestamp: int
    user_id: int
    movie_id: int
    rating: float
    title: str = ""

    def as_row(self) -> dict[str, str]:
        """The MovieLens ``ratings.csv`` row (plus ``title``)."""
        return {"userId": str(self.user_id), "movieId": str(self.movie_id),
                "rating": f"{self.rating:.1f}", "timestamp": str(self.timestamp), "title": self.title}


def _check(name: str, value: float, low: float) -> None:
    if not value >= low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


_ADJECTIVES = ("Silent", "Crimson", "Last", "Hidden", "Broken", "Golden", "Midnight", "Lost", "Electric", "Wild",
               "Frozen", "Distant", "Burning", "Secret", "Quiet", "Hollow", "Restless", "Paper", "Iron", "Velvet")
_NOUNS = ("River", "Harbor", "Empire", "Garden", "Signal", "Orchard", "Machine", "Kingdom", "Summer", "Mirror",
          "Horizon", "Station", "Letter", "Circus", "Forest", "Island", "Winter", "Lighthouse", "Archive", "Echo")
_NAMES = ("Ada", "Oscar", "Mira", "Jonah", "Lena", "Felix", "Nora", "Hugo", "Iris", "Theo")


def movie_titles(movies: int, seed: int) -> list[str]:
    """Made-up, unique titles "The Silent River (1994)" for movie ids 1..movies, fixed by ``seed``.

    >>> movie_titles(3, seed=1) == movie_titles(3, seed=1)
    True
    """
    rng = np.random.default_rng([seed, 0x7117E])
    titles: list[str] = []
    used: set[str] = set()
    for _ in range(movies):
        a, n, m = (_ADJECTIVES[rng.integers(len(_ADJECTIVES))], _NOUNS[rng.integers(len(_NOUNS))],
                   _NAMES[rng.integers(len(_NAMES))])
        form = rng.integers(4)
        base = (f"The {a} {n}" if form == 0 else f"{n} of the {a} {_NOUNS[rng.integers(len(_NOUNS))]}" if form == 1
                else f"{m}'s {n}" if form == 2 else f"{a} {n}")
        title = f"{base} ({rng.integers(1950, 2027)})"
        while title in used:
            title = f"{base} ({rng.integers(1950, 2027)})"
        used.add(title)
        titles.append(title)
    return titles


def daily_popularity(movies: int, days: int, *, zipf_exponent: float, trending_share: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Probability of each movie per day, shape ``(days, movies)``; every row sums to 1.

    Base weight of the movie of popularity rank ``r`` (1-based) is ``r ** -zipf_exponent``. A
    ``trending_share`` of the movies gets a release day; from that day on its weight is multiplied by
    ``1 + boost * exp(-(day - release) / 2)`` with a boost large enough to reach the top ten; before it
    the movie is rarely rated (weight / 20).
    """
    ranks = rng.permutation(movies) + 1  # movie id order is not popularity order
    base = ranks.astype(float) ** -zipf_exponent
    weights = np.tile(base, (days, 1))
    n_trending = int(round(trending_share * movies))
    if n_trending and days > 1:
        chosen = rng.choice(movies, size=n_trending, replace=False)
        release_day = rng.integers(0, days, size=n_trending)
        # a boost that puts a fresh release near the base weight of ranks 1..20
        target = rng.uniform(1.0, 20.0, size=n_trending) ** -zipf_exponent
        day_index = np.arange(days)[:, None]
        age = day_index - release_day[None, :]
        boost = np.where(age >= 0, 1.0 + (target / base[chosen] - 1.0) * np.exp(-np.maximum(age, 0) / 2.0), 0.05)
        weights[:, chosen] = base[chosen][None, :] * np.maximum(boost, 0.05)
    return weights / weights.sum(axis=1, keepdims=True)


def generate_ratings(*, users: int = 6000, movies: int = 3000, days: int = 28, seed: int = 7,
                     start: int = DEFAULT_START, zipf_exponent: float = 1.05, trending_share: float = 0.02,
                     mean_log_sessions: float = 1.2, ratings_per_session: float = 7.0) -> list[Rating]:
    """Generate a ratings stream sorted by timestamp (ties broken by user, then movie).

    ``users`` rate ``movies`` over ``days`` days from ``start`` (epoch seconds). Sessions per user:
    ``1 + floor(LogNormal(mean_log_sessions, 1))``; distinct movies per session: geometric with mean
    ``ratings_per_session`` (capped at 60); a movie is rated at most once per session. The default
    arguments give about 10,000 ratings a day from about 1,400 sessions.
    """
    for name, value, low in (("users", users, 1), ("movies", movies, 2), ("days", days, 1),
                             ("zipf_exponent", zipf_exponent, 0.0), ("ratings_per_session", ratings_per_session, 1.0)):
        _check(name, value, low)
    if not 0 <= trending_share <= 1:
        raise ValueError(f"trending_share must be in [0, 1], got {trending_share!r}")
    rng = np.random.default_rng(seed)
    popularity = daily_popularity(movies, days, zipf_exponent=zipf_exponent, trending_share=trending_share, rng=rng)
    cdf = np.cumsum(popularity, axis=1)
    cdf[:, -1] = 1.0
    quality = np.clip(rng.normal(3.5, 0.5, size=movies), 1.0, 4.8)  # each movie's mean rating

    # sessions scale with the length of the stream (the defaults are calibrated on four weeks)
    sessions_per_user = 1 + np.floor(rng.lognormal(mean_log_sessions, 1.0, size=users) * days / 28).astype(int)
    session_user = np.repeat(np.arange(1, users + 1), np.minimum(sessions_per_user, 40 * days))
    n_sessions = session_user.size
    session_day = rng.integers(0, days, size=n_sessions)
    # daily rhythm: hour of day from a mixture peaking at 20:00 UTC
    hour = np.where(rng.random(n_sessions) < 0.6, rng.normal(20.0, 2.5, n_sessions), rng.uniform(0, 24, n_sessions))
    second_of_day = np.clip(hour, 0, 23.99) * 3600.0
    session_start = start + session_day * DAY + second_of_day
    length = np.minimum(rng.geometric(1.0 / ratings_per_session, size=n_sessions), 60)

    event_session = np.repeat(np.arange(n_sessions), length)
    movie_index = np.empty(event_session.size, dtype=np.int64)
    draws = rng.random(event_session.size)
    for day in range(days):  # inverse-CDF sampling, one vectorised pass per day
        mask = session_day[event_session] == day
        movie_index[mask] = np.searchsorted(cdf[day], draws[mask], side="right")
    np.minimum(movie_index, movies - 1, out=movie_index)
    gaps = rng.exponential(90.0, size=event_session.size)  # seconds between ratings in a session
    offsets = np.cumsum(gaps)
    first = np.concatenate(([0], np.cumsum(length)[:-1]))
    offsets -= np.repeat(offsets[first] - gaps[first], length)  # restart the clock at every session
    times = np.minimum(session_start[event_session] + offsets, start + days * DAY - 1).astype(np.int64)
    stars = np.clip(np.round(rng.normal(quality[movie_index], 0.9) * 2) / 2, 0.5, 5.0)

    titles = movie_titles(movies, seed)
    seen: set[tuple[int, int]] = set()
    out: list[Rating] = []
    for s, m, t, r in zip(event_session.tolist(), movie_index.tolist(), times.tolist(), stars.tolist()):
        if (s, m) in seen:  # one rating per movie per session
            continue
        seen.add((s, m))
        out.append(Rating(timestamp=t, user_id=int(session_user[s]), movie_id=m + 1, rating=r, title=titles[m]))
    out.sort()
    return out


def write_csv(ratings: Iterable[Rating], out: TextIO | str | os.PathLike[str]) -> int:
    """Write MovieLens-style ``ratings.csv`` (with header); returns the number of rows."""
    if isinstance(out, (str, os.PathLike)):
        with open(out, "w", newline="", encoding="utf-8") as fh:
            return write_csv(ratings, fh)
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    n = 0
    for rating in ratings:
        writer.writerow(rating.as_row())
        n += 1
    return n


def rows(ratings: Iterable[Rating]) -> Iterator[dict[str, str]]:
    """The ratings as ``ratings.csv`` rows (what :mod:`stream_dp.replay` reads from a file)."""
    for rating in ratings:
        yield rating.as_row()
