"""Gap-noise tails (Lemma 3 and the exponential/geometric analogues) and the released gaps' distribution.

Statistical checks use 5-standard-error tolerances (false-failure rate below 1e-6 per check, ~1e-5 for
the file); the broken variants they guard against (uncentred one-sided noise, wrong rate or branch)
move the checked frequencies by far more than that.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from stream_dp.mechanisms import AdaptiveSVT
from stream_dp.mechanisms.svt_noise import GapTail, noise_mean, sample_centred

RATES = [(0.3, 1.2), (1.0, 1.0), (1.0, 1.0 + 1e-9), (2.0, 0.25), (0.05, 0.07)]


@pytest.mark.parametrize("a,c", RATES)
def test_lemma3_matches_numerical_convolution(a, c):
    tail = GapTail("laplace", a, c)

    def lap(x, rate):
        return 0.5 * rate * math.exp(-rate * abs(x))

    for t in (-3.0 / a, -0.5, 0.0, 0.7, 4.0 / min(a, c)):
        # P(N* − N0 ≤ t) = ∫ f0(y) F*(t + y) dy, F* the Laplace CDF
        def lap_cdf(x, rate=a):
            return 0.5 * math.exp(rate * x) if x < 0 else 1 - 0.5 * math.exp(-rate * x)

        span = 60.0 / min(a, c)  # beyond it the integrand is < e^-60
        want, _ = integrate.quad(lambda y, t=t: lap(y, c) * lap_cdf(t + y), -span, span, limit=400,
                                 points=sorted({0.0, -t}), epsabs=1e-13)
        assert tail.cdf(t) == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("a,c", RATES)
def test_exponential_tail_matches_numerical_convolution(a, c):
    tail = GapTail("exponential", a, c)
    for t in (-2.0 / c, -0.3, 0.0, 1.1, 5.0 / min(a, c)):
        # X = (E* − 1/a) − (E0 − 1/c): P(X ≤ t) = ∫ c e^{−c y} P(E* ≤ t + 1/a + y − 1/c) dy
        def integrand(y, t=t):
            x = t + 1 / a + y - 1 / c
            return c * math.exp(-c * y) * (1 - math.exp(-a * x) if x > 0 else 0.0)

        want, _ = integrate.quad(integrand, 0, np.inf, limit=200, epsabs=1e-12)
        assert tail.cdf(t) == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("a,c", RATES)
def test_geometric_tail_matches_direct_summation(a, c):
    tail = GapTail("geometric", a, c)
    p_q, p_0 = 1 - math.exp(-a), 1 - math.exp(-c)
    n = np.arange(1, 4000)
    pmf_q, pmf_0 = p_q * (1 - p_q) ** (n - 1), p_0 * (1 - p_0) ** (n - 1)
    shift = round(1 / p_q) - round(1 / p_0)  # the integer offsets (issue 16: released numbers are integers)
    for d in (-7, -1, 0, 2, 9):
        want = sum(pmf_0[j] * pmf_q[n <= n[j] + d].sum() for j in range(len(n)) if pmf_0[j] > 1e-18)
        assert tail.cdf(d - shift) == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("noise", ["laplace", "exponential", "geometric"])
@pytest.mark.parametrize("confidence", [0.05, 0.5, 0.9, 0.999])
def test_quantile_is_the_smallest_t_reaching_the_confidence(noise, confidence):
    for a, c in RATES:
        tail = GapTail(noise, a, c)
        t = tail.quantile(confidence)
        assert tail.cdf(t) >= confidence - 1e-9
        below = t - (1.0 if noise == "geometric" else 1e-6 * max(1.0, abs(t)))
        assert tail.cdf(below) < confidence


@pytest.mark.parametrize("noise", ["exponential", "geometric"])
def test_one_sided_noise_is_centred_on_the_sampled_distribution(noise):
    rng = np.random.default_rng(0)
    rate = 0.4
    draws = np.array([sample_centred(noise, rate, rng) for _ in range(20000)])
    se = draws.std() / math.sqrt(len(draws))
    assert abs(draws.mean()) < 5 * se
    assert noise_mean(noise, rate) > 2.0  # a forgotten mean subtraction would be > 80 standard errors off


@pytest.mark.parametrize("noise", ["laplace", "exponential", "geometric"])
@pytest.mark.parametrize("adaptive,branch", [(True, "top"), (False, "middle")])
def test_released_gap_noise_follows_its_tail_and_lower_bounds_cover(noise, adaptive, branch):
    n, threshold, value = 3000, 100, 20100
    rng = np.random.default_rng(42)
    errors, covered = [], {0.5: 0, 0.9: 0}
    tail = None
    for _ in range(n):
        svt = AdaptiveSVT(threshold, k=2, epsilon=1.0, noise=noise, adaptive=adaptive, rng=rng)
        answer = svt.process(value)
        assert answer.branch == branch
        tail = answer._tail
        errors.append(answer.estimate - value)  # = X, the gap noise
        for conf in covered:
            covered[conf] += value >= answer.lower_bound(conf)
    errors = np.array(errors)
    assert tail is not None and tail.query_rate == (svt.epsilon2 if branch == "top" else svt.epsilon1)
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        t = tail.quantile(q)
        p = tail.cdf(t)
        freq = float(np.mean(errors <= t + 1e-9))
        assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n), (q, freq, p)
    for conf, hits in covered.items():
        p = tail.cdf(tail.quantile(conf))  # ≥ conf; equal for continuous noise
        assert abs(hits / n - p) < 5 * math.sqrt(p * (1 - p) / n), (conf, hits / n, p)
    assert abs(errors.mean() - tail.mean) < 5 * math.sqrt(tail.variance / n)  # geometric: integer-offset bias
    assert errors.var() == pytest.approx(tail.variance, rel=0.25)
