"""Hybrids (Free Gap Alg 5, 6) and the exponential mechanism with gap (Alg 7, 8).

Statistical tests use fixed seeds; the false-failure rate (for a random seed) is stated per test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stream_dp.accounting.events import PureDpEvent
from stream_dp.mechanisms import (
    em_with_gap,
    em_with_gap_blackbox,
    em_with_gap_events,
    hybrid_max_events,
    hybrid_topk_estimates,
    hybrid_topk_identity,
)
from stream_dp.mechanisms.em_gap import gap_location
from stream_dp.mechanisms.hybrid_gap import optimal_theta

FAR = {f"x{i}": 1e6 * (10 - i) for i in range(10)}  # x0 > x1 > … , 10^6 apart: selections are fixed


# --- Algorithm 5 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("threshold, keys, hit", [
    (2e7, (), True),                                   # threshold first: t = 1 (only the threshold)
    (6.5e6, ("x0", "x1", "x2", "x3"), True),           # 4 keys above, then the threshold: t = 5
    (-1e9, ("x0", "x1", "x2", "x3", "x4", "x5"), False),  # never reached: t = k
])
def test_alg5_realized_cost_is_t_over_k(threshold, keys, hit):
    k, epsilon = 6, 1.5
    r = hybrid_topk_identity(FAR, threshold=threshold, k=k, epsilon=epsilon, rng=0)
    assert (r.keys, r.hit_threshold) == (keys, hit)
    t = len(keys) + hit
    assert r.cost_epsilon == pytest.approx(t / k * epsilon)
    assert r.events == (PureDpEvent(epsilon=r.cost_epsilon, mechanism="hybrid_topk_identity"),)
    assert len(r.gaps) == len(keys) and all(g >= 0 for g in r.gaps)
    assert (r.estimates is not None) == hit
    assert hybrid_max_events(epsilon=epsilon, mechanism="hybrid_topk_identity")[0].epsilon == epsilon


def test_alg5_estimates_are_unbiased():
    """Ending at the threshold, T + (sum of gaps down to it) estimates each answer without bias (the
    noises are i.i.d. Exp(2k/ε)). k = 4, ε = 1, 3000 runs; mean error within 4.5 standard errors per key
    (false-failure rate ≈ 3e-5 over the 3 keys)."""
    rng = np.random.default_rng(12)
    runs = [hybrid_topk_identity(FAR, threshold=7.5e6, k=4, epsilon=1.0, rng=rng) for _ in range(3000)]
    assert all(r.keys == ("x0", "x1", "x2") and r.hit_threshold for r in runs)
    errors = np.array([r.estimates for r in runs]) - np.array([FAR["x0"], FAR["x1"], FAR["x2"]])
    se = errors.std(axis=0, ddof=1) / np.sqrt(len(runs))
    assert np.all(np.abs(errors.mean(axis=0)) <= 4.5 * se), (errors.mean(axis=0), se)
    # and the noise has the calibrated scale: Var(η_j − η_0) = 2(2k/ε)² = 128
    assert errors[:, 2].var() == pytest.approx(128, rel=0.12)


# --- Algorithm 6 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("threshold, released", [(2e7, 0), (6.5e6, 4), (-1e9, 5)])
def test_alg6_realized_cost(threshold, released):
    k, epsilon = 5, 2.0
    r = hybrid_topk_estimates(FAR, threshold=threshold, k=k, epsilon=epsilon, rng=3)
    theta = optimal_theta(k)
    assert len(r.keys) == released and r.keys == tuple(f"x{i}" for i in range(released))
    assert r.hit_threshold == (released < k)
    assert r.cost_epsilon == pytest.approx((theta + released / k * (1 - theta)) * epsilon)
    assert r.events[0].epsilon == r.cost_epsilon and r.events[0].mechanism == "hybrid_topk_estimates"
    assert len(r.estimates) == released


def test_alg6_estimates_are_unbiased_with_the_stated_variance():
    """q~ − T~ + T is unbiased (both noises are centred); Var = (2/ε₁)² + (1/ε₀)². k = 3, ε = 1,
    4000 runs: mean within 4.5 SE (false-failure ≈ 2e-5 over 3 keys), variance within 12 % (the SE of a
    sample variance of these skewed sums at n = 4000 is < 4 %)."""
    k, epsilon, theta = 3, 1.0, 0.4
    rng = np.random.default_rng(21)
    runs = [hybrid_topk_estimates(FAR, threshold=-1e9, k=k, epsilon=epsilon, theta=theta, rng=rng)
            for _ in range(4000)]
    errors = np.array([r.estimates for r in runs]) - np.array([FAR["x0"], FAR["x1"], FAR["x2"]])
    se = errors.std(axis=0, ddof=1) / np.sqrt(len(runs))
    assert np.all(np.abs(errors.mean(axis=0)) <= 4.5 * se)
    eps0, eps1 = theta * epsilon, (1 - theta) * epsilon / k
    assert errors[:, 0].var() == pytest.approx((2 / eps1) ** 2 + (1 / eps0) ** 2, rel=0.12)


@pytest.mark.parametrize("fn", [hybrid_topk_identity, hybrid_topk_estimates])
def test_hybrids_reject_bad_input(fn):
    with pytest.raises(ValueError, match="epsilon"):
        fn(FAR, threshold=1.0, k=2, epsilon=0.0)
    with pytest.raises(ValueError, match="threshold"):
        fn(FAR, threshold=float("nan"), k=2, epsilon=1.0)
    with pytest.raises(ValueError, match="k must be"):
        fn(FAR, threshold=1.0, k=0, epsilon=1.0)
    with pytest.raises(ValueError, match="NaN"):
        fn({"a": float("nan"), "b": 1.0}, threshold=1.0, k=1, epsilon=1.0)


# --- Algorithms 7 and 8 -------------------------------------------------------------------------------

SCORES = {"a": 3.0, "b": 2.0, "c": 0.5, "d": -1.0}


def _conditional_logistic_cdf(location):
    f0 = 1 / (1 + math.exp(location))
    return lambda x: (1 / (1 + np.exp(-(np.asarray(x) - location))) - f0) / (1 - f0)


@pytest.mark.parametrize("sampler", [em_with_gap, em_with_gap_blackbox])
def test_em_with_gap_follows_theorem_8_3(sampler):
    """Winner ~ EM (P ∝ e^{εμ/(2Δ)}; chi-square, level 1e-4) and, given winner ω, the gap is
    Logistic(s_ω − ln Σ_{≠ω} e^{s}) conditioned on ≥ 0 (one-sample KS against that CDF, level 1e-4, for
    the two most frequent winners). ε = 1.2, Δ = 0.5; 6000 draws. False-failure rate ≤ 3e-4 per sampler."""
    epsilon, sensitivity = 1.2, 0.5
    rng = np.random.default_rng(88)
    draws = [sampler(SCORES, epsilon=epsilon, sensitivity=sensitivity, rng=rng) for _ in range(6000)]
    keys = list(SCORES)
    s = epsilon * np.array([SCORES[key] for key in keys]) / (2 * sensitivity)
    p = np.exp(s - s.max())
    p /= p.sum()
    observed = np.array([sum(1 for key, _ in draws if key == name) for name in keys])
    assert stats.chisquare(observed, p * len(draws)).pvalue > 1e-4
    for index in np.argsort(-p)[:2]:
        gaps = [gap for key, gap in draws if key == keys[index]]
        cdf = _conditional_logistic_cdf(gap_location(s, int(index)))
        assert stats.kstest(gaps, cdf).pvalue > 1e-4


def test_em_gap_test_rejects_the_location_without_epsilon():
    """Power: the seed's Algorithm 8 line without ε in the location (ε = 0.2 makes it differ: L = −0.86
    instead of −0.03) is rejected by the same KS test (p < 1e-6)."""
    epsilon = 0.2
    rng = np.random.default_rng(4)
    gaps = [gap for key, gap in (em_with_gap(SCORES, epsilon=epsilon, rng=rng) for _ in range(6000))
            if key == "a"]
    unscaled = np.array(list(SCORES.values())) / 2  # μ/(2Δ) without ε
    assert stats.kstest(gaps, _conditional_logistic_cdf(gap_location(unscaled, 0))).pvalue < 1e-6


def test_em_with_gap_extreme_locations_and_validation():
    key, gap = em_with_gap_blackbox({"a": 1e5, "b": 0.0}, epsilon=1.0, rng=0)  # L ≈ 5e4
    assert key == "a" and gap == pytest.approx(5e4, rel=1e-3)
    key, gap = em_with_gap_blackbox({"a": 0.0} | {f"z{i}": 0.0 for i in range(999)}, epsilon=1.0, rng=0)
    assert gap >= 0 and math.isfinite(gap)  # L = −ln 999 < 0
    with pytest.raises(ValueError, match="at least 2"):
        em_with_gap({"a": 1.0}, epsilon=1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        em_with_gap(SCORES, epsilon=1.0, sensitivity=0)
    assert em_with_gap_events(epsilon=0.4) == (PureDpEvent(epsilon=0.4, mechanism="em_with_gap"),)
