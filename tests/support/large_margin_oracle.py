"""The large margin mechanism (CHS14 Algorithm 1) as main had it before the sorted-prefix read (commit 251dcec):
the whole window's scores in one mapping, one sort, the search's listed phase over the whole sorted array, and
step 4 over ``top_indices`` of the mapping -- the oracle the prefix-reading version must equal draw for draw
(tests/unit/test_large_margin_prefix.py, tests/integration/test_argmax_prefix.py). The parts this work did not
change -- the implicit-universe phase and step 4's draw over given weights -- are production's, called.

Main's step 4 lists the top ``level`` items in the mapping's order (those above the boundary score in the order
given, the boundary score's in the fixed tie order), so on a mapping given in rank order -- score descending,
then descending :func:`tie_key` -- it draws over exactly the rank order the prefix version uses.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

from stream_dp.mechanisms._validation import top_indices
from stream_dp.mechanisms.large_margin import (_CHUNK, UNLISTED, _exponential_pick, _implicit_level,
                                               margin_threshold)
from stream_dp.rng import RngLike, make_rng


def main_search_level(listed: np.ndarray, universe: int, *, epsilon: float, delta: float, n: int,
                      rng: np.random.Generator) -> int:
    """Steps 1–3 as main ran them: the listed phase over the whole sorted array, chunk by chunk."""
    top = float(listed[0]) if len(listed) else 0.0
    m = top + rng.laplace(0.0, 3.0 / epsilon) / n
    g = rng.laplace(0.0, 6.0 / epsilon)
    last_listed_level = min(len(listed) - 1, universe - 1)
    level = 1
    while level <= last_listed_level:
        stop = min(level + _CHUNK - 1, last_listed_level)
        bound = np.array([n * (m - listed[lv] - margin_threshold(lv, epsilon=epsilon, delta=delta, n=n)) - g
                          for lv in range(level, stop + 1)])
        passed = np.flatnonzero(rng.laplace(0.0, 12.0 / epsilon, len(bound)) < bound)
        if len(passed):
            return level + int(passed[0])
        level = stop + 1
    return _implicit_level(level, universe, m, g, epsilon=epsilon, delta=delta, n=n, rng=rng)


def main_large_margin_argmax(scores: Mapping[Hashable, float], *, epsilon: float, delta: float, n: int,
                             universe_size: int, rng: RngLike = None) -> Hashable:
    """Main's ``large_margin_argmax`` for valid input (no checks): the chosen key or ``UNLISTED``."""
    keys = list(scores)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(keys))
    generator = make_rng(rng)
    listed = np.sort(values)[::-1]
    level = main_search_level(listed, universe_size, epsilon=epsilon, delta=delta, n=n, rng=generator)
    chosen = min(level, len(listed))
    top = top_indices(keys, values, chosen)
    pick = _exponential_pick(values[top], level - chosen, epsilon=epsilon, n=n, rng=generator)
    return UNLISTED if pick == chosen else keys[top[pick]]
