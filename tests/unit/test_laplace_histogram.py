"""The Laplace histogram: exact δ of the threshold (60-digit decimals), the exact sampler's law, calibration,
and the release itself (stream_dp/mechanisms/laplace_histogram.py; audits in tests/unit/test_audit.py)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from stream_dp.accounting.events import ApproxDpEvent
from stream_dp.mechanisms.laplace_histogram import (
    calibrate_laplace_histogram,
    discrete_laplace_quantile,
    discrete_laplace_tail,
    laplace_calibration_for_scale,
    laplace_histogram,
    laplace_histogram_threshold,
    laplace_selection_delta,
    sample_discrete_laplace,
)


def exact_tail(scale: Fraction, m: int) -> Decimal:
    """P[L ≥ m] summed term by term in 60-digit decimals: P[y] = (1 − q)/(1 + q)·q^{|y|}, q = e^{−1/b}."""
    with localcontext() as ctx:
        ctx.prec = 60
        q = (-Decimal(scale.denominator) / Decimal(scale.numerator)).exp()
        norm = (1 - q) / (1 + q)
        if m >= 1:
            return norm * q**m / (1 - q)  # Σ_{y ≥ m} q^y
        below = norm * q ** (1 - m) / (1 - q)  # P[L ≤ m − 1] = P[L ≥ 1 − m]
        return 1 - below


def exact_p(scale: Fraction, tau: int, dk: int, boundary: Fraction = Fraction(0)) -> Decimal:
    """1 − (1 − P[L ≥ τ − 1] − r·P[L = τ − 2])^Δ in 60-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = 60
        edge = exact_tail(scale, tau - 2) - exact_tail(scale, tau - 1)
        key = exact_tail(scale, tau - 1) + Decimal(boundary.numerator) / Decimal(boundary.denominator) * edge
        return 1 - (1 - key) ** dk


CASES = [(Fraction(1), Decimal("1e-6"), 1), (Fraction(5), Decimal("1e-6"), 5), (Fraction(1, 2), Decimal("1e-9"), 1),
         (Fraction(20), Decimal("5e-7"), 20), (Fraction(7, 3), Decimal("0.1"), 2)]


@pytest.mark.parametrize(("scale", "delta", "dk"), CASES)
def test_the_threshold_delta_is_exactly_at_most_delta_and_tau_is_the_smallest(scale, delta, dk) -> None:
    tau = laplace_histogram_threshold(scale=scale, delta=float(delta), max_keys_per_user=dk)
    p, before = exact_p(scale, tau, dk), exact_p(scale, tau - 1, dk)
    assert p / (1 - p) <= delta  # both directions of (ε, δ): δ = p/(1 − p)
    assert before / (1 - before) > delta * Decimal(1 - 1e-6)  # τ − 1 would break δ
    assert float(p) == pytest.approx(laplace_selection_delta(scale=scale, threshold=tau, max_keys_per_user=dk),
                                     rel=1e-9)


@pytest.mark.parametrize(("scale", "delta", "dk"), CASES)
def test_the_boundary_coin_spends_delta_exactly_and_never_more(scale, delta, dk) -> None:
    """The calibration's randomised threshold: with the coin r at τ − 1, δ = p/(1 − p) is at most the target
    and within 1e-6 of it (the integer threshold alone leaves up to a factor e^{1/b} unused)."""
    cal = laplace_calibration_for_scale(scale=scale, threshold_delta=float(delta), max_keys_per_user=dk)
    assert 0 <= cal.boundary < 1
    p = exact_p(cal.scale, cal.threshold, dk, cal.boundary)
    assert p / (1 - p) <= delta
    assert p / (1 - p) >= delta * Decimal(1 - 1e-6)
    assert float(p) == pytest.approx(laplace_selection_delta(scale=cal.scale, threshold=cal.threshold,
                                                             max_keys_per_user=dk, boundary=cal.boundary), rel=1e-9)


def test_a_coin_that_ignores_delta_is_caught() -> None:
    """The broken variant: always keeping the boundary (r = 1) breaks δ."""
    cal = laplace_calibration_for_scale(scale=Fraction(1), threshold_delta=1e-6, max_keys_per_user=1)
    p = exact_p(cal.scale, cal.threshold, 1, Fraction(1))
    assert p / (1 - p) > Decimal("1e-6")


def test_the_boundary_coin_is_applied_with_its_probability() -> None:
    """A key with count τ − 1 (its noisy count is τ − 1 most often): kept with P[L ≥ 1] + r·P[L = 0]."""
    cal = laplace_calibration_for_scale(scale=Fraction(1), threshold_delta=1e-6, max_keys_per_user=1)
    n = 4000
    kept = sum(bool(laplace_histogram({"a": cal.threshold - 1}, calibration=cal, max_keys=1, rng=seed).rows)
               for seed in range(n))
    q = math.exp(-1)
    p = q / (1 + q) + float(cal.boundary) * (1 - q) / (1 + q)
    assert abs(kept / n - p) <= 5 * math.sqrt(p * (1 - p) / n)


def test_a_threshold_that_forgets_the_keys_per_user_breaks_delta() -> None:
    tau = laplace_histogram_threshold(scale=Fraction(20), delta=5e-7, max_keys_per_user=1)
    assert exact_p(Fraction(20), tau, 20) > Decimal("5e-7")


def test_the_float_tail_matches_the_exact_tail() -> None:
    for scale in (Fraction(1, 3), Fraction(1), Fraction(17, 4)):
        for m in (-5, 0, 1, 3, 40):
            assert discrete_laplace_tail(scale, m) == pytest.approx(float(exact_tail(scale, m)), rel=1e-12)


def test_the_exact_sampler_follows_the_discrete_laplace() -> None:
    """40,000 draws at b = 3/2: each of P[L = y], |y| ≤ 4, within 5 standard errors (false alarm < 1e-5)."""
    scale, n = Fraction(3, 2), 40_000
    draws = sample_discrete_laplace(scale, n, rng=11)
    q = math.exp(-1 / 1.5)
    for y in range(-4, 5):
        p = (1 - q) / (1 + q) * q ** abs(y)
        assert abs(np.mean(draws == y) - p) <= 5 * math.sqrt(p * (1 - p) / n), y
    assert np.mean(draws) == pytest.approx(0, abs=5 * math.sqrt(2 * q / (1 - q) ** 2 / n))


def test_calibration_meets_epsilon_and_charges_one_approx_event() -> None:
    for eps, dk in [(0.1, 1), (1.0, 5), (2.0, 20), (0.3, 3)]:
        cal = calibrate_laplace_histogram(epsilon=eps, threshold_delta=1e-7, max_keys_per_user=dk)
        assert cal.epsilon <= eps and cal.epsilon == pytest.approx(eps, rel=1e-3)
        assert cal.events() == (ApproxDpEvent(cal.epsilon, 1e-7, mechanism="laplace_histogram"),)


def test_quantile_is_the_smallest_covering_half_width() -> None:
    for scale, conf in [(Fraction(1), 0.95), (Fraction(5), 0.9), (Fraction(1, 2), 0.99)]:
        h = discrete_laplace_quantile(scale, conf)
        covered = 1 - 2 * discrete_laplace_tail(scale, h + 1)
        assert covered >= conf and (h == 0 or 1 - 2 * discrete_laplace_tail(scale, h) < conf)


def test_release_keeps_keys_above_threshold_and_domain_keys() -> None:
    cal = calibrate_laplace_histogram(epsilon=1.0, threshold_delta=1e-6, max_keys_per_user=1)
    res = laplace_histogram({"big": 1000, "mid": 500, "one": 1}, calibration=cal, max_keys=10, domain=["cat"], rng=3)
    keys = [row.key for row in res.rows]
    assert keys[:2] == ["big", "mid"] and "one" not in keys and "cat" in keys
    row = res.rows[0]
    assert row.ci_low == row.count - res.ci_half_width and abs(row.count - 1000) < 40
    assert res.events == cal.events() and res.threshold == cal.threshold == 15
    capped = laplace_histogram({f"k{i}": 1000 for i in range(5)}, calibration=cal, max_keys=2, rng=3)
    assert len(capped.rows) == 2 and capped.capped
    with pytest.raises(ValueError, match="confidence"):
        laplace_histogram({}, calibration=cal, max_keys=2, confidence=1.0)


def test_a_seeded_release_draws_from_its_seed() -> None:
    """The evaluation's runs are seeded (docs/evaluation): the same seed gives the same release, another seed
    another one -- so the noise comes from the generator passed, not from a fresh one."""
    cal = laplace_calibration_for_scale(scale=Fraction(5), threshold_delta=1e-6, max_keys_per_user=1)
    counts = {f"k{i}": 100 + i for i in range(40)}
    def rows(seed):
        return laplace_histogram(counts, calibration=cal, max_keys=100, rng=seed).rows
    assert rows(7) == rows(7) != rows(8)
