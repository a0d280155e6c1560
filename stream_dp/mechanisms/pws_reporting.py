"""Algorithm 3 of Cohen, Geri, Sarlós & Stemmer (AISTATS 2021): optimal (ε, δ)-DP key-reporting probabilities.

Given the inclusion probabilities q of a threshold sampling scheme (:mod:`stream_dp.mechanisms.pws_schemes`;
q_0 = 0, non-decreasing), the largest end-to-end reporting probabilities allowed by (ε, δ)-DP between
frequencies i-1 and i are ``π_i = min{q_i, e^ε π_{i-1} + δ, 1 + e^{-ε}(π_{i-1} + δ - 1)}``; an existing
non-private sample is post-processed with p_i = π_i / q_i. Guarantee: reporting each key independently with
probability π of its frequency is (ε, δ)-DP for neighbours that change one key's frequency by 1 (0 ↔ 1
included), and no π_i can be larger. Computed from (q, ε, δ) alone -- never from data. The frequency
sanitizer (Algorithm 4, :mod:`stream_dp.mechanisms.pws_rows`) reports with these same π_i.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import check_delta, check_epsilon


def _check_q(q: Any) -> np.ndarray:
    arr = np.asarray(q, dtype=np.float64)
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError("q must be a non-empty 1-D sequence of probabilities q[0..]")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError("q must contain probabilities in [0, 1]")
    if arr[0] != 0:
        raise ValueError("q[0] must be 0 (keys of frequency 0 are never sampled)")
    if np.any(np.diff(arr) < 0):
        raise ValueError("q must be non-decreasing (a sampling scheme samples heavier keys more often)")
    return arr


def extend_reporting(pi_prev: float, q: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """π for the frequencies whose q values are given, continuing from π of the frequency before them."""
    up, down = math.exp(epsilon), math.exp(-epsilon)
    out = np.empty(len(q))
    pi = pi_prev
    for n, qi in enumerate(q.tolist()):
        pi = min(qi, up * pi + delta, 1.0 + down * (pi + delta - 1.0))
        out[n] = pi
    return out


def pws_reporting_probabilities(q: Any, *, epsilon: float, delta: float) -> np.ndarray:
    """Algorithm 3 of Cohen et al.: the optimal (ε, δ)-DP key-reporting probabilities π[0..len(q)-1].

    Element-level guarantee: reporting each key independently with probability π_{w_x} is (ε, δ)-DP for
    neighbours that change one key's frequency by 1 (including 0 ↔ 1); every π_i is the largest such value
    (each bound is non-decreasing in π_{i-1}, so the greedy choice is pointwise optimal).

    >>> pws_reporting_probabilities([0, 1, 1, 1], epsilon=1.0, delta=0.1).round(4).tolist()
    [0.0, 0.1, 0.3718, 0.8057]
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    arr = _check_q(q)
    pi = np.zeros(len(arr))
    pi[1:] = extend_reporting(0.0, arr[1:], epsilon, delta)
    return pi


def pws_sanitizer_probabilities(q: Any, *, epsilon: float, delta: float) -> np.ndarray:
    """p_i = π_i / q_i (p_i = 0 where q_i = 0): keep a key of a non-private sample with probability p_{w}.

    Post-processing an independent q-sample this way reports a key of frequency i with probability π_i.

    >>> pws_sanitizer_probabilities([0, 0.5, 1], epsilon=1.0, delta=0.1).round(4).tolist()
    [0.0, 0.2, 0.3718]
    """
    arr = _check_q(q)
    pi = pws_reporting_probabilities(arr, epsilon=epsilon, delta=delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(arr > 0, pi / np.where(arr > 0, arr, 1.0), 0.0)
