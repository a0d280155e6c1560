"""The evaluation's baselines are what they claim: exact threshold δ, Laplace scale Δ/ε, Gumbel = peeling EM.

Statistical checks use fixed seeds; each states its tolerance and false-failure rate, and each has a
deliberately broken variant that the same check rejects.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from eval.baselines import (
    _topk_rows,
    full_domain_topk,
    laplace_partition_topk,
    laplace_select_then_em,
    laplace_threshold,
    true_topk,
)
from eval.data import Histogram


def _p_new_key_kept(tau: float, *, epsilon: float, max_keys_per_user: int) -> float:
    """P[1 + Lap(Δ/ε) > τ] for τ >= 1."""
    return 0.5 * math.exp(-(tau - 1) * epsilon / max_keys_per_user)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 2.0])
@pytest.mark.parametrize("dk", [1, 5, 20])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-2])
def test_threshold_makes_new_keys_leak_with_probability_delta(epsilon, dk, delta):
    tau = laplace_threshold(epsilon=epsilon, delta=delta, max_keys_per_user=dk)
    p = _p_new_key_kept(tau, epsilon=epsilon, max_keys_per_user=dk)
    leak = 1 - (1 - p) ** dk  # some of a new user's Δ count-1 keys is released
    assert leak == pytest.approx(delta, rel=1e-9)
    # broken variant: a per-key δ (no union over the user's Δ keys) leaks about Δ·δ
    naive_tau = 1 + (dk / epsilon) * math.log(1 / (2 * delta))
    naive_p = _p_new_key_kept(naive_tau, epsilon=epsilon, max_keys_per_user=dk)
    naive_leak = 1 - (1 - naive_p) ** dk
    assert (naive_leak > delta * 1.5) == (dk > 1)


def test_threshold_rejects_bad_parameters():
    for bad in ({"epsilon": 0.0}, {"delta": 0.0}, {"delta": 1.0}, {"max_keys_per_user": 0}):
        args = {"epsilon": 1.0, "delta": 1e-6, "max_keys_per_user": 1} | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            laplace_threshold(**args)


def test_empirical_leak_of_count_one_keys_matches_delta():
    # A large δ makes the leak observable: Δ keys of count 1 (a single new user) against the threshold.
    epsilon, delta, dk, runs = 1.0, 0.2, 3, 20_000
    hist = Histogram.from_arrays(np.arange(dk), np.ones(dk, dtype=int), dk)
    released = laplace_partition_topk(hist, k=dk, epsilon=epsilon, delta=delta, max_keys_per_user=dk, runs=runs,
                                      rng=np.random.default_rng(1))
    leaked = (released >= 0).any(axis=1).sum()
    # two-sided binomial test at α = 1e-4 (false-failure rate 1e-4)
    assert stats.binomtest(int(leaked), runs, delta).pvalue > 1e-4


def _all_kept_ratio(scale_keys: int, *, dk: int, epsilon: float, runs: int, seed: int) -> tuple[float, float]:
    """P[all Δ keys kept | counts c+1] and P[... | counts c], with c + 1 <= τ: below the threshold the
    Laplace tail ratio per key is exactly e^{ε/Δ}, so the correct mechanism sits on the e^ε boundary."""
    delta = 1e-3
    tau = laplace_threshold(epsilon=epsilon, delta=delta, max_keys_per_user=scale_keys)
    c = math.floor(tau) - 1
    probs = []
    for shift in (0, 1):
        hist = Histogram.from_arrays(np.arange(dk), np.full(dk, c + shift), dk)
        released = laplace_partition_topk(hist, k=dk, epsilon=epsilon, delta=delta, max_keys_per_user=scale_keys,
                                          runs=runs, rng=np.random.default_rng(seed + shift))
        probs.append(float((released >= 0).all(axis=1).mean()))
    return probs[1], probs[0]


def test_laplace_noise_is_scaled_to_the_l1_sensitivity():
    # A user adding 1 to Δ present keys may raise P[all kept] by at most e^ε (ε-DP on the common keys).
    epsilon, dk, runs = 1.0, 3, 100_000
    hi, lo = _all_kept_ratio(dk, dk=dk, epsilon=epsilon, runs=runs, seed=3)
    # P[all kept | c] >= (½e^{-2/3})^3 ≈ 0.017 ⇒ >= ~1700 hits; the log-ratio's sd is <= sqrt(1/1700 + 1/4600)
    # ≈ 0.028, so the 0.2 margin is ~7 sd (false-failure rate < 1e-10). Expected log-ratio: exactly ε.
    assert math.log(hi / lo) < epsilon + 0.2
    # broken variant: noise scaled to one key (1/ε) while users touch Δ keys -- log-ratio ≈ Δ·ε = 3
    hi_b, lo_b = _all_kept_ratio(1, dk=dk, epsilon=epsilon, runs=runs, seed=5)
    assert lo_b > 0 and math.log(hi_b / lo_b) > epsilon + 0.2


def test_full_domain_topk_matches_peeling_exponential_mechanism():
    counts = np.array([3, 2, 0, 0, 1])
    hist = Histogram.from_arrays(np.arange(5), counts, 5)
    epsilon, runs = 0.8, 30_000

    def peeling_pmf(eps: float) -> dict[tuple[int, int], float]:
        w = np.exp(eps * counts)
        pmf = {}
        for a in range(5):
            for b in range(5):
                if a != b:
                    pmf[(a, b)] = w[a] / w.sum() * w[b] / (w.sum() - w[a])
        return pmf

    released = full_domain_topk(hist, k=2, epsilon=epsilon, runs=runs, rng=np.random.default_rng(2))
    observed = {}
    for a, b in released.tolist():
        observed[(a, b)] = observed.get((a, b), 0) + 1
    cats = sorted(peeling_pmf(epsilon))

    def pvalue(pmf: dict[tuple[int, int], float]) -> float:
        obs = np.array([observed.get(c, 0) for c in cats], dtype=float)
        exp = np.array([pmf[c] for c in cats]) * runs
        return float(stats.chisquare(obs, exp).pvalue)

    # χ² goodness of fit against the peeling pmf: false-failure rate 1e-4
    assert pvalue(peeling_pmf(epsilon)) > 1e-4
    # broken variant: a mechanism with half the noise (scale 1/(2ε)) is rejected by the same test
    assert pvalue(peeling_pmf(2 * epsilon)) < 1e-4


def test_full_domain_topk_can_release_zero_count_keys_and_is_seeded():
    hist = Histogram.from_arrays(np.arange(50), np.r_[[2], np.zeros(49, dtype=int)], 50)
    a = full_domain_topk(hist, k=3, epsilon=0.5, runs=200, rng=np.random.default_rng(9))
    b = full_domain_topk(hist, k=3, epsilon=0.5, runs=200, rng=np.random.default_rng(9))
    assert np.array_equal(a, b)
    assert (a[:, 0] != 0).any()  # zeros of the known universe compete
    assert all(len(set(row)) == 3 for row in a.tolist())


def test_select_then_em_releases_only_selected_keys():
    hist = Histogram.from_arrays(np.arange(4), np.array([5000, 4000, 1, 1]), 4)
    released = laplace_select_then_em(hist, k=3, select_epsilon=1.0, select_delta=1e-6, em_epsilon=0.5,
                                      max_keys_per_user=2, runs=100, rng=np.random.default_rng(4))
    assert set(released[:, :2].ravel()) == {0, 1}
    assert (released[:, 2] == -1).all()


def test_topk_rows_pads_and_orders():
    values = np.array([[1.0, 3.0, -np.inf, 2.0], [-np.inf, -np.inf, -np.inf, 0.0]])
    assert _topk_rows(values, 3).tolist() == [[1, 3, 0], [3, -1, -1]]
    assert _topk_rows(values, 6).tolist() == [[1, 3, 0, -1, -1, -1], [3, -1, -1, -1, -1, -1]]
    assert _topk_rows(np.empty((2, 0)), 2).tolist() == [[-1, -1], [-1, -1]]
    hist = Histogram.from_arrays(np.arange(3), np.array([1, 7, 7]), 3)
    assert true_topk(hist, k=4).tolist() == [1, 2, 0, -1]
