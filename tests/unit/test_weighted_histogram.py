"""The per-user weighted histogram (docs/privacy.md §8d): each user's norm, the threshold's δ over every number of
keys a user can hold (exact, in 60-digit decimals), broken variants that must be caught, and the conversion of
scores to the released weighted counts."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from test_gaussian_histogram import exact_tail

from stream_dp.accounting.events import ZCdpEvent
from stream_dp.mechanisms.gaussian_histogram import HistogramResult, HistogramRow, calibrate_histogram, rho_for_epsilon
from stream_dp.mechanisms.weighted_histogram import (
    WEIGHT_UNIT,
    WeightedHistogramCalibration,
    calibrate_weighted_histogram,
    rows_in_count_units,
    user_weight,
    weighted_histogram,
    weighted_scores,
    weighted_selection_delta,
    weighted_threshold,
)


@pytest.mark.parametrize("unit", [1, 4, WEIGHT_UNIT, 100])
def test_each_weight_is_the_largest_integer_keeping_the_users_norm_within_u_sqrt_delta(unit):
    for dk in range(1, 41):
        for m in range(1, 61):  # also m > Δ, which bounding never lets through
            w = user_weight(m, dk, unit)
            assert m * w * w <= unit * unit * dk < m * (w + 1) ** 2, (dk, m, w)
        assert user_weight(dk, dk, unit) == unit  # a user on Δ keys scores U on each: the uniform count × U


def test_a_weight_of_the_real_root_rounded_the_wrong_way_breaks_the_norm():
    """The broken variant: ⌈U·√(Δ/m)⌉ (or float rounding) instead of the integer floor."""
    broken = [(m, dk) for dk in range(1, 21) for m in range(1, dk + 1)
              if m * math.ceil(WEIGHT_UNIT * math.sqrt(dk / m)) ** 2 > WEIGHT_UNIT**2 * dk]
    assert broken  # rounding up overshoots the norm for most (m, Δ)


def test_scores_sum_each_users_weight_over_her_keys():
    pairs = [("solo", "a"), ("pair", "a"), ("pair", "b"), ("full", "a"), ("full", "b"), ("full", "c"),
             ("full", "d"), ("full", "e")]
    w = {m: user_weight(m, 5) for m in (1, 2, 5)}
    assert weighted_scores(pairs, max_keys_per_user=5) == {
        "a": w[1] + w[2] + w[5], "b": w[2] + w[5], "c": w[5], "d": w[5], "e": w[5]}
    assert (w[1], w[2], w[5]) == (35, 25, 16)
    # every user on Δ keys: the scores are U × the uniform counts
    full = [(f"u{i}", k) for i in range(7) for k in "abcde"]
    assert weighted_scores(full, max_keys_per_user=5) == {k: 7 * WEIGHT_UNIT for k in "abcde"}


def exact_weighted_delta(sigma2: Fraction, tau: int, dk: int, unit: int) -> Decimal:
    """max over m = 1 … Δ of 1 − (1 − P[Z ≥ τ − w_m])^m, from the definition in 60-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = 60
        return max(1 - (1 - exact_tail(sigma2, tau - user_weight(m, dk, unit))) ** m for m in range(1, dk + 1))


_EXACT_SLOW = pytest.mark.slow  # 1-4 s each: 60-digit tails over many thresholds (the fast tier keeps two)
CASES = [(Fraction(64), 4, 0.1, WEIGHT_UNIT),
         pytest.param(Fraction(2000), 5, 1e-6, WEIGHT_UNIT, marks=_EXACT_SLOW),
         pytest.param(Fraction(31705, 2), 5, 1e-7, WEIGHT_UNIT, marks=_EXACT_SLOW),
         pytest.param(Fraction(300), 20, 1e-6, 4, marks=_EXACT_SLOW), (Fraction(9), 3, 1e-3, 2)]


@pytest.mark.parametrize("sigma2,dk,delta,unit", CASES)
def test_the_threshold_delta_is_exactly_at_most_delta_and_tau_is_the_smallest(sigma2, dk, delta, unit):
    tau = weighted_threshold(sigma2=sigma2, delta=delta, max_keys_per_user=dk, unit=unit)
    assert exact_weighted_delta(sigma2, tau, dk, unit) <= Decimal(delta)
    assert exact_weighted_delta(sigma2, tau - 1, dk, unit) > Decimal(delta)
    got = weighted_selection_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=dk, unit=unit)
    assert float(exact_weighted_delta(sigma2, tau, dk, unit)) == pytest.approx(got, rel=1e-9)


def test_a_threshold_solved_for_users_on_delta_keys_only_is_caught():
    """The broken variant: τ from 1 − (1 − P[Z ≥ τ − w_Δ])^Δ alone (the uniform histogram's rule on scores). With
    little noise a user on one key (weight √Δ·U) clears it far too often."""
    sigma2, dk, delta = Fraction(64), 4, 0.1
    w_full = user_weight(dk, dk)
    broken = next(t for t in range(1, 1000)
                  if 1 - (1 - exact_tail(sigma2, t - w_full)) ** dk <= Decimal(delta))
    assert exact_weighted_delta(sigma2, broken, dk, WEIGHT_UNIT) > 4 * Decimal(delta)
    assert weighted_threshold(sigma2=sigma2, delta=delta, max_keys_per_user=dk) > broken


def test_the_calibration_costs_what_the_uniform_histogram_costs_at_the_same_epsilon():
    weighted = calibrate_weighted_histogram(epsilon=1.0, threshold_delta=1e-7, conversion_delta=1e-7,
                                            max_keys_per_user=5)
    uniform = calibrate_histogram(epsilon=1.0, threshold_delta=1e-7, conversion_delta=1e-7, max_keys_per_user=5)
    assert weighted.rho <= rho_for_epsilon(1.0, 1e-7)
    assert weighted.rho == pytest.approx(uniform.rho, rel=1e-4)  # both σ² rounded up to the same grid
    assert weighted.events() == (ZCdpEvent(weighted.rho, delta=1e-7, mechanism="weighted_histogram"),)
    # in count units the threshold is no higher: users on Δ keys set it, and the finer grid of scores helps
    assert weighted.threshold / weighted.unit <= uniform.threshold


def test_the_release_thresholds_scores_and_converts_them_to_weighted_counts():
    cal = WeightedHistogramCalibration(sigma2=Fraction(64), threshold=43, threshold_delta=0.1, max_keys_per_user=4)
    res = weighted_histogram({"big": 16 * 500, "one": 32}, calibration=cal, max_keys=10, domain=["cat"], rng=4)
    assert [row.key for row in res.rows] == ["big", "cat"] and res.threshold == 43
    (big, count, low, high, in_domain), cat = rows_in_count_units(res, WEIGHT_UNIT)
    assert abs(count - 500) <= 2 and low <= count <= high and not in_domain and cat[4]
    row = HistogramRow("k", count=40, ci_low=40 - 17, ci_high=40 + 17)
    converted = rows_in_count_units(HistogramResult((row,), 0, 43, 17, ()), 16)
    # 40/16 = 2.5 rounds half up to 3; the interval [23/16, 57/16] widens outwards to [1, 4]
    assert converted == [("k", 3, 1, 4, False)]


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="keys"):
        user_weight(0, 5)
    with pytest.raises(ValueError, match="max_keys_per_user"):
        weighted_selection_delta(sigma2=4, threshold=3, max_keys_per_user=0)
    with pytest.raises(ValueError, match="confidence"):
        weighted_histogram({}, calibration=calibrate_weighted_histogram(
            epsilon=1.0, threshold_delta=1e-6, conversion_delta=1e-6, max_keys_per_user=2), max_keys=3,
            confidence=1.5)
