"""Composition and reference bounds pinned to known numbers (DR19 §4.2 and Appendix A; Bun & Steinke 2016)."""

from __future__ import annotations

import math

import pytest

from stream_dp.accounting.composition import (
    Spent,
    compose,
    dr19_range_bounded_epsilon,
    optimal_composition_delta,
    loose_zcdp_to_epsilon,
    optimal_composition_epsilon,
    zcdp_to_epsilon,
)
from stream_dp.accounting.events import PureDpEvent, RangeBoundedEvent, ZCdpEvent

# DR19 Appendix A, recomputed, δ = 1e-6: (per-step ε, k) → ratio optimal(general DP) / DR19 BR bound
TABLE_RATIOS = {
    (0.1, 10): 1.13, (0.1, 50): 1.51, (0.1, 100): 1.53,
    (0.25, 10): 1.05, (0.25, 50): 1.44, (0.25, 100): 1.44,
    (0.5, 10): 1.00, (0.5, 50): 1.31, (0.5, 100): 1.30,
    (1.0, 10): 1.00, (1.0, 50): 1.09, (1.0, 100): 1.10,
}
# the same table's absolute values for ε = 0.1
TABLE_VALUES = {10: (0.999, 0.881), 50: (3.17, 2.11), 100: (4.78, 3.13)}


@pytest.mark.parametrize("eps,k", list(TABLE_RATIOS))
def test_section_1_5_ratio_table(eps, k):
    ratio = optimal_composition_epsilon(eps, k, 1e-6) / dr19_range_bounded_epsilon(eps, k, 1e-6)
    assert ratio == pytest.approx(TABLE_RATIOS[(eps, k)], abs=0.006)  # the table has 2 decimals


@pytest.mark.parametrize("k", list(TABLE_VALUES))
def test_section_1_5_values(k):
    optimal, br = TABLE_VALUES[k]
    assert optimal_composition_epsilon(0.1, k, 1e-6) == pytest.approx(optimal, abs=0.006)
    assert dr19_range_bounded_epsilon(0.1, k, 1e-6) == pytest.approx(br, abs=0.006)


def test_dr19_bound_terms_by_hand():
    eps, k, dp = 0.1, 10, 1e-6
    br = k * eps**2 / 2 + eps * math.sqrt(k / 2 * math.log(1 / dp))
    assert dr19_range_bounded_epsilon(eps, k, dp) == pytest.approx(br, rel=1e-15)
    assert dr19_range_bounded_epsilon(2.0, 3, 1e-6) == 6.0  # large ε: basic composition wins


def test_optimal_composition_edges():
    # δ needed for ε_g = kε is 0 (basic composition is exact); for ε_g = 0, δ = total variation distance
    assert optimal_composition_delta(0.5, 4, 2.0) == 0.0
    one = optimal_composition_delta(1.0, 1, 0.0)
    assert one == pytest.approx((math.e - 1) / (math.e + 1))  # one ε-DP randomized response at ε_g = 0
    # k = 1: δ = (e − e^{ε_g})/(1 + e) for ε_g ≤ 1, so ε_g = ln(e − δ(1 + e)), just below ε
    assert optimal_composition_epsilon(1.0, 1, 1e-6) == pytest.approx(math.log(math.e - 1e-6 * (1 + math.e)), abs=1e-10)
    with pytest.raises(ValueError):
        optimal_composition_epsilon(0.1, 0, 1e-6)
    with pytest.raises(ValueError):
        dr19_range_bounded_epsilon(0.1, 10, 0.0)


def test_zcdp_conversion_pins_bun_steinke():
    # the classic conversion is kept as loose_zcdp_to_epsilon (the cap of the optimal one)
    assert loose_zcdp_to_epsilon(0.5, 1e-6) == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e6)), rel=1e-15)
    assert zcdp_to_epsilon(0.5, 1e-6) < loose_zcdp_to_epsilon(0.5, 1e-6)
    assert zcdp_to_epsilon(0.0, 1e-6) == 0.0
    for bad in ((-0.1, 1e-6), (0.1, 0.0), (0.1, 1.0)):
        for conversion in (zcdp_to_epsilon, loose_zcdp_to_epsilon):
            with pytest.raises(ValueError):
                conversion(*bad)


def test_spent_reports_smaller_valid_epsilon_and_delta_with_delta_prime():
    # 10 outcomes of ε = 0.1 range-bounded: zCDP route (CKS20 Cor. 13, ≈ 0.776; classic
    # 0.0125 + 2·sqrt(0.0125·ln 1e7) ≈ 0.910) beats basic 1.0
    s = compose([RangeBoundedEvent(0.1, count=10, delta=1e-7)])
    assert s.rho == pytest.approx(0.0125)
    assert s.epsilon(1e-7) == zcdp_to_epsilon(s.rho, 1e-7) == pytest.approx(0.776134126513, abs=1e-11)
    assert s.epsilon(1e-7) < 0.0125 + 2 * math.sqrt(0.0125 * math.log(1e7))
    assert s.delta(1e-7) == pytest.approx(2e-7)
    # one pure ε = 0.3: basic 0.3 beats zCDP 0.045 + 2·sqrt(0.045·ln 1e7) ≈ 1.88
    assert compose([PureDpEvent(0.3)]).epsilon(1e-7) == 0.3
    # zCDP events: basic route unavailable
    z = compose([ZCdpEvent(0.01), PureDpEvent(0.1)])
    assert z.basic_epsilon == math.inf and z.epsilon(1e-7) == pytest.approx(zcdp_to_epsilon(0.015, 1e-7))
    assert Spent() + z == z
