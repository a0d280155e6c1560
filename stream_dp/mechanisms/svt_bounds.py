"""Lower confidence bounds that hold *given that the answer was published* (selective inference).

Seed 003's Lemma 3 (:class:`~stream_dp.mechanisms.svt_noise.GapTail`) gives ``P(q ≥ γ + T − t) = conf`` for
the noise of one query *before* the branch test. But a gap is only published when its query passed the
test, and passing it favours upward noise: for counts near the threshold the Lemma-3 bound covers far less
often than stated (issue 16 measured 0.84–0.92 at 95 % for counts 100–200). This module inverts the
distribution of the released gap **conditional on the branch that published it**, which makes the
coverage conditional on publication at least ``conf`` for every true count.

Model of one query (module :mod:`stream_dp.mechanisms.svt`, monotone or not): with ``d = q − T`` and the
centred noises ``ν`` (threshold, rate ``c``), ``ξ`` (top, rate ``a_top``), ``η`` (middle, rate ``a_mid``),
all independent,

- top branch: published iff ``d + ξ − ν ≥ 2σ``; ``Γ = d + ξ − ν``;
- middle branch: published iff ``d + ξ − ν < 2σ`` (only when adaptive) and ``d + η − ν ≥ 0``;
  ``Γ = d + η − ν``.

``U(d) = P_d(Γ ≥ γ | published in this branch)`` is computed by integrating (continuous noise) or summing
(geometric noise) over ``ν``, and the bound is ``T + inf{d : U(d) > 1 − conf}`` (an integer for geometric
noise: the smallest integer ``d``). ``U`` increases with ``d`` (the noise densities are log-concave), so
the bound is above the true count only when the observed gap lies in the upper ``1 − conf`` tail of its
own conditional law: probability at most ``1 − conf``. The statement is for one query given its own
branch, over the noise of that query and the threshold; the Monte-Carlo test
(tests/unit/test_svt_bounds.py) pins it per branch and for the released alerts stream.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from stream_dp.mechanisms.svt_noise import noise_offset

_GRID = 6001  # integration points over the threshold noise (continuous families)
_SPAN = 40.0  # the grid covers ±40 noise scales of the threshold noise


def _cdf(noise: str, rate: float, x: np.ndarray) -> np.ndarray:
    """``P(N ≤ x)`` of the centred noise of ``rate`` (vectorised)."""
    if noise == "laplace":
        return np.where(x < 0, 0.5 * np.exp(np.minimum(rate * x, 0.0)), 1.0 - 0.5 * np.exp(-rate * np.abs(x)))
    if noise == "exponential":
        y = x + 1.0 / rate
        return np.where(y < 0, 0.0, -np.expm1(-rate * np.maximum(y, 0.0)))
    if noise == "geometric":
        n = np.floor(x + noise_offset(noise, rate) + 1e-9)  # G ≤ n with G ∈ {1, 2, …}
        return np.where(n < 1, 0.0, -np.expm1(-rate * np.maximum(n, 0.0)))
    raise ValueError(f"unknown noise {noise!r}")


def _cdf_below(noise: str, rate: float, x: np.ndarray) -> np.ndarray:
    """``P(N < x)``: equal to the CDF for continuous noise; ``P(N ≤ ⌈x⌉ − 1)`` for integer noise."""
    if noise == "geometric":
        return _cdf(noise, rate, np.ceil(x - 1e-9) - 1.0)
    return _cdf(noise, rate, x)


@lru_cache(maxsize=64)
def _threshold_noise_grid(noise: str, rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Points and probability weights of the centred threshold noise ``ν`` (exact pmf for geometric)."""
    scale = 1.0 / rate
    if noise == "geometric":
        offset = noise_offset(noise, rate)
        top = int(math.ceil(_SPAN * scale)) + 2
        g = np.arange(1, top + 1, dtype=np.float64)
        pmf = -math.expm1(-rate) * np.exp(-rate * (g - 1.0))
        return g - offset, pmf / pmf.sum()
    if noise == "laplace":
        v = np.linspace(-_SPAN * scale, _SPAN * scale, _GRID)
        w = 0.5 * rate * np.exp(-rate * np.abs(v))
    elif noise == "exponential":
        v = np.linspace(-scale, (_SPAN - 1.0) * scale, _GRID)
        w = rate * np.exp(-rate * (v + scale))
    else:
        raise ValueError(f"unknown noise {noise!r}")
    w = w * np.gradient(v)
    return v, w / w.sum()


@dataclass(frozen=True)
class BranchSelection:
    """What published an answer: the noise family, the branch, the rates and the top test's ``2σ``."""

    noise: str
    branch: str  # "top" or "middle"
    adaptive: bool
    top_rate: float
    middle_rate: float
    threshold_rate: float
    top_margin: float  # 2σ

    def upper_tail(self, d: float, gap: float) -> float:
        """``U(d) = P_d(Γ ≥ gap | published in this branch)``."""
        v, w = _threshold_noise_grid(self.noise, self.threshold_rate)
        below_top = _cdf_below(self.noise, self.top_rate, self.top_margin + v - d)  # P(d + ξ − ν < 2σ | ν)
        if self.branch == "top":
            # published: ξ ≥ 2σ + ν − d; Γ ≥ gap: ξ ≥ gap + ν − d
            published = 1.0 - below_top
            both = 1.0 - _cdf_below(self.noise, self.top_rate, np.maximum(gap, self.top_margin) + v - d)
        else:
            gate = below_top if self.adaptive else 1.0
            published = (1.0 - _cdf_below(self.noise, self.middle_rate, v - d)) * gate
            both = (1.0 - _cdf_below(self.noise, self.middle_rate, max(gap, 0.0) + v - d)) * gate
        den = float(np.dot(w, published))
        if den <= 1e-300:
            return 1.0 if gap <= d else 0.0
        return min(1.0, float(np.dot(w, both)) / den)

    def upper_tails(self, d: np.ndarray, gap: np.ndarray) -> np.ndarray:
        """:meth:`upper_tail` of each pair ``(d[i], gap[i])`` at once: the same elementwise arithmetic, one
        row per pair and the same per-row dot products, so each value equals :meth:`upper_tail`'s."""
        v, w = _threshold_noise_grid(self.noise, self.threshold_rate)
        d_col, gap = d[:, None], np.asarray(gap, dtype=np.float64)
        below_top = _cdf_below(self.noise, self.top_rate, (self.top_margin + v)[None, :] - d_col)
        if self.branch == "top":
            published = 1.0 - below_top
            both = 1.0 - _cdf_below(self.noise, self.top_rate,
                                    (np.maximum(gap, self.top_margin)[:, None] + v[None, :]) - d_col)
        else:
            gate = below_top if self.adaptive else 1.0
            published = (1.0 - _cdf_below(self.noise, self.middle_rate, v[None, :] - d_col)) * gate
            both = (1.0 - _cdf_below(self.noise, self.middle_rate,
                                     (np.maximum(gap, 0.0)[:, None] + v[None, :]) - d_col)) * gate
        out = np.empty(len(d))
        for i in range(len(d)):
            den = float(np.dot(w, published[i]))
            if den <= 1e-300:
                out[i] = 1.0 if gap[i] <= d[i] else 0.0
            else:
                out[i] = min(1.0, float(np.dot(w, both[i])) / den)
        return out

    def lower_bounds_of_gaps(self, gaps: Sequence[float], confidence: float) -> list[float]:
        """:meth:`lower_bound_of_gap` of every gap. For geometric noise (a small exact pmf, where each
        evaluation's cost is numpy's per-call overhead) the integer bisections run side by side: one
        :meth:`upper_tails` per step for all gaps. Every gap takes the steps it would take alone, so each
        bound equals :meth:`lower_bound_of_gap`'s. Continuous noise integrates over a 6001-point grid, where
        side by side is not faster: one gap at a time."""
        if self.noise != "geometric" or len(gaps) < 2:
            return [self.lower_bound_of_gap(g, confidence) for g in gaps]
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        alpha = 1.0 - confidence
        scale = 1.0 / min(self.threshold_rate, self.top_rate, self.middle_rate)
        gap = np.asarray(gaps, dtype=np.float64)
        lo, hi = gap - 60.0 * scale, gap + 5.0 * scale
        while (low := self.upper_tails(lo, gap) > alpha).any():
            lo = np.where(low, lo - 60.0 * scale, lo)
        while (high := self.upper_tails(hi, gap) <= alpha).any():
            hi = np.where(high, hi + 10.0 * scale, hi)
        lo_i, hi_i = np.floor(lo), np.ceil(hi)  # U(lo_i) ≤ α < U(hi_i) for every gap
        while (active := hi_i - lo_i > 1).any():
            mid = np.floor((lo_i[active] + hi_i[active]) / 2)
            above = self.upper_tails(mid, gap[active]) > alpha
            hi_i[active] = np.where(above, mid, hi_i[active])
            lo_i[active] = np.where(above, lo_i[active], mid)
        return [float(x) for x in hi_i]

    def lower_bound_of_gap(self, gap: float, confidence: float) -> float:
        """``inf{d : U(d) > 1 − confidence}`` (smallest integer ``d`` for geometric noise)."""
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        alpha = 1.0 - confidence
        scale = 1.0 / min(self.threshold_rate, self.top_rate, self.middle_rate)
        lo, hi = gap - 60.0 * scale, gap + 5.0 * scale
        while self.upper_tail(lo, gap) > alpha:
            lo -= 60.0 * scale
        while self.upper_tail(hi, gap) <= alpha:
            hi += 10.0 * scale
        if self.noise == "geometric":
            lo_i, hi_i = math.floor(lo), math.ceil(hi)  # U(lo_i) ≤ α < U(hi_i)
            while hi_i - lo_i > 1:
                mid = (lo_i + hi_i) // 2
                if self.upper_tail(mid, gap) > alpha:
                    hi_i = mid
                else:
                    lo_i = mid
            return float(hi_i)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if self.upper_tail(mid, gap) > alpha:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-6 * max(1.0, abs(hi)):
                break
        return hi
