"""Exponential mechanism with a free gap (Ding et al., "Free Gap Estimates", §8,
Algorithms 7 and 8).

Write s_ω = ε·μ(D, ω)/(2Δμ) for the scaled utility (Δμ = ``sensitivity``).

- :func:`em_with_gap` (Algorithm 7): x_ω = s_ω + Gumbel(1); return the arg-max ω* and the gap
  x_{ω*} − (second largest x). ε-DP (Theorem 8.3).
- :func:`em_with_gap_blackbox` (Algorithm 8): draw ω* from any exponential-mechanism sampler
  (P[ω] ∝ e^{s_ω}), then draw the gap from the Logistic distribution with location
  L = s_{ω*} − ln Σ_{ω≠ω*} e^{s_ω} conditioned on being ≥ 0. By Theorem 8.3 the pair has exactly the law
  of Algorithm 7. The seed's Algorithm 8 line omits ε in L; we use the Theorem 8.3 location.
  The conditioned draw uses the inverse CDF (the paper's "repeat until x > 0" has the same law and may
  loop for a very long time when L ≪ 0).

The gap is in the scaled units of s (log-odds); ``gap · 2Δμ/ε`` is the utility difference it estimates.
Cost: :func:`em_with_gap_events` -- pure ε-DP.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np

from stream_dp.accounting.events import DpEvent, PureDpEvent
from stream_dp.mechanisms._validation import check_epsilon, check_scores
from stream_dp.rng import RngLike, make_rng


def _scaled(scores: Mapping[Hashable, float], epsilon: float,
            sensitivity: float) -> tuple[list[Hashable], np.ndarray]:
    epsilon = check_epsilon(epsilon)
    sensitivity = check_epsilon(sensitivity, "sensitivity")
    keys, arr = check_scores(scores, name="scores", nonnegative=False)
    if len(keys) < 2:
        raise ValueError(f"scores must hold at least 2 entries (the gap needs a runner-up), got {len(keys)}")
    return keys, epsilon * arr / (2.0 * sensitivity)


def em_with_gap(scores: Mapping[Hashable, float], *, epsilon: float, sensitivity: float = 1.0,
                rng: RngLike = None) -> tuple[Hashable, float]:
    """Algorithm 7: (chosen key, gap) with one-shot Gumbel noise. ε-DP.

    >>> key, gap = em_with_gap({"a": 100.0, "b": 0.0, "c": -5.0}, epsilon=1.0, rng=0)
    >>> key, gap > 0
    ('a', True)
    """
    keys, s = _scaled(scores, epsilon, sensitivity)
    x = s + make_rng(rng).gumbel(0.0, 1.0, len(s))
    first, second = np.argpartition(-x, 1)[:2]
    if x[second] > x[first]:
        first, second = second, first
    return keys[first], float(x[first] - x[second])


def gap_location(scaled: np.ndarray, chosen: int) -> float:
    """L = s_chosen − ln Σ_{ω ≠ chosen} e^{s_ω} (Theorem 8.3), computed stably."""
    others = np.delete(scaled, chosen)
    top = others.max()
    return float(scaled[chosen] - (top + math.log(np.exp(others - top).sum())))


def em_with_gap_blackbox(scores: Mapping[Hashable, float], *, epsilon: float, sensitivity: float = 1.0,
                         rng: RngLike = None) -> tuple[Hashable, float]:
    """Algorithm 8: exponential mechanism, then a Logistic(L) gap conditioned on ≥ 0. ε-DP; the same law
    as :func:`em_with_gap`.

    >>> key, gap = em_with_gap_blackbox({"a": 100.0, "b": 0.0, "c": -5.0}, epsilon=1.0, rng=0)
    >>> key, gap > 0
    ('a', True)
    """
    keys, s = _scaled(scores, epsilon, sensitivity)
    generator = make_rng(rng)
    p = np.exp(s - s.max())
    chosen = int(generator.choice(len(s), p=p / p.sum()))
    location = gap_location(s, chosen)
    # Inverse survival function of Logistic(L) restricted to [0, ∞), in logs so it stays exact in the
    # tails: S(x) = σ(L − x), S(0) = σ(L); draw S = S(0)·(1 − V), then x = L + ln((1 − S)/S).
    log_s = -float(np.logaddexp(0.0, -location)) + math.log1p(-generator.random())
    if log_s >= 0.0:  # S(0) rounded to 1 and V = 0: the left edge of the support
        return keys[chosen], 0.0
    gap = location + math.log1p(-math.exp(log_s)) - log_s
    return keys[chosen], max(gap, 0.0)


def em_with_gap_events(*, epsilon: float) -> tuple[DpEvent, ...]:
    """Cost of either algorithm: pure ε-DP (Theorem 8.3).

    >>> em_with_gap_events(epsilon=0.3)[0].epsilon
    0.3
    """
    return (PureDpEvent(epsilon=check_epsilon(epsilon), mechanism="em_with_gap"),)
