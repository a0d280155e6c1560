"""Baseline "SbH": sampling from a stability-based histogram (Cohen et al.'s baseline) -- for comparison only.

Per key (count w ≥ 1): Y = w + Lap(1/ε); keep the key if Y ≥ T := 1 + ln(1/δ)/ε; then run the
non-private sampler on Y (keep with probability q(Y), identity weight) and report (key, Y) with the
inverse-probability estimate Y / q(Y). Per key this is (ε, δ)-DP (a key appearing with count 1 passes
the threshold with probability ½e^{-ε(T-1)} = δ/2); as for PWS, a user touching Δ keys gets per-key
(ε/Δ, δ/Δ) and the release costs one ApproxDpEvent(ε, δ) by basic composition.

:func:`sbh_reporting_probabilities` gives P[key of frequency i is reported] in closed form (no sampling,
PPS and PPSWOR), which is what the key-reporting comparison of the paper uses.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import check_delta, check_epsilon, check_positive_int, check_scores, tie_key
from stream_dp.mechanisms.pws import SampleResult, SampleRow
from stream_dp.mechanisms.pws_schemes import SamplingScheme
from stream_dp.rng import RngLike, make_rng

MECHANISM = "sbh_sample"


def sbh_threshold(*, epsilon: float, delta: float) -> float:
    """T = 1 + ln(1/δ)/ε.

    >>> round(sbh_threshold(epsilon=1.0, delta=math.exp(-3)), 12)
    4.0
    """
    return 1.0 + math.log(1.0 / check_delta(delta)) / check_epsilon(epsilon)


def _sampling_probability(scheme: SamplingScheme, y: np.ndarray) -> np.ndarray:
    if scheme.weight is not None:
        raise ValueError("the SbH baseline supports the identity weight only")
    y = np.asarray(y, dtype=np.float64)
    if scheme.name == "pps":
        return np.asarray(np.clip(scheme.rate * y, 0.0, 1.0), dtype=np.float64)
    if scheme.name == "ppswor":
        q: np.ndarray = -np.expm1(-scheme.rate * np.maximum(y, 0.0))
        return q
    return np.ones_like(y)


def sbh_sample(counts: Mapping[Hashable, int], *, scheme: str, tau: float | None, epsilon: float,
               delta: float, max_keys_per_user: int, rng: RngLike = None) -> SampleResult:
    """Release an SbH sample: rows (key, noisy frequency Y, Y/q(Y)).

    >>> res = sbh_sample({"a": 500, "b": 1}, scheme="none", tau=None, epsilon=1.0, delta=1e-6,
    ...                  max_keys_per_user=1, rng=3)
    >>> [r.key for r in res.rows]
    ['a']
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    delta_keys = check_positive_int(max_keys_per_user, "max_keys_per_user")
    sampling = SamplingScheme(scheme, tau)
    eps_key, delta_key = epsilon / delta_keys, delta / delta_keys
    keys, values = check_scores(counts, name="counts")
    present = sorted(np.flatnonzero(values >= 1).tolist(), key=lambda n: tie_key(keys[n]))
    generator = make_rng(rng)
    noisy = values[present] + generator.laplace(0.0, 1.0 / eps_key, size=len(present))
    q = _sampling_probability(sampling, noisy)
    keep = (noisy >= sbh_threshold(epsilon=eps_key, delta=delta_key)) & (generator.random(len(present)) < q)
    rows = [SampleRow(keys[n], float(y), float(y / qy))
            for n, y, qy, k in zip(present, noisy.tolist(), q.tolist(), keep.tolist()) if k]
    rows.sort(key=lambda r: (-r.token, tie_key(r.key)))
    return SampleResult(rows=rows, scheme=scheme, tau=sampling.tau, epsilon=epsilon, delta=delta,
                      max_keys_per_user=delta_keys, estimator="inverse_probability", mechanism=MECHANISM)


def _laplace_cdf(t: np.ndarray, eps: float) -> np.ndarray:
    """P(L < t) for L ~ Lap(1/ε)."""
    cdf: np.ndarray = np.where(t <= 0, 0.5 * np.exp(eps * np.minimum(t, 0)), 1 - 0.5 * np.exp(-eps * np.maximum(t, 0)))
    return cdf


def _laplace_partial_mean(t: np.ndarray, eps: float) -> np.ndarray:
    """E[L 1{L < t}] for L ~ Lap(1/ε)."""
    neg = 0.5 * (np.minimum(t, 0) - 1 / eps) * np.exp(eps * np.minimum(t, 0))
    pos = -0.5 * (np.maximum(t, 0) + 1 / eps) * np.exp(-eps * np.maximum(t, 0))
    mean: np.ndarray = np.where(t <= 0, neg, pos)
    return mean


def sbh_reporting_probabilities(frequencies: Any, *, scheme: str, tau: float | None, epsilon: float,
                                delta: float) -> np.ndarray:
    """P[SbH reports a key of frequency i] (per-key ε, δ), in closed form.

    >>> p = sbh_reporting_probabilities([1, 40], scheme="none", tau=None, epsilon=1.0, delta=1e-6)
    >>> round(float(p[0]) / 0.5e-6, 9), bool(p[1] > 0.999)
    (1.0, True)
    """
    eps = check_epsilon(epsilon)
    sampling = SamplingScheme(scheme, tau)
    if sampling.weight is not None:
        raise ValueError("the SbH baseline supports the identity weight only")
    i = np.asarray(frequencies, dtype=np.float64)
    T = sbh_threshold(epsilon=eps, delta=delta)
    p_ge_T = 1.0 - _laplace_cdf(T - i, eps)
    if sampling.name == "none":
        return p_ge_T
    tau_ = sampling.rate
    if sampling.name == "pps":
        c = max(T, 1.0 / tau_)
        p_ge_c = 1.0 - _laplace_cdf(c - i, eps)
        # E[Y 1{T ≤ Y < c}] with Y = i + L
        m1 = (i * (_laplace_cdf(c - i, eps) - _laplace_cdf(T - i, eps))
              + _laplace_partial_mean(c - i, eps) - _laplace_partial_mean(T - i, eps))
        p: np.ndarray = p_ge_c + tau_ * m1
        return p
    # ppswor: P(Y ≥ T) - E[e^{-τY} 1{Y ≥ T}], split at Y = i (L = 0); exponents combined to avoid overflow
    t = T - i
    m = np.maximum(t, 0.0)
    upper = (eps / 2) * np.exp(-tau_ * i - (tau_ + eps) * m) / (tau_ + eps)
    if abs(eps - tau_) > 1e-12:
        lower = (eps / 2) / (eps - tau_) * (np.exp(-tau_ * i) - np.exp(-tau_ * T - eps * (i - T)))
    else:
        lower = (eps / 2) * np.exp(-tau_ * i) * (-t)
    lower = np.where(t < 0, lower, 0.0)
    return p_ge_T - upper - lower
