"""The large margin mechanism (CHS14 Algorithm 1) as main had it before the sorted-prefix read (commit 251dcec):
the whole window's scores in one mapping, one sort, the search over the whole sorted array. Kept verbatim (only
renamed) as the oracle the prefix-reading version must equal draw for draw (tests/unit/test_large_margin_prefix.py).

Its step 4 lists the top ``level`` items in the mapping's order (those above the boundary score in the order
given, the boundary score's in the fixed tie order), so on a mapping given in rank order -- score descending,
then descending :func:`tie_key` -- it draws over exactly the rank order the prefix version uses.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np

from stream_dp.mechanisms._validation import check_delta, check_epsilon, check_positive_int, check_scores, top_indices
from stream_dp.mechanisms.large_margin import _CHUNK, UNLISTED, _floor_exp, _log_laplace_cdf, margin_threshold
from stream_dp.rng import RngLike, make_rng


def main_search_level(listed: np.ndarray, universe: int, *, epsilon: float, delta: float, n: int,
                  rng: np.random.Generator) -> int:
    """Steps 1–3: the level l ∈ [1, universe]. ``listed`` are the listed scores in decreasing order; the
    items from position len(listed)+1 to ``universe`` have score 0."""
    top = float(listed[0]) if len(listed) else 0.0
    m = top + rng.laplace(0.0, 3.0 / epsilon) / n
    g = rng.laplace(0.0, 6.0 / epsilon)
    b = 12.0 / epsilon
    # Listed phase: levels l = 1 .. len(listed)-1 compare against the listed score f^(l+1).
    last_listed_level = min(len(listed) - 1, universe - 1)
    level = 1
    while level <= last_listed_level:
        stop = min(level + _CHUNK - 1, last_listed_level)
        levels = range(level, stop + 1)
        bound = np.array([n * (m - listed[l] - margin_threshold(l, epsilon=epsilon, delta=delta, n=n)) - g
                          for l in levels])
        passed = np.flatnonzero(rng.laplace(0.0, b, len(bound)) < bound)
        if len(passed):
            return level + int(passed[0])
        level = stop + 1
    # Implicit phase: levels l = level .. universe-1 all compare against score 0 and the bound
    # c_l = n(m − T(l)) − G decreases in l, so p_l = P[Z_l < c_l] does too. Sample the first success by
    # thinning: skip geometrically with the block's largest p, accept a candidate with p_l / p_start.
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


def main_large_margin_argmax(scores: Mapping[Hashable, float], *, epsilon: float, delta: float, n: int,
                        universe_size: int | None = None, rng: RngLike = None) -> Hashable:
    """Choose an item with (nearly) the highest score, (ε, δ)-DP with ε = α of the paper (module docstring).

    ``scores``: item → f(i, D), (1/n)-Lipschitz; ``n``: number of individuals; ``universe_size``: total
    number of items when ``scores`` lists only some (the rest score 0; never enumerated), default
    ``len(scores)``. Returns the chosen key, or :data:`UNLISTED`. Raises ``ValueError`` on ε ≤ 0,
    δ ∉ (0, 1), n < 1, NaN/infinite scores, an empty universe, ``universe_size < len(scores)``, or a
    negative listed score with an implicit universe.

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
    generator = make_rng(rng)

    # The search needs only the sorted score values; identities (with the fixed tie order) are resolved
    # for the top `level` items alone, so a window of 10^6 keys costs one numpy sort.
    listed = np.sort(values)[::-1]
    level = main_search_level(listed, universe, epsilon=epsilon, delta=delta, n=n, rng=generator)

    # Step 4: exponential mechanism with privacy α/3 over the top `level` items.
    chosen = min(level, len(listed))
    top = top_indices(keys, values, chosen)
    logits = list(n * epsilon * values[top] / 6.0)
    unlisted = level - chosen
    if unlisted > 0:
        logits.append(math.log(unlisted))  # (level − L) unlisted items of weight exp(0) = 1 each
    logits_arr = np.array(logits)
    p = np.exp(logits_arr - logits_arr.max())
    pick = int(generator.choice(len(p), p=p / p.sum()))
    return UNLISTED if pick == chosen else keys[top[pick]]
