"""One step of Algorithm 4 of Cohen, Geri, Sarlós & Stemmer (AISTATS 2021), "late" variant: a sanitizer row.

Row i is the distribution π_{i,·} of the token reported for a key of frequency i (token 0 = not reported,
tokens 1..i otherwise; total reported mass π_i from Algorithm 3, :mod:`stream_dp.mechanisms.pws_reporting`).
:func:`next_row` builds row i from row i-1 alone. Guarantee: both hockey-stick divergences between rows i and
i-1 are ≤ δ at e^ε, for every i (tested exactly in tests/unit/test_pws_tables.py), so reporting a key's token
from the row of its frequency is (ε, δ)-DP for a change of that frequency by 1. This is the variant of the
authors' later code (docs/pws.md); the "early" variant of their first code (no Dfix term, cumulative sums
from token 0) is not DP when sampling binds and is not offered. Rows are sparse: only tokens with positive
mass, a band of width ~ ln(1/δ)/ε below the top token. :mod:`stream_dp.mechanisms.pws_tables` stacks the
rows into a table.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class SanitizerRow(NamedTuple):
    """Row π_{i,·} stored sparsely: ``tokens`` (ascending, ≥ 1) with ``probs`` > 0; token 0 has 1 - π_i."""

    tokens: np.ndarray
    probs: np.ndarray
    reported: float  # π_i = Σ probs

    def dense(self, frequency: int) -> np.ndarray:
        """π_{i,0..i} as a dense vector of length i+1 (index 0 = not reported)."""
        out = np.zeros(frequency + 1)
        out[0] = 1.0 - self.reported
        out[self.tokens] = self.probs
        return out

    def shifted(self, by: int) -> SanitizerRow:
        return SanitizerRow(self.tokens + by, self.probs, self.reported)


EMPTY_ROW = SanitizerRow(np.zeros(0, dtype=np.int64), np.zeros(0), 0.0)


def next_row(prev: SanitizerRow, frequency: int, pi: float, epsilon: float, delta: float) -> SanitizerRow:
    """One step of Algorithm 4 (late variant): row ``frequency`` from row ``frequency - 1``.

    Pass 1 puts on low tokens the least mass the lower-CDF constraints force,
    Σ_{h≤j} π_{i,h} ≥ e^{-ε}(Σ_{h≤j} π_{i-1,h} - δ) (token 0 handled by Dfix); pass 2 fills the remaining
    π_i - (pass-1 mass) from the top token down, each token capped so that
    Σ_{h≥j} π_{i,h} ≤ e^ε Σ_{h≥j} π_{i-1,h} + δ. Computed on the candidate tokens {1} ∪ support(prev) ∪ {i}
    only -- between candidates every prefix/tail sum is constant, so no other token can get mass -- which
    equals the dense token-by-token loop and costs O(|support|).
    """
    i = frequency
    up, down = math.exp(epsilon), math.exp(-epsilon)
    cand = np.union1d(prev.tokens, np.array([1, i], dtype=np.int64))
    left = np.searchsorted(prev.tokens, cand, side="left")
    right = np.searchsorted(prev.tokens, cand, side="right")
    prev_at = np.zeros(len(cand))
    hit = right > left
    prev_at[hit] = prev.probs[left[hit]]
    prefix = np.concatenate(([0.0], np.cumsum(prev.probs)))  # prefix[m] = mass of the m lowest tokens
    suffix = np.concatenate((np.cumsum(prev.probs[::-1])[::-1], [0.0]))  # suffix[m] = mass from token m up

    # pass 1: the running maximum of A_j = e^{-ε}(Σ_{h≤j} π_{i-1,h} - δ) + Dfix is the cumulative mass.
    dfix = max(0.0, down * (1.0 - prev.reported) - (1.0 - pi))
    a = down * (prefix[right] - delta) + dfix
    a[-1] = -math.inf  # pass 1 runs over tokens 1..i-1 only
    running = np.maximum.accumulate(np.maximum(a, 0.0))
    out1 = np.diff(running, prepend=0.0)
    out = out1.copy()

    remainder = pi - running[-1]
    if remainder < -1e-12:
        raise RuntimeError("Algorithm 4 pass 1 placed more mass than π_i (internal error)")
    if remainder > 0:
        # pass 2: F_j (mass added at tokens ≥ j) = min(R, C_j) from the top until C_j ≥ R.
        out1_tail = np.concatenate((np.cumsum(out1[::-1])[::-1][1:], [0.0]))  # Σ_{h > j} pass-1 mass
        cap = up * suffix[left] + delta - (out1 + out1_tail)  # C_j
        reach = np.flatnonzero(cap >= remainder)
        star = int(reach[-1]) if len(reach) else 0
        above = slice(star + 1, len(cand))
        out[above] = up * prev_at[above]
        out[-1] = delta if star < len(cand) - 1 else out[-1]
        filled_above = cap[star + 1] if star + 1 < len(cand) else 0.0
        fill = min(remainder, cap[star]) - filled_above
        if remainder - cap[star] > 1e-12:
            raise RuntimeError("Algorithm 4 pass 2 could not place all of π_i (internal error)")
        out[star] = out1[star] + fill
    keep = out > 0
    return SanitizerRow(cand[keep], out[keep], pi)
