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

``U(d) = P_d(Γ ≥ γ | published in this branch)`` is computed by integrating over ``ν`` (continuous noise) or,
for geometric noise, in closed form (:func:`_geometric_mass_after`: the sum over ``ν``'s geometric pmf splits
into at most three geometric series), and the bound is ``T + inf{d : U(d) > 1 − conf}`` (an integer for geometric
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


def _series_factor(c: float, rho: float) -> float:
    """``(1 − e^{−c}) / (1 − e^{−(c+ρ)})``: the sum ``Σ_{h>m} (1−q)q^{h−1} r^{h}`` is this times ``r^{m+1}q^m``
    (``q = e^{−c}``, ``r = e^{−ρ}``)."""
    return math.expm1(-c) / math.expm1(-(c + rho))


def _geometric_mass_after(c: float, after: np.ndarray, rho: float, shift: np.ndarray) -> np.ndarray:
    """``Σ_{h>after} w_h e^{−ρ·max(0, shift+h)}`` with ``w_h = (1−e^{−c}) e^{−c(h−1)}``, ``h = 1, 2, …``: the
    threshold noise's geometric pmf against the tail ``P(G ≥ ·)`` of a geometric noise of rate ``ρ``.

    The terms with ``shift + h ≤ 0`` sum to ``q^{after} − q^{m}`` (``m = max(after, −shift)``), the rest is one
    geometric series. ``after ≥ 0`` and ``shift`` are integer-valued arrays."""
    m = np.maximum(after, -shift)
    flat = np.exp(-c * after) - np.exp(-c * m)
    mass: np.ndarray = flat + _series_factor(c, rho) * np.exp(-rho * (shift + m + 1.0) - c * m)
    return mass


def _geometric_mass_after2(c: float, after: np.ndarray, rho1: float, shift1: np.ndarray, rho2: float,
                           shift2: np.ndarray) -> np.ndarray:
    """``Σ_{h>after} w_h e^{−ρ1·max(0, shift1+h)} e^{−ρ2·(shift2+h)}`` for ``shift2 + after ≥ 0`` (the second
    tail is below one for every term): two geometric series, split where the first tail starts."""
    m = np.maximum(after, -shift1)
    only2 = _series_factor(c, rho2) * (np.exp(-rho2 * (shift2 + after + 1.0) - c * after)
                                       - np.exp(-rho2 * (shift2 + m + 1.0) - c * m))
    both = _series_factor(c, rho1 + rho2) * np.exp(-rho1 * (shift1 + m + 1.0) - rho2 * (shift2 + m + 1.0) - c * m)
    mass: np.ndarray = only2 + both
    return mass


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
        """``U(d) = P_d(Γ ≥ gap | published in this branch)``: in closed form for geometric noise, else on the
        grid (:meth:`upper_tail_on_grid`)."""
        if self.noise == "geometric":
            return float(self._geometric_upper_tails(np.array([float(d)]), np.array([float(gap)]))[0])
        return self.upper_tail_on_grid(d, gap)

    def upper_tail_on_grid(self, d: float, gap: float) -> float:
        """``U(d)`` summed over a grid of the threshold noise (the exact pmf, truncated at 40 noise scales, for
        geometric noise: the reference the closed form is tested against)."""
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
        """:meth:`upper_tail` of each pair ``(d[i], gap[i])`` at once. Geometric noise: the closed form,
        elementwise. Continuous noise: the same elementwise arithmetic as :meth:`upper_tail_on_grid`, one row
        per pair and the same per-row dot products, so each value equals the scalar one."""
        if self.noise == "geometric":
            return self._geometric_upper_tails(np.asarray(d, dtype=np.float64), np.asarray(gap, dtype=np.float64))
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

    def _geometric_upper_tails(self, d: np.ndarray, gap: np.ndarray) -> np.ndarray:
        """``U(d)`` for geometric noise in closed form. Every noise is integer-valued (``G − o`` with ``G ≥ 1``
        geometric and ``o`` the integer offset), so ``P(N ≥ x) = e^{−ρ·max(0, ⌈x⌉ − 1 + o)}``; with the
        threshold noise ``ν = h − o_ν`` each tail is ``e^{−ρ·max(0, shift + h)}`` for an integer ``shift``, and
        the sums over ``h`` are :func:`_geometric_mass_after` (one tail) and :func:`_geometric_mass_after2`
        (the middle branch's tail times the adaptive gate ``1 − P(top test passes)``, which is zero while
        ``h ≤ −shift`` of the top test)."""
        c = self.threshold_rate
        o_nu = noise_offset("geometric", c)
        none_before = np.zeros_like(d)

        def shift(margin: np.ndarray | float, rate: float) -> np.ndarray:  # ⌈margin − d⌉ − o_ν + o − 1
            return np.ceil(margin - d - 1e-9) - o_nu + noise_offset("geometric", rate) - 1.0

        top_shift = shift(self.top_margin, self.top_rate)
        if self.branch == "top":
            published = _geometric_mass_after(c, none_before, self.top_rate, top_shift)
            both = _geometric_mass_after(c, none_before, self.top_rate,
                                         shift(np.maximum(gap, self.top_margin), self.top_rate))
        else:
            mid_shift = shift(0.0, self.middle_rate)
            gap_shift = shift(np.maximum(gap, 0.0), self.middle_rate)
            if self.adaptive:
                gate_from = np.maximum(0.0, -top_shift)  # the gate is 0 for h ≤ gate_from
                published = (_geometric_mass_after(c, gate_from, self.middle_rate, mid_shift)
                             - _geometric_mass_after2(c, gate_from, self.middle_rate, mid_shift, self.top_rate, top_shift))
                both = (_geometric_mass_after(c, gate_from, self.middle_rate, gap_shift)
                        - _geometric_mass_after2(c, gate_from, self.middle_rate, gap_shift, self.top_rate, top_shift))
            else:
                published = _geometric_mass_after(c, none_before, self.middle_rate, mid_shift)
                both = _geometric_mass_after(c, none_before, self.middle_rate, gap_shift)
        ok = published > 1e-300
        ratio = np.minimum(1.0, both / np.where(ok, published, 1.0))
        return np.where(ok, ratio, np.where(gap <= d, 1.0, 0.0))

    def limit_upper_tail(self, gap: np.ndarray) -> np.ndarray | None:
        """``U(−∞)``, the limit of ``U(d)`` as ``d → −∞``, for the one-sided families (geometric, exponential;
        None for Laplace). Their threshold noise is bounded below, so far below the threshold an answer is
        published only on a large draw of its branch noise, whose overshoot past the branch test is
        memoryless: ``U = exp(−ρ·excess)`` once ``d`` is low enough (exactly, not only in the limit), with
        ``ρ`` the branch rate and ``excess`` the gap's excess over the test's margin (``2σ`` top, ``0``
        middle; rounded up to integers for geometric noise, whose search runs over integer ``d``). When this
        exceeds ``1 − confidence`` no ``d`` is excluded: the answer bounds nothing beyond what is known a
        priori (the ``floor``). Laplace threshold noise reaches publication through its lower tail too, and
        its limit depends on both rates: not computed here."""
        if self.noise == "laplace":
            return None
        gap = np.asarray(gap, dtype=np.float64)
        margin = self.top_margin if self.branch == "top" else 0.0
        rate = self.top_rate if self.branch == "top" else self.middle_rate
        if self.noise == "geometric":
            excess = np.ceil(np.maximum(gap, margin) - 1e-9) - math.ceil(margin - 1e-9)
        else:
            excess = np.maximum(gap, margin) - margin
        limit: np.ndarray = np.exp(-rate * excess)
        return limit

    def lower_bounds_of_gaps(self, gaps: Sequence[float], confidence: float,
                             floor: float = -math.inf) -> list[float]:
        """:meth:`lower_bound_of_gap` of every gap (``floor``: the least value ``d`` can take). For geometric
        noise the integer bisections run side by side (one closed-form :meth:`upper_tails` per step for all
        gaps); ``U`` is evaluated elementwise and every gap takes the steps it would take alone, so each bound
        equals the bound of that gap alone. Continuous noise integrates over a 6001-point grid, where side by
        side is not faster: one gap at a time."""
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if self.noise != "geometric":
            return [self.lower_bound_of_gap(g, confidence, floor) for g in gaps]
        if not len(gaps):
            return []
        alpha = 1.0 - confidence
        least = math.ceil(floor - 1e-9) if math.isfinite(floor) else -math.inf  # the smallest d allowed
        gap = np.asarray(gaps, dtype=np.float64)
        bounds = np.full(len(gap), float(least))  # the answers whose U(−∞) > α exclude no d ≥ floor
        limit = self.limit_upper_tail(gap)
        if limit is None:  # pragma: no cover - geometric noise has one
            raise AssertionError("no limit upper tail for geometric noise")
        todo = np.asarray(limit <= alpha)
        if todo.any():
            bounds[todo] = self._integer_bisections(gap[todo], alpha, least)
        return [float(x) for x in np.minimum(bounds, gap)]

    def _integer_bisections(self, gap: np.ndarray, alpha: float, least: float) -> np.ndarray:
        """``min(gap, the smallest integer d ≥ least with U(d) > α)`` for each gap (``U(−∞) ≤ α`` for each)."""
        scale = 1.0 / min(self.threshold_rate, self.top_rate, self.middle_rate)
        lo, hi = np.maximum(np.floor(gap - 60.0 * scale), least - 1), gap.copy()

        def upper_tails_from_floor(d: np.ndarray, g: np.ndarray) -> np.ndarray:  # U, and −∞ below the floor
            return np.where(d < least, -math.inf, self.upper_tails(np.maximum(d, least), g))

        while (low := upper_tails_from_floor(lo, gap) > alpha).any():
            lo = np.where(low, np.maximum(lo - math.ceil(60.0 * scale), least - 1), lo)
        # U(lo) ≤ α (−∞ below the floor); U non-decreasing: the smallest integer d with U(d) > α is in (lo, gap]
        # when U(gap) > α, else the bound is capped at gap (the bisection leaves hi = gap)
        while (active := hi - lo > 1).any():
            mid = np.floor((lo[active] + hi[active]) / 2)
            above = self.upper_tails(mid, gap[active]) > alpha
            hi[active] = np.where(above, mid, hi[active])
            lo[active] = np.where(above, lo[active], mid)
        return hi

    def lower_bound_of_gap(self, gap: float, confidence: float, floor: float = -math.inf) -> float:
        """``min(gap, inf{d ≥ floor : U(d) > 1 − confidence})`` (integer ``d`` for geometric noise).

        ``floor`` is the least value ``d`` can take, known a priori (``−T`` for counts against threshold
        ``T``); the bound is the floor (``−∞`` without one) when ``U(−∞) > 1 − confidence``
        (:meth:`limit_upper_tail`): the answer then excludes no ``d``. It is capped at the released gap: a
        bound above it comes only from the rare answers that every ``d`` makes unlikely (``U ≤ α`` up to the
        gap and beyond), and lowering a lower bound keeps its coverage."""
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if self.noise == "geometric":
            return self.lower_bounds_of_gaps([gap], confidence, floor)[0]
        alpha = 1.0 - confidence
        limit = self.limit_upper_tail(np.array([gap]))
        if (limit is not None and limit[0] > alpha) or (math.isfinite(floor) and self.upper_tail(floor, gap) > alpha):
            return min(floor, gap)
        if self.upper_tail(gap, gap) <= alpha:
            return gap
        scale = 1.0 / min(self.threshold_rate, self.top_rate, self.middle_rate)
        lo, hi = max(gap - 60.0 * scale, floor), gap
        while self.upper_tail(lo, gap) > alpha:
            lo = max(lo - 60.0 * scale, floor)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if self.upper_tail(mid, gap) > alpha:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-6 * max(1.0, abs(hi)):
                break
        return hi
