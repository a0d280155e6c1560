"""Evaluation data: MovieLens ratings or a synthetic Zipf stream, bounded per user as ingest bounds them.

A stream is a sequence of (user, key, event time) in *offset order* (the order a producer would write it
to Kafka). Contribution bounding follows docs/ingest.md: per window, a user counts at most once per key
(L∞ = 1) and for at most ``max_keys_per_user`` distinct keys (L0 = Δ); extra keys are dropped
deterministically, first seen in offset order. A key's count is the number of distinct bounded users.

MovieLens (``ratings.csv``: userId, movieId, rating, timestamp) is replayed in event-time order (ties in
file order); user = userId, key = movieId. The synthetic stream needs no files: users draw keys from a
Zipf law over a known universe, which makes the tiny-scale test independent of ``/work/shared``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_MOVIELENS = Path(os.environ.get("STREAM_DP_MOVIELENS", "/work/shared/data/movielens-small"))


@dataclass(frozen=True)
class Stream:
    """Events in offset order: parallel integer arrays ``user``, ``key``, ``ts`` (epoch seconds).

    ``universe`` is the number of possible keys (key ids are ``0 .. universe-1`` after :func:`load_movielens`
    re-indexes the catalogue) -- only the full-domain baseline may use it; stream-dp never does.
    """

    name: str
    user: np.ndarray
    key: np.ndarray
    ts: np.ndarray
    universe: int
    key_labels: np.ndarray  # key id -> original label (movieId or synthetic index), for readable output

    def __post_init__(self) -> None:
        n = len(self.user)
        if len(self.key) != n or len(self.ts) != n:
            raise ValueError("user, key and ts must have the same length")
        if n and (self.key.min() < 0 or self.key.max() >= self.universe):
            raise ValueError(f"key ids must lie in [0, universe={self.universe})")

    def __len__(self) -> int:
        return len(self.user)


@dataclass(frozen=True)
class Histogram:
    """Bounded counts of one window, sorted by count descending (ties: smaller key id first).

    Only keys with a positive count are present: that is all the data holds (the domain is unknown).
    """

    keys: np.ndarray  # key ids, best first
    counts: np.ndarray  # distinct bounded users per key, non-increasing
    universe: int

    @classmethod
    def from_arrays(cls, keys: np.ndarray, counts: np.ndarray, universe: int) -> "Histogram":
        keys = np.asarray(keys, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        positive = counts > 0
        keys, counts = keys[positive], counts[positive]
        order = np.lexsort((keys, -counts))
        return cls(keys[order], counts[order], universe)

    def __len__(self) -> int:
        return len(self.keys)

    def kth(self, k: int) -> int:
        """The k-th largest count (0 when fewer than k keys are present)."""
        return int(self.counts[k - 1]) if k <= len(self.counts) else 0

    def dense(self) -> np.ndarray:
        """Counts over the whole universe (zeros for absent keys) -- for the full-domain baseline."""
        out = np.zeros(self.universe, dtype=np.int64)
        out[self.keys] = self.counts
        return out

    def top_mapping(self, n: int) -> dict[str, int]:
        """The top ``n`` keys as the ``Mapping[str, int]`` stream-dp's mechanisms take (keys as strings)."""
        return {str(k): int(c) for k, c in zip(self.keys[:n], self.counts[:n])}


def load_movielens(directory: Path | str = DEFAULT_MOVIELENS) -> Stream | None:
    """MovieLens ratings in event-time order, or ``None`` when the file is absent.

    Key ids index the catalogue ``movies.csv`` (all movies, rated or not): that catalogue is the "known
    domain" the full-domain baseline needs; movies rated but missing from it are appended.
    """
    directory = Path(directory)
    ratings = directory / "ratings.csv"
    if not ratings.is_file():
        return None
    raw = np.loadtxt(ratings, delimiter=",", skiprows=1, usecols=(0, 1, 3), dtype=np.int64, ndmin=2)
    user, movie, ts = raw[:, 0], raw[:, 1], raw[:, 2]
    catalogue = np.array([], dtype=np.int64)
    movies = directory / "movies.csv"
    if movies.is_file():
        catalogue = _movie_ids(movies)
    labels = np.union1d(catalogue, movie)
    key = np.searchsorted(labels, movie)
    order = np.argsort(ts, kind="stable")
    return Stream("movielens", user[order], key[order], ts[order], len(labels), labels)


def _movie_ids(path: Path) -> np.ndarray:
    """First column of movies.csv (titles contain commas and quotes, so parse the id only)."""
    ids = []
    with open(path, encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            head = line.split(",", 1)[0]
            if head.strip():
                ids.append(int(head))
    return np.asarray(ids, dtype=np.int64)


def zipf_stream(
    *,
    n_users: int,
    universe: int,
    exponent: float = 1.1,
    events_per_user: int = 30,
    seed: int = 0,
    span_seconds: int = 365 * 86400,
    start: int = 1_700_006_400,
) -> Stream:
    """A synthetic stream: each user draws ``events_per_user`` keys i.i.d. from Zipf(``exponent``) over
    ``universe`` keys (repeats allowed, so distinct keys per user vary), at uniform random event times.

    >>> s = zipf_stream(n_users=50, universe=100, seed=1)
    >>> len(s), s.universe, int(s.key.max()) < 100
    (1500, 100, True)
    """
    if n_users < 1 or universe < 2 or events_per_user < 1:
        raise ValueError("n_users, events_per_user must be >= 1 and universe >= 2")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, universe + 1, dtype=float) ** -exponent
    weights /= weights.sum()
    n = n_users * events_per_user
    key = rng.choice(universe, size=n, p=weights)
    user = np.repeat(np.arange(n_users, dtype=np.int64), events_per_user)
    ts = start + rng.integers(0, span_seconds, size=n)
    order = np.argsort(ts, kind="stable")
    return Stream(f"zipf{exponent:g}", user[order], key[order], ts[order], universe, np.arange(universe))


def bounded_mask(stream: Stream, max_keys_per_user: int, window_size: int | None = None) -> np.ndarray:
    """Which events count after bounding: per (window, user), the first occurrence of each of the first
    ``max_keys_per_user`` distinct keys in offset order. ``window_size=None``: the whole stream is one window.

    >>> s = Stream("t", np.array([1, 1, 1, 1, 2]), np.array([0, 0, 1, 2, 0]), np.zeros(5, int), 3, np.arange(3))
    >>> bounded_mask(s, 2).tolist()
    [True, False, True, False, True]
    """
    if max_keys_per_user < 1:
        raise ValueError(f"max_keys_per_user must be >= 1, got {max_keys_per_user!r}")
    n = len(stream)
    window = np.zeros(n, dtype=np.int64) if window_size is None else stream.ts - stream.ts % window_size
    # first occurrence of each (window, user, key) in offset order
    idx = np.arange(n)
    order = np.lexsort((idx, stream.key, stream.user, window))
    w, u, k = window[order], stream.user[order], stream.key[order]
    new_triple = np.ones(n, dtype=bool)
    new_triple[1:] = (w[1:] != w[:-1]) | (u[1:] != u[:-1]) | (k[1:] != k[:-1])
    first = np.zeros(n, dtype=bool)
    first[order[new_triple]] = True
    # rank of each first occurrence among its (window, user)'s first occurrences, in offset order
    cand = np.flatnonzero(first)
    order2 = np.lexsort((cand, stream.user[cand], window[cand]))
    c = cand[order2]
    wu_new = np.ones(len(c), dtype=bool)
    wu_new[1:] = (window[c][1:] != window[c][:-1]) | (stream.user[c][1:] != stream.user[c][:-1])
    group_start = np.maximum.accumulate(np.where(wu_new, np.arange(len(c)), 0))
    rank = np.arange(len(c)) - group_start
    keep = np.zeros(n, dtype=bool)
    keep[c[rank < max_keys_per_user]] = True
    return keep


def bounded_histogram(stream: Stream, max_keys_per_user: int | None) -> Histogram:
    """Counts of distinct bounded users per key over the whole stream (``None``: no L0 bound, L∞ = 1)."""
    delta = max_keys_per_user if max_keys_per_user is not None else np.iinfo(np.int64).max
    keep = bounded_mask(stream, int(min(delta, 2**62)))
    counts = np.bincount(stream.key[keep], minlength=stream.universe)
    return Histogram.from_arrays(np.arange(stream.universe), counts, stream.universe)


def window_histograms(stream: Stream, max_keys_per_user: int, window_size: int) -> dict[int, Histogram]:
    """Bounded counts per tumbling event-time window (start = ts - ts mod size), keyed by window start."""
    keep = bounded_mask(stream, max_keys_per_user, window_size)
    starts = (stream.ts - stream.ts % window_size)[keep]
    keys = stream.key[keep]
    out: dict[int, Histogram] = {}
    for start in np.unique(starts):
        sel = starts == start
        counts = np.bincount(keys[sel], minlength=stream.universe)
        out[int(start)] = Histogram.from_arrays(np.arange(stream.universe), counts, stream.universe)
    return out
