"""Large margin mechanism for private argmax over huge universes (Chaudhuri, Hsu & Song, NIPS 2014,
Algorithm 1, lmm).

``lmm(α, δ, D)`` finds, with a sparse-vector search, the smallest l such that the top score has a clear
margin over the (l+1)-th, then runs the exponential mechanism only over the top l items. Its utility
depends on the margin, not on the universe size K (range independence).

Constants (reconstructed from a third-party implementation -- not read in the paper itself): budget
α/3 + α/3 + α/3, δ/3 tails. For r = 1, 2, …

- t(r) = (6/n)·(1 + ln(3r/δ)/α)
- T(r) = (3/(αn))·ln(3/(2δ)) + (6/(αn))·ln(3/δ) + (12/(αn))·ln(3r(r+1)/δ) + t(r)

1. m = f⁽¹⁾ + Z/n, Z ~ Lap(3/α).
2. G ~ Lap(6/α); Z_1, Z_2, … ~ Lap(12/α).
3. l = 1; while l < K: stop if m − f⁽ˡ⁺¹⁾ > (Z_l + G)/n + T(l), else l += 1.
4. Return I drawn from the top-l items with P[i] ∝ exp(nα·f(i)/6).

Privacy: (α, δ)-DP when every score f(i, ·) is (1/n)-Lipschitz in the dataset (e.g. f = share of users on
item i, or count/n) → :class:`LargeMargin` (its privacy map). The universe must not depend on the data.

**Implicit universe.** ``scores`` lists only some items; ``universe_size`` K (≥ len(scores)) says how many
items exist in all, the unlisted ones having score 0 (listed scores must then be ≥ 0; unlisted items rank
after listed zeros). Unlisted items are never enumerated: the search over their run of equal scores samples
the first success of the independent tests directly (geometric skips with thinning over doubling blocks),
so K = 10³⁰⁰ costs about log₂K steps. When an unlisted item is drawn the result is :data:`UNLISTED`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from collections.abc import Hashable, Mapping

import numpy as np

from stream_dp.accounting.events import ApproxDpEvent, DpEvent
from stream_dp.mechanisms._validation import (
    check_delta,
    check_epsilon,
    check_positive_int,
    check_scores,
)
from stream_dp.mechanisms._markers import Marker
from stream_dp.mechanisms.sorted_scores import ScoresInMemory, SortedPrefix, SortedScores
from stream_dp.rng import RngLike, make_rng


UNLISTED = Marker("UNLISTED")
"""Returned by :func:`large_margin_argmax` when the chosen item is one of the unlisted score-0 items."""

_CHUNK = 256
FIRST_PREFIX = 1 + _CHUNK
"""Scores the search reads first: the top one and its first chunk of levels' (l+1)-th scores."""


def margin_threshold(level: int, *, epsilon: float, delta: float, n: int) -> float:
    """T(level) of the constants above (computed with logs so that level may be astronomically large).

    >>> round(margin_threshold(1, epsilon=1.0, delta=1e-6, n=1000), 4)
    0.4149
    """
    a, ln_level = epsilon * n, math.log(level)
    small_t = (6 / n) * (1 + (math.log(3 / delta) + ln_level) / epsilon)
    return ((3 / a) * math.log(3 / (2 * delta)) + (6 / a) * math.log(3 / delta)
            + (12 / a) * (math.log(3 / delta) + ln_level + math.log(level + 1)) + small_t)


def _log_laplace_cdf(x: float, b: float) -> tuple[float, float]:
    """(ln P[Lap(b) < x], ln(−ln P[Lap(b) ≥ x])), both accurate in the far tails."""
    if x <= 0:
        log_p = math.log(0.5) + x / b
        # −ln(1 − p) ≈ p when p is tiny
        return log_p, (log_p if log_p < -30 else math.log(-math.log1p(-math.exp(log_p))))
    return math.log1p(-0.5 * math.exp(-x / b)), math.log(x / b - math.log(0.5))


def _floor_exp(x: float) -> int:
    """⌊e^x⌋ as an int, also beyond the float range (universes of 256^k keys)."""
    if x < 700:
        return int(math.floor(math.exp(x)))
    return int(Decimal(x).exp())


def _search_level(listed: np.ndarray, universe: int, *, epsilon: float, delta: float, n: int,
                  rng: np.random.Generator) -> int:
    """Steps 1–3: the level l ∈ [1, universe]. ``listed`` are the listed scores in decreasing order; the
    items from position len(listed)+1 to ``universe`` have score 0."""
    prefix = SortedPrefix(ScoresInMemory(list(range(len(listed))), np.asarray(listed, dtype=np.float64)))
    return _search(prefix, universe, epsilon=epsilon, delta=delta, n=n, rng=rng)


def _search(prefix: SortedPrefix, universe_size: int, *, epsilon: float, delta: float, n: int,
            rng: np.random.Generator) -> int:
    """Steps 1–3 over the listed scores as a sorted prefix, read only as far as the search goes: the chunk of
    levels l .. l+_CHUNK−1 needs the scores f^(l+1) .. f^(l+_CHUNK), so the prefix is extended to l+_CHUNK
    scores before the chunk's draws; the number of listed scores L is known once the prefix is complete.
    The draws (how many, in which order) and every comparison are those of the whole sorted array: the
    chunk ends at level min(l+_CHUNK−1, L−1) either way (an incomplete prefix of ≥ l+_CHUNK scores means
    L ≥ l+_CHUNK). The universe is max(``universe_size``, L)."""
    listed = prefix.upto(FIRST_PREFIX)
    top = float(listed[0]) if len(listed) else 0.0
    m = top + rng.laplace(0.0, 3.0 / epsilon) / n
    g = rng.laplace(0.0, 6.0 / epsilon)
    b = 12.0 / epsilon
    # Listed phase: levels l = 1 .. L-1 compare against the listed score f^(l+1).
    level = 1
    while True:
        listed = prefix.upto(level + _CHUNK)
        if prefix.complete and level > len(listed) - 1:
            break
        stop = min(level + _CHUNK - 1, len(listed) - 1)  # an incomplete prefix has ≥ level+_CHUNK scores
        levels = range(level, stop + 1)
        bound = np.array([n * (m - listed[l] - margin_threshold(l, epsilon=epsilon, delta=delta, n=n)) - g
                          for l in levels])
        passed = np.flatnonzero(rng.laplace(0.0, b, len(bound)) < bound)
        if len(passed):
            return level + int(passed[0])
        level = stop + 1
    return _implicit_level(level, max(universe_size, len(listed)), m, g, epsilon=epsilon, delta=delta, n=n, rng=rng)


def _implicit_level(level: int, universe: int, m: float, g: float, *, epsilon: float, delta: float, n: int,
                    rng: np.random.Generator) -> int:
    """Step 3 past the listed scores: levels ``level`` .. universe−1 all compare against score 0 and the bound
    c_l = n(m − T(l)) − G decreases in l, so p_l = P[Z_l < c_l] does too. Samples the first success by
    thinning: skip geometrically with the block's largest p, accept a candidate with p_l / p_start."""
    b = 12.0 / epsilon

    def log_p(l: int) -> tuple[float, float]:
        return _log_laplace_cdf(n * (m - margin_threshold(l, epsilon=epsilon, delta=delta, n=n)) - g, b)

    current = level
    while current <= universe - 1:
        block_end = min(2 * current, universe - 1)
        lp, log_neg_log_q = log_p(current)
        # failures before the first success of Bernoulli(p): floor(ln U / ln(1 − p))
        exponential = -math.log1p(-rng.random())  # −ln U, U uniform on (0, 1]
        log_skip = (math.log(exponential) if exponential > 0 else -math.inf) - log_neg_log_q
        if log_skip > math.log(block_end - current + 1):
            current = block_end + 1
            continue
        candidate = current + _floor_exp(log_skip)
        if candidate > block_end:
            current = block_end + 1
            continue
        if rng.random() < math.exp(log_p(candidate)[0] - lp):
            return candidate
        current = candidate + 1
    return universe


def large_margin_argmax(scores: Mapping[Hashable, float], *, epsilon: float, delta: float, n: int,
                        universe_size: int | None = None, rng: RngLike = None) -> Hashable:
    """Choose an item with (nearly) the highest score, (ε, δ)-DP with ε = α of the paper (module docstring).

    ``scores``: item → f(i, D), (1/n)-Lipschitz; ``n``: number of individuals; ``universe_size``: total
    number of items when ``scores`` lists only some (the rest score 0; never enumerated), default
    ``len(scores)``. Returns the chosen key, or :data:`UNLISTED`. Raises ``ValueError`` on ε ≤ 0,
    δ ∉ (0, 1), n < 1, NaN/infinite scores, an empty universe, ``universe_size < len(scores)``, or a
    negative listed score with an implicit universe.

    >>> large_margin_argmax({"item1": 1.0}, epsilon=1.0, delta=1e-6, n=1000, universe_size=10**300, rng=1)
    'item1'
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    n = check_positive_int(n, "n")
    keys, values = check_scores(scores, name="scores", nonnegative=False)
    if universe_size is None:
        universe = len(keys)
    else:
        universe = check_positive_int(universe_size, "universe_size")
        if universe < len(keys):
            raise ValueError(f"universe_size must be >= the number of listed scores ({len(keys)}), "
                             f"got {universe}")
        if universe > len(keys) and (values < 0).any():
            raise ValueError("scores must be >= 0 when universe_size adds unlisted score-0 items")
    if universe < 1:
        raise ValueError("the universe is empty: give scores or universe_size >= 1")
    return large_margin_argmax_sorted(ScoresInMemory(keys, values), epsilon=epsilon, delta=delta, n=n,
                                      universe_size=universe, rng=rng)


def large_margin_argmax_sorted(scores: SortedScores, *, epsilon: float, delta: float, n: int, universe_size: int,
                               rng: RngLike = None) -> Hashable:
    """:func:`large_margin_argmax` over scores given best first (:class:`SortedScores`), read only as far as
    CHS14 Algorithm 1 goes: the search's prefix, doubling (:class:`SortedPrefix`), then the keys of the top
    ``level`` items that step 4 draws from -- and of those only the drawn one (:meth:`SortedScores.key_at`).

    Same draws, same comparisons, same output as :func:`large_margin_argmax` on the whole mapping for the
    same scores and seed (tests/unit/test_large_margin_prefix.py). The universe is max(``universe_size``, the
    number of listed scores); scores must be >= 0 (unlisted items score 0), which is not checked here beyond
    the prefix read. Returns the chosen key or :data:`UNLISTED`.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    n = check_positive_int(n, "n")
    universe_size = check_positive_int(universe_size, "universe_size")
    generator = make_rng(rng)
    prefix = SortedPrefix(scores, first=FIRST_PREFIX)
    level = _search(prefix, universe_size, epsilon=epsilon, delta=delta, n=n, rng=generator)

    # Step 4: exponential mechanism with privacy α/3 over the top `level` items, in rank order (score
    # descending, the fixed tie order): the draw depends on the scores alone, not on how they were listed.
    listed = prefix.upto(level)
    chosen = min(level, len(listed))
    pick = _exponential_pick(listed[:chosen], level - chosen, epsilon=epsilon, n=n, rng=generator)
    return UNLISTED if pick == chosen else scores.key_at(pick)


def _exponential_pick(top: np.ndarray, unlisted: int, *, epsilon: float, n: int, rng: np.random.Generator) -> int:
    """Step 4's draw: index i of ``top`` with P ∝ exp(nα·top[i]/6), or len(top) for one of the ``unlisted``
    score-0 items (weight exp(0) = 1 each). One uniform draw (``choice``), so the index depends on the order
    of ``top``."""
    logits = list(n * epsilon * top / 6.0)
    if unlisted > 0:
        logits.append(math.log(unlisted))
    logits_arr = np.array(logits)
    p = np.exp(logits_arr - logits_arr.max())
    return int(rng.choice(len(p), p=p / p.sum()))


@dataclass(frozen=True)
class LargeMargin:
    """The large margin measurement (CHS14 Algorithm 1) with its privacy map: (ε, δ)-DP per call whatever it
    returns, so ``privacy_map()`` (reserved) and ``realized(result)`` are the same one event.

    >>> LargeMargin(epsilon=1.0, delta=1e-6).privacy_map()[0].mechanism
    'large_margin'
    """

    epsilon: float
    delta: float
    mechanism: str = "large_margin"

    def __post_init__(self) -> None:
        self.privacy_map()  # validates ε, δ

    def __call__(self, scores: Mapping[Hashable, float] | SortedScores, *, n: int, universe_size: int | None = None,
                 rng: RngLike = None) -> Hashable:
        """Over a whole mapping (:func:`large_margin_argmax`), or over scores read best first as far as the
        search goes (:func:`large_margin_argmax_sorted`, which needs ``universe_size``)."""
        if isinstance(scores, Mapping):
            return large_margin_argmax(scores, epsilon=self.epsilon, delta=self.delta, n=n,
                                       universe_size=universe_size, rng=rng)
        if universe_size is None:
            raise ValueError("universe_size is required when the scores are read as a sorted prefix")
        return large_margin_argmax_sorted(scores, epsilon=self.epsilon, delta=self.delta, n=n,
                                          universe_size=universe_size, rng=rng)

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return (ApproxDpEvent(epsilon=check_epsilon(self.epsilon), delta=check_delta(self.delta),
                              mechanism=self.mechanism),)

    def realized(self, result: Hashable) -> tuple[DpEvent, ...]:
        """Any key or :data:`UNLISTED` costs the same."""
        return self.privacy_map()
