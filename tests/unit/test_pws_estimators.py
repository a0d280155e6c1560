"""PWS estimators (MLE, biased-down), their exact per-frequency bias/MSE, sum estimates; SbH closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stream_dp.mechanisms import (
    SamplingScheme,
    SanitizerTable,
    TokenEstimator,
    estimate_sum,
    private_weighted_sample,
    sbh_reporting_probabilities,
    sbh_sample,
)
from stream_dp.mechanisms.pws_tables import SanitizerTableCache


def brute_force_mle(table: SanitizerTable, token: int, g=lambda i: float(i)) -> float:
    """The authors' definition, scanned directly: first maximum of π_{i,j} over the run i = j, j+1, …"""
    i, best, best_i = token, 0.0, None
    while (p := table.prob(i, token)) > 0:
        if p > best:
            best, best_i = p, i
        i += 1
    return g(best_i) / table.reporting_probability(best_i)


@pytest.mark.parametrize("scheme,tau", [("none", None), ("pps", 0.05), ("ppswor", 0.05)])
def test_mle_including_the_saturation_shortcut_equals_the_direct_scan(scheme, tau):
    table = SanitizerTable(SamplingScheme(scheme, tau), epsilon=0.5, delta=1e-3)
    est = TokenEstimator(table)
    table.extend_until_complete()
    tokens = list(range(1, table.saturation + 80)) + [10**7]
    assert np.allclose(est(tokens), [brute_force_mle(table, j) for j in tokens], rtol=1e-12, atol=0)


@pytest.mark.parametrize("scheme,tau", [("none", None), ("pps", 0.05)])
def test_biased_down_never_overestimates_and_mle_bias_is_small_for_large_frequencies(scheme, tau):
    table = SanitizerTable(SamplingScheme(scheme, tau), epsilon=1.0, delta=1e-3)
    down, mle = TokenEstimator(table, kind="biased_down"), TokenEstimator(table)
    for i in range(1, 90):
        bias, mse = down.bias_and_mse(i)
        assert bias <= 1e-9 and mse >= bias**2 - 1e-9
    # far above saturation the MLE reports token i - X and estimates it as token + d*: bias = d* - E[X]
    bias, mse = mle.bias_and_mse(500)
    assert abs(bias) < 1.0 and mse < 5.0


def test_exact_bias_and_mse_match_monte_carlo():
    """Sum over 20 000 keys of frequency i: the mean of Σ estimates is n·(g(i) + bias(i)); with the exact
    per-key variance v = MSE - bias², the z-score of the mean is N(0,1); |z| < 5.3 (false failure 1e-7)."""
    table = SanitizerTable(SamplingScheme("pps", 0.05), epsilon=0.5, delta=1e-3)
    cache = SanitizerTableCache()
    for i in (6, 25, 70):
        est = TokenEstimator(table)
        bias, mse = est.bias_and_mse(i)
        var = mse - bias**2
        n = 20_000
        res = private_weighted_sample({n_: i for n_ in range(n)}, scheme="pps", tau=0.05, epsilon=0.5,
                                      delta=1e-3, max_keys_per_user=1, rng=i, cache=cache)
        total = res.estimate_sum()
        z = (total - n * (i + bias)) / math.sqrt(n * var)
        assert abs(z) < 5.3, (i, z)


def test_estimate_sum_with_coefficients():
    res = private_weighted_sample({"a": 900, "b": 800, "c": 5}, scheme="none", tau=None, epsilon=1.0,
                                  delta=1e-6, max_keys_per_user=1, rng=1)
    a = next(r.estimate for r in res.rows if r.key == "a")
    assert estimate_sum(res.rows, {"a": 2.0}) == 2 * a
    assert estimate_sum(res.rows, lambda k: 1.0 if k == "a" else 0.0) == a
    assert res.estimate_sum() == sum(r.estimate for r in res.rows)


@pytest.mark.parametrize("scheme,tau", [("none", None), ("pps", 0.02), ("ppswor", 0.02)])
def test_sbh_closed_form_reporting_probability_matches_monte_carlo(scheme, tau):
    """Exact binomial test per frequency, Bonferroni over 6 frequencies, family false failure ≤ 1e-6."""
    from scipy import stats

    freqs = [3, 8, 15, 25, 40, 120]
    n = 20_000
    counts = {f"{f}-{m}": f for f in freqs for m in range(n)}
    res = sbh_sample(counts, scheme=scheme, tau=tau, epsilon=0.5, delta=1e-3, max_keys_per_user=1, rng=3)
    reported = {f: 0 for f in freqs}
    for r in res.rows:
        reported[int(r.key.split("-")[0])] += 1
    p = sbh_reporting_probabilities(freqs, scheme=scheme, tau=tau, epsilon=0.5, delta=1e-3)
    for f, pf in zip(freqs, p):
        assert stats.binomtest(reported[f], n, float(pf)).pvalue > 1e-6 / len(freqs), f
    assert res.events[0].mechanism == "sbh_sample"


def test_pws_reports_more_keys_than_sbh_without_sampling():
    table = SanitizerTable(SamplingScheme("none"), epsilon=0.5, delta=1e-3)
    freqs = np.arange(1, 200)
    pws = table.reporting_probabilities(freqs)
    sbh = sbh_reporting_probabilities(freqs, scheme="none", tau=None, epsilon=0.5, delta=1e-3)
    assert np.all(pws >= sbh - 1e-12) and pws.sum() > sbh.sum()


def test_biased_down_is_limited_to_moderate_tokens_and_rows_serialise():
    import json

    from stream_dp.mechanisms.pws_estimators import BIASED_DOWN_MAX_TOKEN

    table = SanitizerTable(SamplingScheme("none"), epsilon=1.0, delta=1e-3)
    with pytest.raises(ValueError, match="biased_down"):
        TokenEstimator(table, kind="biased_down").estimate(BIASED_DOWN_MAX_TOKEN + 1)
    res = private_weighted_sample({"a": 300}, scheme="none", tau=None, epsilon=1.0, delta=1e-3,
                                  max_keys_per_user=1, rng=2)
    assert json.loads(json.dumps([r.to_dict() for r in res.rows]))[0]["key"] == "a"
    assert json.loads(json.dumps(res.parameters()))["weight"] == "identity"
