"""Private weighted sampling of a window: per key over its arrays, or per count class reading only the sample.

:func:`stream_dp.mechanisms.private_weighted_sample` takes a mapping and draws the keys' tokens in
``tie_key`` order (so that a fixed seed gives the same sample whatever the input order); on a 10⁶-key window
that Python sort dominates the release. Here the same mechanism -- the same Algorithm-4 sanitizer table at
(ε/Δ, δ/Δ) (:func:`stream_dp.mechanisms.pws.sanitizer_table`), the same vectorised token draw
(``SanitizerTable.sample_tokens``), the same estimator and the same :class:`SampleResult` and DP event --
runs on the window's arrays in the order the reader returned them (``ZRANGE`` order, deterministic).

Privacy and distribution are unchanged: each key's token is an independent draw from row π_{w,·} of its
own count, so which uniform variate is used for which key does not change the joint distribution of the
output (only the seed-to-sample mapping). Tests check that for keys given in ``tie_key`` order the result
equals ``private_weighted_sample`` with the same seed, row for row.

:func:`sample_count_classes` (what the release worker uses) draws the same distribution from the window's
count histogram alone -- every key of one count has the same token distribution -- and reads only the keys it
reports, so a 10⁶-key window costs a histogram (one short Lua walk over the distinct counts) and a few
thousand rank lookups instead of a read of every key.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import tie_key
from stream_dp.mechanisms.pws import SampleResult, SampleRow, sanitizer_table
from stream_dp.mechanisms.pws_estimators import estimator_for
from stream_dp.mechanisms.pws_tables import SanitizerTable
from stream_dp.rng import make_rng


def sample_arrays(keys: list[str], counts: np.ndarray, *, scheme: str, tau: float | None, epsilon: float,
                  delta: float, max_keys_per_user: int, rng: Any = None, estimator: str = "mle") -> SampleResult:
    """``private_weighted_sample`` over parallel arrays (keys, integer counts ≥ 0); (ε, δ)-DP user-level."""
    counts = np.asarray(counts, dtype=np.float64)
    if len(keys) != len(counts):
        raise ValueError(f"keys and counts differ in length ({len(keys)} != {len(counts)})")
    if not np.all(np.isfinite(counts)) or np.any(counts < 0) or np.any(counts != np.floor(counts)):
        raise ValueError("counts must be finite non-negative integers (numbers of distinct users)")
    table = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta,
                            max_keys_per_user=max_keys_per_user)
    estimates = estimator_for(table, kind=estimator)
    generator = make_rng(rng)
    present = np.flatnonzero(counts >= 1)
    tokens = table.sample_tokens(counts[present].astype(np.int64), generator)
    hit = np.flatnonzero(tokens > 0)
    rows = [SampleRow(keys[int(present[i])], int(tokens[i]), estimates.estimate(int(tokens[i]))) for i in hit]
    rows.sort(key=lambda r: (-r.token, tie_key(r.key)))
    return SampleResult(rows=rows, scheme=scheme, tau=table.scheme.tau, epsilon=float(epsilon), delta=float(delta),
                        max_keys_per_user=int(max_keys_per_user), estimator=estimator)


# ------------------------------------------------------------------------------ per count class
@dataclass(frozen=True)
class CountClass:
    """The keys of a window that share one count: ``size`` keys with count ``count``, occupying ranks
    ``first .. first + size - 1`` of the window in ``ZRANGE`` order (ascending score, then member)."""

    count: int
    size: int
    first: int


def count_classes(histogram: Iterable[tuple[float, int]]) -> list[CountClass]:
    """Count classes from ``(count, number of keys)`` pairs in ascending count order (a sorted set's order).

    Raises ``ValueError`` for a count that is not a finite non-negative integer, and for a histogram that
    is not strictly ascending (it would not describe the ranks of a sorted set).
    """
    pairs = list(histogram)
    if not pairs:
        return []
    # checked as arrays (one pass in numpy, not ~600 Python comparisons), then the first failing class named
    values = np.array([float(c) for c, _ in pairs], dtype=np.float64)
    sizes_in = [size for _, size in pairs]
    bad_count = ~np.isfinite(values) | (values < 0) | (values != np.floor(np.where(np.isfinite(values), values, 0)))
    if bad_count.any():
        raise ValueError("counts must be finite non-negative integers (numbers of distinct users)")
    descending = np.flatnonzero(np.diff(values) <= 0)
    if len(descending):
        j = int(descending[0]) + 1
        raise ValueError(f"count classes must be strictly ascending ({values[j]:g} after {values[j - 1]:g})")
    sizes = np.array([int(n) for n in sizes_in], dtype=np.int64)
    small = np.flatnonzero(sizes < 1)
    if len(small):
        raise ValueError(f"a count class has at least one key, got {sizes_in[int(small[0])]!r}")
    firsts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return [CountClass(c, n, f) for c, n, f in zip(values.astype(np.int64).tolist(), sizes.tolist(), firsts.tolist())]


@dataclass(frozen=True)
class ClassDraw:
    """The reported keys of a window by rank: parallel arrays (rank in ``ZRANGE`` order, count, token ≥ 1)."""

    ranks: np.ndarray
    counts: np.ndarray
    tokens: np.ndarray


def draw_by_count_class(classes: list[CountClass], table: SanitizerTable, generator: np.random.Generator) -> ClassDraw:
    """Which keys are reported and with which token, drawn one count class at a time.

    Algorithm 4 of CGSS21 gives every key of count w an independent token from row π_{w,·}: token 0
    (not reported) with probability 1 - π_w, token t ≥ 1 with probability π_{w,t}. Keys of one class are
    exchangeable, so the same joint distribution is drawn as: the number of reported keys of the class,
    M_w ~ Binomial(n_w, π_w); which ones, a uniformly random M_w-subset of the class's ranks; their tokens,
    independently from π_{w,t} / π_w (t ≥ 1). For every fixed assignment of tokens to the n_w keys with m
    reported ones, both ways give the probability Π_keys π_{w,token} (binomial (n_w choose m) π_w^m (1-π_w)^(n_w-m)
    times 1 / (n_w choose m) times Π_reported π_{w,t}/π_w). Only the reported keys then need to be read
    (:meth:`stream_dp.release.windows.WindowReader.members_at`); cost O(#classes + #reported).
    """
    live = [c for c in classes if c.count >= 1]  # count 0: never reported (π_0 = 0)
    empty = np.zeros(0, dtype=np.int64)
    if not live:
        return ClassDraw(empty, empty.copy(), empty.copy())
    values = np.array([c.count for c in live], dtype=np.int64)
    sizes = np.array([c.size for c in live], dtype=np.int64)
    firsts = np.array([c.first for c in live], dtype=np.int64)
    pis = np.clip(table.reporting_probabilities(values), 0.0, 1.0)
    reported = generator.binomial(sizes, pis).astype(np.int64)  # M_w for every class at once
    hit = np.flatnonzero(reported > 0)
    if len(hit) == 0:
        return ClassDraw(empty, empty.copy(), empty.copy())
    # which keys: the whole class when all of it is reported, else a uniform M_w-subset of its ranks; the
    # output lists the hit classes in ascending count order (the classes' slots: ``at``)
    m_hit = reported[hit]
    at = np.concatenate(([0], np.cumsum(m_hit)[:-1]))
    ranks = np.empty(int(m_hit.sum()), dtype=np.int64)
    whole = reported[hit] == sizes[hit]
    if whole.any():  # every rank of these classes, filled at once: first_j + 0 .. n_j - 1 at slot at_j ..
        lens = m_hit[whole]
        slot = np.repeat(at[whole], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
        ranks[slot] = np.repeat(firsts[hit][whole], lens) + (slot - np.repeat(at[whole], lens))
    for j, a in zip(hit[~whole].tolist(), at[~whole].tolist()):  # partial classes, in class order (RNG order)
        m, n = int(reported[j]), int(sizes[j])
        ranks[a:a + m] = firsts[j] + np.asarray(generator.choice(n, size=m, replace=False), dtype=np.int64)
    counts = np.repeat(values[hit], m_hit)
    return ClassDraw(ranks, counts, conditional_tokens(table, counts, generator))


def conditional_tokens(table: SanitizerTable, counts: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """One token ≥ 1 per (reported) key, independently from π_{w,t} / π_w, t ≥ 1, for its count w.

    Counts at or beyond the table's saturation k draw from row k and add w - k (the rows there are exact
    shifts, :mod:`stream_dp.mechanisms.pws_tables`); beyond a non-saturating table's cap, row cap serves.
    """
    tokens = np.zeros(len(counts), dtype=np.int64)
    if len(counts) == 0:
        return tokens
    table.extend_to(min(int(counts.max()), table.max_frequency))
    eff = counts if table.saturation is not None else np.minimum(counts, table.max_frequency)
    base = np.minimum(eff, table.saturation if table.saturation is not None else table.built)
    uniforms = generator.random(len(counts))
    order = np.argsort(base, kind="stable")
    bounds = np.flatnonzero(np.diff(base[order])) + 1
    for group in np.split(order, bounds):
        f = int(base[group[0]])
        row_tokens, edges = _row_cdf(table, f)
        pos = np.searchsorted(edges, uniforms[group] * edges[-1], side="right")
        tokens[group] = row_tokens[np.minimum(pos, len(row_tokens) - 1)] + (eff[group] - f)
    return tokens


_ROW_CDFS: "weakref.WeakKeyDictionary[SanitizerTable, dict[int, tuple[np.ndarray, np.ndarray]]]" = \
    weakref.WeakKeyDictionary()


def _row_cdf(table: SanitizerTable, frequency: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ``frequency``'s tokens and cumulative probabilities, kept per table (a table is a function of
    public parameters, and its rows never change once built): every window draws from the same rows."""
    rows = _ROW_CDFS.setdefault(table, {})
    got = rows.get(frequency)
    if got is None:
        row = table.row(frequency)
        got = rows[frequency] = (row.tokens, np.cumsum(row.probs))
    return got


MembersAt = Callable[[np.ndarray, np.ndarray], Sequence[Hashable]]
"""``members_at(ranks, counts)`` -> the keys at those ranks, each checked to have that count."""


def sample_count_classes(classes: list[CountClass], members_at: MembersAt, *, scheme: str, tau: float | None,
                         epsilon: float, delta: float, max_keys_per_user: int, rng: Any = None,
                         estimator: str = "mle") -> SampleResult:
    """``private_weighted_sample`` of a window given as count classes; reads only the reported keys.

    Same mechanism, table (at (ε/Δ, δ/Δ)), estimator, rows and DP events as :func:`sample_arrays`; the output
    has exactly the same distribution (:func:`draw_by_count_class`; tested against :func:`sample_arrays` by a
    chi-square test on the joint outcome of small windows). An empty window (no classes) gives no rows and is
    charged like any other (the release's cost does not depend on the data).
    """
    table = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta,
                            max_keys_per_user=max_keys_per_user)
    estimates = estimator_for(table, kind=estimator)
    drawn = draw_by_count_class(classes, table, make_rng(rng))
    keys = members_at(drawn.ranks, drawn.counts) if len(drawn.ranks) else []
    if len(keys) != len(drawn.ranks):
        raise RuntimeError(f"read {len(keys)} sampled keys for {len(drawn.ranks)} ranks")
    tokens = drawn.tokens.tolist()
    estimate = {t: estimates.estimate(t) for t in set(tokens)}  # a few hundred distinct tokens, not one per key
    rows = [SampleRow(key, t, estimate[t]) for key, t in zip(keys, tokens)]
    rows.sort(key=lambda r: (-r.token, tie_key(r.key)))
    return SampleResult(rows=rows, scheme=scheme, tau=table.scheme.tau, epsilon=float(epsilon), delta=float(delta),
                        max_keys_per_user=int(max_keys_per_user), estimator=estimator)
