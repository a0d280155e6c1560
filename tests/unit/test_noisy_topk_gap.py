"""Noisy Top-K with Gap (Free Gap §6, Alg 4) and the BLUE of Theorem 6.2.

Statistical tests run with fixed seeds; their false-failure rate (for a random seed) is stated.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stream_dp.accounting.events import PureDpEvent
from stream_dp.mechanisms import (
    NoisyTopkWithGap,
    blue_estimates,
    noisy_topk_with_gap,
    noisy_topk_with_measures,
)

VALUES = {"a": 50.0, "b": 40.0, "c": 30.0, "d": -5.0}


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(k=0), "k must be"),
    (dict(k=4), "at least k\\+1"),
    (dict(epsilon=0.0), "epsilon"),
    (dict(noise="gaussian"), "noise"),
    (dict(values={"a": 1.0, "b": float("nan"), "c": 0.0}), "NaN"),
])
def test_rejects_bad_input(kwargs, fragment):
    base = dict(values=VALUES, k=2, epsilon=1.0)
    with pytest.raises(ValueError, match=fragment):
        noisy_topk_with_gap(**{**base, **kwargs}, rng=0)


def test_shape_negative_values_allowed_and_events():
    for noise in ("laplace", "exponential"):
        out = noisy_topk_with_gap(VALUES, k=3, epsilon=0.3, noise=noise, monotone=False, rng=1)
        assert len(out) == 3 and len({key for key, _ in out}) == 3
        assert all(gap >= 0 for _, gap in out)
    assert NoisyTopkWithGap(k=1, epsilon=0.7).privacy_map() == (PureDpEvent(epsilon=0.7, mechanism="noisy_topk_with_gap"),)


@pytest.mark.parametrize("noise, monotone, scale", [
    ("laplace", True, 3 / 0.5), ("laplace", False, 6 / 0.5),
    ("exponential", True, 3 / 0.5), ("exponential", False, 6 / 0.5),
])
def test_gap_noise_has_the_calibrated_scale(noise, monotone, scale):
    """With well-separated answers the selection is fixed and g_1 − (q_1 − q_2) = η_1 − η_2. Its law is
    compared with the difference of two draws of the documented noise (scale k/ε monotone, 2k/ε
    otherwise; k = 3, ε = 0.5) by a two-sample KS test at level 1e-4 (false-failure rate 1e-4 per case).
    Half or double the scale is rejected (checked in test_gap_scale_test_has_power)."""
    assert _gap_scale_pvalue(noise, monotone, scale) > 1e-4


def test_gap_scale_test_has_power():
    assert _gap_scale_pvalue("laplace", True, 3 / 0.5 / 2) < 1e-6
    assert _gap_scale_pvalue("exponential", False, 6 / 0.5 * 2) < 1e-6


def _gap_scale_pvalue(noise, monotone, reference_scale):
    values = {"a": 1e7, "b": 0.0, "c": -1e7, "d": -2e7}
    rng = np.random.default_rng(8)
    observed = np.array([noisy_topk_with_gap(values, k=3, epsilon=0.5, noise=noise, monotone=monotone,
                                             rng=rng)[0][1] - 1e7 for _ in range(3000)])
    draw = rng.laplace if noise == "laplace" else (lambda loc, b, size: rng.exponential(b, size))
    reference = draw(0.0, reference_scale, 3000) - draw(0.0, reference_scale, 3000)
    return stats.ks_2samp(observed, reference).pvalue


def test_blue_linear_time_form_equals_the_matrix_form():
    """β = (Xα + Yg)/((1+λ)k) with X = diag(1+λk) + off-diagonal 1 and Y = rows (k−1, …, 1) minus the
    strictly lower triangle of k's (Theorem 6.2): exact numeric agreement on random inputs."""
    rng = np.random.default_rng(0)
    for k in (1, 2, 5, 9):
        for lam in (0.5, 1.0, 4.0):
            alpha, gaps = rng.normal(size=k), rng.normal(size=max(k - 1, 0))
            x = np.ones((k, k)) + np.eye(k) * lam * k
            y = np.tile(np.arange(k - 1, 0, -1, dtype=float), (k, 1)) - k * np.tril(np.ones((k, k - 1)), -1)
            matrix = (x @ alpha + (y @ gaps if k > 1 else 0)) / ((1 + lam) * k)
            np.testing.assert_allclose(blue_estimates(alpha, gaps, lam=lam), matrix, rtol=1e-12, atol=1e-12)


def test_blue_is_unbiased_and_exact_without_noise():
    q = np.array([9.0, 7.5, 3.0, 1.0])
    np.testing.assert_allclose(blue_estimates(q, -np.diff(q), lam=0.7), q)


@pytest.mark.parametrize("noise, monotone, lam", [("laplace", True, 1.0), ("exponential", True, 0.5),
                                                   ("laplace", False, 4.0)])
def test_blue_mse_ratio_matches_corollary_1(noise, monotone, lam):
    """Noisy Top-K with Measures end to end (k = 5, ε = 1; answers 10^6 apart so the selection is fixed):
    MSE(β)/MSE(α) = (1+λk)/(k+λk) (Corollary 1) -- 0.6 for λ = 1 (monotone Laplace), 0.467 for λ = ½
    (monotone exponential gaps), 0.84 for λ = 4. MSE(α) = Var Lap(2k/ε) = 8k²/ε² exactly. Pass if within
    4.5 Monte-Carlo standard errors (false-failure rate ≈ 7e-6 per case, normal approximation)."""
    k, epsilon, runs = 5, 1.0, 8000
    q = {f"x{i}": 1e6 * (10 - i) for i in range(8)}
    truth = np.array([q[f"x{i}"] for i in range(k)])
    rng = np.random.default_rng(31)
    per_run = np.empty(runs)
    for r in range(runs):
        out = noisy_topk_with_measures(q, k=k, epsilon=epsilon, monotone=monotone, noise=noise, rng=rng)
        assert [key for key, _ in out] == [f"x{i}" for i in range(k)]
        per_run[r] = np.mean((np.array([b for _, b in out]) - truth) ** 2)
    baseline = 2 * (2 * k / epsilon) ** 2
    ratio, se = per_run.mean() / baseline, per_run.std(ddof=1) / np.sqrt(runs) / baseline
    expected = (1 + lam * k) / (k + lam * k)
    assert abs(ratio - expected) <= 4.5 * se, (ratio, expected, se)


# --- discrete Laplace noise (noise="geometric", the watch_topk default: integer gaps, issue 16) ---------

def test_discrete_noise_gives_integer_gaps_and_needs_integer_values():
    counts = {"a": 50, "b": 40, "c": 30, "d": 0}
    for seed in range(20):
        out = noisy_topk_with_gap(counts, k=3, epsilon=0.3, noise="geometric", rng=seed)
        assert all(float(gap).is_integer() and gap >= 0 for _, gap in out)
    with pytest.raises(ValueError, match="integer values"):
        noisy_topk_with_gap({"a": 1.5, "b": 0, "c": 0}, k=1, epsilon=1.0, noise="geometric", rng=0)


def test_discrete_ties_go_to_the_earlier_key_even_at_the_cut():
    # ε huge: the discrete noise is 0 with probability ~1, every answer ties; input order decides
    tied = {"z": 5, "y": 5, "x": 5, "w": 5}
    assert noisy_topk_with_gap(tied, k=2, epsilon=1e6, noise="geometric", rng=0) == [("z", 0.0), ("y", 0.0)]


def _discrete_gap_chi2_pvalue(reference_scale: float) -> float:
    """g_1 − (q_1 − q_2) = η_1 − η_2 for well-separated answers; its counts are compared with a sample of
    the difference of two discrete Laplace draws of ``reference_scale`` (chi-square homogeneity test)."""
    from stream_dp.mechanisms.noisy_topk_gap import discrete_laplace

    values = {"a": 10**7, "b": 0, "c": -(10**7), "d": -2 * 10**7}
    rng = np.random.default_rng(9)
    observed = np.array([noisy_topk_with_gap(values, k=3, epsilon=0.5, noise="geometric", rng=rng)[0][1] - 1e7
                         for _ in range(4000)])
    reference = (discrete_laplace(reference_scale, 4000, rng) - discrete_laplace(reference_scale, 4000, rng))
    edges = np.concatenate([[-np.inf], np.arange(-20.5, 21.0, 3.0), [np.inf]])
    table = np.array([np.histogram(observed, edges)[0], np.histogram(reference, edges)[0]])
    return float(stats.chi2_contingency(table[:, table.sum(axis=0) > 0])[1])


def test_discrete_gap_noise_has_the_calibrated_scale_and_the_test_has_power():
    """Scale k/ε = 6 (monotone, k = 3, ε = 0.5); false-failure rate 1e-4. Half the scale is rejected."""
    assert _discrete_gap_chi2_pvalue(3 / 0.5) > 1e-4
    assert _discrete_gap_chi2_pvalue(3 / 0.5 / 2) < 1e-6


def test_discrete_noise_variance_formula_matches_draws():
    from stream_dp.mechanisms.noisy_topk_gap import discrete_laplace, noise_variance

    draws = discrete_laplace(4.0, 200_000, np.random.default_rng(3))
    assert draws.dtype == np.int64 and abs(draws.mean()) < 5 * draws.std() / np.sqrt(len(draws))
    assert draws.var() == pytest.approx(noise_variance("geometric", 4.0), rel=0.02)


def test_discrete_measures_blue_runs_on_integer_measurements():
    q = {f"k{i}": 1000 - 100 * i for i in range(8)}
    out = noisy_topk_with_measures(q, k=3, epsilon=2.0, noise="geometric", rng=4)
    assert [key for key, _ in out] == ["k0", "k1", "k2"]
    assert all(abs(est - q[key]) < 60 for key, est in out)
