"""Composition of DP events: approximate zCDP and basic composition.

The ledger's currency is approximate zCDP (ρ, δ) (docs/privacy.md §2): composition adds ρ and δ;
the (ε, δ)-DP guarantee shown and capped is ε = :func:`zcdp_to_epsilon` (ρ, δ′) -- the optimal conversion of
Canonne, Kamath & Steinke 2020 (Cor. 13) -- with total δ = Σδ + δ′. Basic composition (Σε, Σδ) is tracked
too; the reported ε is the smaller valid one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from stream_dp.accounting.events import DpEvent

# Golden-section search over u = ln(α − 1) in [_U_LOW, _U_HIGH] with _ORDER_STEPS steps. The same
# constants, operations and order are in store/lua/ledger_common.lua (zcdp_to_epsilon), so the ledger script
# and this module compute the same doubles.
_U_LOW = -30.0
_U_HIGH = 30.0
_ORDER_STEPS = 100
# Relative allowance for the rounding of the three-term sum below (a few ulps each; 1e-12 is ~4500 ulps):
# the reported ε is never below the exact value of the bound at the chosen order.
_ROUNDING_ALLOWANCE = 1e-12


def loose_zcdp_to_epsilon(rho: float, delta_prime: float) -> float:
    """The classic conversion ρ + 2·sqrt(ρ·ln(1/δ′)) (Bun & Steinke 2016, Prop. 1.3): the ledger's rule
    before it switched to :func:`zcdp_to_epsilon`, which is never above it.

    >>> round(loose_zcdp_to_epsilon(0.5, 1e-6), 6)
    5.756522
    """
    _check_conversion_args(rho, delta_prime)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta_prime))


def _order_terms(rho: float, log_inv_delta: float, alpha: float) -> tuple[float, float, float]:
    """The three terms of :func:`cks_epsilon_at_order`: αρ, (ln(1/δ) − ln α)/(α − 1), ln(1 − 1/α)."""
    return alpha * rho, (log_inv_delta - math.log(alpha)) / (alpha - 1), math.log(1 - 1 / alpha)


def cks_epsilon_at_order(rho: float, log_inv_delta: float, alpha: float) -> float:
    """ε of the (ε, δ)-DP guarantee of ρ-zCDP read at one Rényi order α > 1 (CKS20, Prop. 12 / Cor. 13):

        ε(α) = αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α).

    It is CKS20 Cor. 13's δ = exp((α−1)(αρ−ε))/(α−1) · (1−1/α)^α solved for ε (ρ-zCDP is (α, αρ)-RDP for
    every α > 1, and Prop. 12 turns (α, τ)-RDP into (ε, δ)-DP). Every α > 1 gives a valid ε; the bound is the
    infimum over α. Compared with the classic αρ + ln(1/δ)/(α − 1), the two extra terms are negative.
    """
    a, b, c = _order_terms(rho, log_inv_delta, alpha)
    return a + b + c


def _rounded_up(rho: float, log_inv_delta: float, alpha: float) -> float:
    """:func:`cks_epsilon_at_order` plus the rounding allowance (relative to the terms' magnitudes)."""
    a, b, c = _order_terms(rho, log_inv_delta, alpha)
    return a + b + c + _ROUNDING_ALLOWANCE * (abs(a) + abs(b) + abs(c))


def zcdp_to_epsilon(rho: float, delta_prime: float) -> float:
    """ε of the (ε, δ′)-DP guarantee implied by ρ-zCDP, by the optimal conversion of Canonne, Kamath &
    Steinke 2020 ("The Discrete Gaussian for Differential Privacy"), Corollary 13:

        ρ-zCDP ⇒ (ε, δ)-DP for δ = inf_{α>1} exp((α−1)(αρ−ε))/(α−1) · (1 − 1/α)^α,

    equivalently ε = inf_{α>1} αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α) (:func:`cks_epsilon_at_order`).

    The infimum is found by a fixed golden-section search over u = ln(α − 1) ∈ [−30, 30] (100 steps, the
    same arithmetic as the ledger's Lua script). Soundness does not rest on the search finding the exact
    minimum: the bound holds at *every* α > 1, and the value returned is the bound at the order the search
    ends on, rounded up by a relative 1e-12 of its terms, capped by the classic bound
    :func:`loose_zcdp_to_epsilon` (also valid) and floored at 0. So the result is never below the true
    CKS20 bound and never above the classic one. ρ = 0 gives 0, ρ = ∞ gives ∞.

    >>> round(zcdp_to_epsilon(0.5, 1e-6), 6)
    5.221534
    >>> zcdp_to_epsilon(0.5, 1e-6) < loose_zcdp_to_epsilon(0.5, 1e-6)
    True
    """
    _check_conversion_args(rho, delta_prime)
    log_inv_delta = math.log(1 / delta_prime)
    loose = rho + 2 * math.sqrt(rho * log_inv_delta)
    if rho == 0 or rho == math.inf:
        return loose
    ratio = (math.sqrt(5.0) - 1) / 2
    lo, hi = _U_LOW, _U_HIGH
    x1 = hi - ratio * (hi - lo)
    x2 = lo + ratio * (hi - lo)
    f1 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x1))
    f2 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x2))
    for _ in range(_ORDER_STEPS):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - ratio * (hi - lo)
            f1 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x1))
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + ratio * (hi - lo)
            f2 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x2))
    best = x1 if f1 <= f2 else x2
    eps = _rounded_up(rho, log_inv_delta, 1 + math.exp(best))
    if loose < eps:
        eps = loose
    if eps < 0:
        eps = 0.0
    return eps


def _check_conversion_args(rho: float, delta_prime: float) -> None:
    if not rho >= 0:
        raise ValueError(f"rho must be a number >= 0, got {rho!r}")
    if not 0 < delta_prime < 1:
        raise ValueError(f"delta_prime must be in (0, 1), got {delta_prime!r}")


@dataclass(frozen=True)
class Spent:
    """Composed totals of a set of events."""

    rho: float = 0.0
    zcdp_delta: float = 0.0
    basic_epsilon: float = 0.0
    basic_delta: float = 0.0

    def __add__(self, other: "Spent") -> "Spent":
        return Spent(
            self.rho + other.rho,
            self.zcdp_delta + other.zcdp_delta,
            self.basic_epsilon + other.basic_epsilon,
            self.basic_delta + other.basic_delta,
        )

    def epsilon(self, delta_prime: float) -> float:
        """The smallest valid ε of the two accountings, for total δ :meth:`delta` ``(delta_prime)``.

        Basic composition needs no δ′, but reporting one ε against one δ keeps the statement simple: the
        zCDP route gives (ε_z, Σδ + δ′), the basic route (Σε, Σδ) ⊆ (Σε, Σδ + δ′).
        """
        return min(zcdp_to_epsilon(self.rho, delta_prime), self.basic_epsilon)

    def delta(self, delta_prime: float) -> float:
        """Total δ of the guarantee: Σδ of the events plus the conversion δ′."""
        return max(self.zcdp_delta, self.basic_delta) + delta_prime


def compose(events: Iterable[DpEvent]) -> Spent:
    """Compose events by adding their (ρ, δ) and their basic (ε, δ).

    >>> from stream_dp.accounting.events import PureDpEvent
    >>> compose([PureDpEvent(1.0), PureDpEvent(1.0)]) == compose([PureDpEvent(1.0, count=2)])
    True
    """
    total = Spent()
    for event in events:
        rho, zdelta = event.zcdp()
        beps, bdelta = event.basic()
        total = total + Spent(rho, zdelta, beps, bdelta)
    return total


# --------------------------------------------------------------------------------------------------
# Reference bounds for comparison with the papers (not used by the ledger)
# --------------------------------------------------------------------------------------------------


def _check_composition_args(epsilon: float, k: int, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def dr19_range_bounded_epsilon(epsilon: float, k: int, delta_prime: float) -> float:
    """DR19's bound (§4.2) for the adaptive composition of k ε-range-bounded mechanisms.

    The result is ε′ of an (ε′, δ′)-DP guarantee, the minimum of basic composition kε, the DRV10 advanced
    composition kε(e^ε−1)/(e^ε+1) + ε·sqrt(2k·ln(1/δ′)) and the range-bounded (Azuma) bound
    kε²/2 + ε·sqrt(k/2·ln(1/δ′)) -- as in the authors' code (ε²/2, not the later ε²/8). A reference number
    to compare with the paper; the ledger accounts via zCDP (ε²/8 per outcome) instead.

    >>> round(dr19_range_bounded_epsilon(0.1, 10, 1e-6), 4)
    0.8811
    """
    _check_composition_args(epsilon, k, delta_prime)
    log_term = math.log(1 / delta_prime)
    basic = k * epsilon
    advanced = k * epsilon * math.expm1(epsilon) / (math.exp(epsilon) + 1) + epsilon * math.sqrt(2 * k * log_term)
    bounded_range = k * epsilon**2 / 2 + epsilon * math.sqrt(k / 2 * log_term)
    return min(basic, advanced, bounded_range)


def optimal_composition_delta(epsilon: float, k: int, epsilon_total: float) -> float:
    """Smallest δ such that k-fold composition of ε-DP mechanisms is (epsilon_total, δ)-DP (KOV15 / MV16).

    δ = (1+e^ε)^(−k) · Σ_{l=⌈(ε_g + kε)/(2ε)⌉}^{k} C(k,l)·(e^{lε} − e^{ε_g}·e^{(k−l)ε})   (DR19 Appendix A).
    Terms are evaluated in log space so moderate k does not overflow.

    >>> optimal_composition_delta(1.0, 3, 3.0)
    0.0
    """
    if epsilon_total < 0:
        raise ValueError(f"epsilon_total must be >= 0, got {epsilon_total!r}")
    _check_composition_args(epsilon, k, 0.5)
    log_norm = k * math.log1p(math.exp(epsilon))
    start = max(0, math.ceil((epsilon_total + k * epsilon) / (2 * epsilon)))
    total = 0.0
    for l in range(start, k + 1):
        log_c = math.lgamma(k + 1) - math.lgamma(l + 1) - math.lgamma(k - l + 1)
        a = log_c + l * epsilon - log_norm
        b = log_c + epsilon_total + (k - l) * epsilon - log_norm
        if b < a:
            total += math.exp(a) * -math.expm1(b - a)
    return total


def optimal_composition_epsilon(epsilon: float, k: int, delta: float) -> float:
    """Smallest ε_g with k-fold composition of general ε-DP mechanisms (ε_g, δ)-DP (DR19 Appendix A).

    Bisection on :func:`optimal_composition_delta`, which decreases in ε_g. DR19's Appendix A comparison is the ratio
    of this to :func:`dr19_range_bounded_epsilon` (above 1: range-boundedness beats optimal composition).

    >>> round(optimal_composition_epsilon(0.1, 10, 1e-6), 3)
    0.999
    """
    _check_composition_args(epsilon, k, delta)
    lo, hi = 0.0, k * epsilon
    if optimal_composition_delta(epsilon, k, lo) <= delta:
        return 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if optimal_composition_delta(epsilon, k, mid) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return hi
