"""Large margin mechanism (CHS14 Algorithm 1): range independence, the implicit-universe search, validation.

False-failure rates are stated per test (the seeds are fixed, so each run is deterministic).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stream_dp.accounting.events import ApproxDpEvent
from stream_dp.mechanisms import UNLISTED, LargeMargin, large_margin_argmax
from stream_dp.mechanisms.large_margin import _search_level, margin_threshold


def test_range_independence_on_the_seed_example():
    """Seed 001: D = (1, …, 1) -- all n = 1000 users on item 1, f(i, D) = share of users on item i --,
    α = 1, δ = 1e-6, a universe of K = 10^300 items, never enumerated (one listed item, the rest implicit).

    LMM returns item 1 with probability ≥ 1 − 1e-20 here (the margin 1 exceeds T(1) ≈ 0.415 plus the
    noise by > 40 Laplace scales), so "≥ 99 % of 300 runs" has a false-failure rate below 1e-15.
    The exponential mechanism over the same universe returns item 1 with probability
    e^{nα/2}/(K − 1 + e^{nα/2}) = e^{500}/(10^300 − 1 + e^{500}) ≈ 1.4e-83."""
    n, alpha, delta, universe = 1000, 1.0, 1e-6, 10**300
    log_em = n * alpha / 2 - (math.log(universe - 1) + math.log1p(math.exp(n * alpha / 2 - math.log(universe - 1))))
    assert math.exp(log_em) < 1e-82 and math.exp(log_em) > 1e-84  # ≈ 1.4e-83: EM is useless here
    rng = np.random.default_rng(2014)
    picks = [large_margin_argmax({"item1": 1.0}, epsilon=alpha, delta=delta, n=n, universe_size=universe,
                                 rng=rng) for _ in range(300)]
    assert picks.count("item1") >= 0.99 * len(picks)
    # the same data with a 10-item universe: the same answer (utility does not depend on K)
    small = [large_margin_argmax({"item1": 1.0}, epsilon=alpha, delta=delta, n=n, universe_size=10, rng=rng)
             for _ in range(300)]
    assert small.count("item1") >= 0.99 * len(small)


def test_no_margin_falls_back_to_the_whole_universe():
    """Without a margin (a score of 0.3 with n = 10) the search reaches K and the EM over 10^300 items
    returns an unlisted item essentially always (P[listed] ≤ e^{0.5}/10^300)."""
    rng = np.random.default_rng(1)
    picks = {large_margin_argmax({"a": 0.3}, epsilon=1.0, delta=1e-6, n=10, universe_size=10**300, rng=rng)
             for _ in range(20)}
    assert picks == {UNLISTED}


def _naive_level(listed, universe, *, epsilon, delta, n, rng):
    """Algorithm 1 (lmm) with the reconstructed constants step by step over an explicit universe (reference)."""
    f = list(listed) + [0.0] * (universe - len(listed)) + [-math.inf]
    m = f[0] + rng.laplace(0, 3 / epsilon) / n
    g = rng.laplace(0, 6 / epsilon)
    level = 1
    while level < universe:
        if m - f[level] > (rng.laplace(0, 12 / epsilon) + g) / n + margin_threshold(level, epsilon=epsilon,
                                                                                    delta=delta, n=n):
            break
        level += 1
    return level


@pytest.mark.parametrize("listed, universe, n, delta", [
    ([0.45], 60, 200, 0.1),
    ([0.6, 0.55, 0.3], 300, 150, 0.1),
    ([0.4], 200, 200, 0.3),
])
def test_implicit_universe_search_matches_the_naive_loop(listed, universe, n, delta):
    """The level of the implicit search (geometric skips + thinning over unlisted score-0 items) has the
    distribution of the naive loop over the explicit universe: chi-square test of homogeneity on binned
    levels, 3000 draws each, level 1e-4 (false-failure rate 3e-4 over the three cases). The cases spread
    the level over the listed and the implicit part."""
    kw = dict(epsilon=1.0, delta=delta, n=n)
    arr = np.array(listed, dtype=float)
    rng = np.random.default_rng(77)
    fast = [_search_level(arr, universe, rng=rng, **kw) for _ in range(3000)]
    naive = [_naive_level(listed, universe, rng=rng, **kw) for _ in range(3000)]
    edges = [1, 2, 3, 4, 6, 10, 20, universe, universe + 1]
    table = np.array([np.histogram(fast, bins=edges)[0], np.histogram(naive, bins=edges)[0]])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 3, table  # the case exercises several levels
    assert stats.chi2_contingency(table).pvalue > 1e-4, table


def test_listed_zeros_and_implicit_zeros_agree_on_the_winner():
    """Listing the score-0 items explicitly or leaving them implicit gives the same output law:
    P[the top listed item] compared by a two-sample chi-square test (level 1e-4)."""
    rng = np.random.default_rng(5)
    kw = dict(epsilon=1.0, delta=0.1, n=200)
    implicit = [large_margin_argmax({"a": 0.45, "b": 0.40}, universe_size=30, rng=rng, **kw) == "a"
                for _ in range(3000)]
    explicit_scores = {"a": 0.45, "b": 0.40} | {f"z{i}": 0.0 for i in range(28)}
    explicit = [large_margin_argmax(explicit_scores, rng=rng, **kw) == "a" for _ in range(3000)]
    table = [[sum(implicit), len(implicit) - sum(implicit)], [sum(explicit), len(explicit) - sum(explicit)]]
    assert stats.chi2_contingency(table).pvalue > 1e-4


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(epsilon=0), "epsilon"),
    (dict(delta=1.5), "delta"),
    (dict(n=0), "n must be"),
    (dict(universe_size=1), "universe_size"),
    (dict(scores={"a": -0.1, "b": 0.2}, universe_size=10), ">= 0"),
    (dict(scores={"a": float("nan"), "b": 0.2}), "NaN"),
    (dict(scores={}), "empty"),
])
def test_rejects_bad_input(kwargs, fragment):
    base = dict(scores={"a": 0.5, "b": 0.2}, epsilon=1.0, delta=1e-6, n=100)
    with pytest.raises(ValueError, match=fragment):
        large_margin_argmax(**{**base, **kwargs}, rng=0)


def test_events():
    assert LargeMargin(epsilon=0.5, delta=1e-7).privacy_map() == (
        ApproxDpEvent(epsilon=0.5, delta=1e-7, mechanism="large_margin"),)


def test_universe_beyond_float_range():
    """The release worker's universe (all keys of up to 256 bytes, ≈ 10^619 items) is handled without
    overflow; with a clear margin the top item wins, without one an unlisted item does."""
    universe = (256**257 - 256) // 255
    assert large_margin_argmax({"a": 500.0, "b": 1.0}, epsilon=1.0, delta=1e-6, n=1, universe_size=universe,
                               rng=0) == "a"
    assert large_margin_argmax({"a": 3.0}, epsilon=1.0, delta=1e-6, n=1, universe_size=universe,
                               rng=0) is UNLISTED
