"""Private histogram with discrete Laplace noise: pure-ε counts plus partition selection (docs/privacy.md,
"Histogram with Laplace noise").

The same release as :mod:`stream_dp.mechanisms.gaussian_histogram` (every key whose noisy count clears an
integer threshold τ, with its noisy count and an interval; a public domain released without τ; a
``max_keys`` cap) with i.i.d. **discrete Laplace** noise, P[y] ∝ e^{−|y|/b} on the integers (CKS20
Definition 28; sampled exactly by CKS20 Algorithm 2 in integer arithmetic, scale b = t/s rational).

Guarantee (user-level add/remove, a user touches at most Δ keys, adding 1 to each): on the keys present in
both neighbours the count vectors differ by 1 on at most Δ coordinates (L1 sensitivity Δ), and an integer
shift by 1 changes a discrete Laplace's probabilities by at most e^{1/b}: ε = Δ/b, pure. The at most Δ keys
only the extra user touched (count exactly 1) are released with probability p = 1 − (1 − P_key)^Δ,
P_key = P[1 + L ≥ τ] + r·P[1 + L = τ − 1]: τ is the smallest integer whose p (with r = 0) is at most
δ/(1 + δ), and a key whose noisy count is exactly τ − 1 is kept with an exact coin of probability r, the
largest that keeps p ≤ δ/(1 + δ) (a randomised threshold: the integer grid of the noise would otherwise waste
up to a factor e^{1/b} of δ; the coin is independent of the data, so on the common keys it is
post-processing). Both directions of (ε, δ)-DP then hold:
adding the user, P_{x′}(S) ≤ e^ε·P_x(S) + p; removing it, conditioning x′ on "no new key released" costs the
factor 1/(1 − p), i.e. δ = p/(1 − p) ≤ δ. One ``ApproxDpEvent(ε, δ)`` (data-independent, so reserved =
settled): basic composition (ε, δ), and δ-approximate ε²/2-zCDP on the zCDP route.

When it is the better choice: L1 sensitivity Δ against the Gaussian's L2 √Δ -- for Δ = 1 Laplace needs
b = 1/ε where the Gaussian needs σ ≈ sqrt(ln(1/δ′))/ε, so small Δ favours Laplace and large Δ the Gaussian
(docs/evaluation; ``stream-dp budget plan --expected-users`` recommends one).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from stream_dp.accounting.events import ApproxDpEvent, DpEvent
from stream_dp.mechanisms.count_parts import CountParts
from stream_dp.mechanisms._validation import (check_delta, check_epsilon, check_positive_fraction, check_positive_int,
                                              check_size)
from stream_dp.mechanisms.discrete_gaussian import _discrete_laplace
from stream_dp.mechanisms.exact_batch import discrete_laplace_batch, uniform_below
from stream_dp.mechanisms.gaussian_histogram import (TAIL_MARGIN, HistogramResult, noisy_threshold_release,
                                                     smallest_threshold)
from stream_dp.rng import RngLike, make_rng

MECHANISM = "laplace_histogram"
# b is rounded *up* to a multiple of this (so ε only shrinks) to keep the sampler's integers small.
SCALE_GRID = Fraction(1, 1000)


def as_scale(scale: Any) -> Fraction:
    """The discrete Laplace scale b as an exact positive Fraction."""
    return check_positive_fraction(scale, "scale")


def sample_discrete_laplace(scale: Any, size: int, rng: RngLike = None) -> np.ndarray:
    """``size`` exact i.i.d. draws of the discrete Laplace with scale b (P[y] ∝ e^{−|y|/b}) as int64 (CKS20
    Algorithm 2 in batches: :func:`~stream_dp.mechanisms.exact_batch.discrete_laplace_batch`).

    >>> sample_discrete_laplace(Fraction(3, 2), 4, rng=1).dtype
    dtype('int64')
    """
    b = as_scale(scale)
    return discrete_laplace_batch(make_rng(rng), b.numerator, b.denominator, check_size(size))


def sample_discrete_laplace_scalar(scale: Any, size: int, rng: RngLike = None) -> np.ndarray:
    """The same law as :func:`sample_discrete_laplace`, one draw at a time in Python integers (CKS20 Algorithm 2 as
    written): the reference the batched sampler is tested and benchmarked against."""
    b = as_scale(scale)
    size = check_size(size)
    generator = make_rng(rng)
    return np.fromiter((_discrete_laplace(generator, b.numerator, b.denominator) for _ in range(size)),
                       dtype=np.int64, count=size)


def discrete_laplace_tail(scale: Any, m: int) -> float:
    """P[L ≥ m]: q^m/(1 + q) for m ≥ 1, 1 − q^{1−m}/(1 + q) for m ≤ 0, q = e^{−1/b}.

    >>> round(discrete_laplace_tail(1, 0) + discrete_laplace_tail(1, 1), 12)  # P[L ≥ 0] + P[L ≤ −1] = 1
    1.0
    """
    q = math.exp(-1 / float(as_scale(scale)))
    m = int(m)
    return q**m / (1 + q) if m >= 1 else 1 - q ** (1 - m) / (1 + q)


def discrete_laplace_quantile(scale: Any, confidence: float) -> int:
    """The smallest integer h ≥ 0 with P[|L| ≤ h] = 1 − 2q^{h+1}/(1 + q) ≥ ``confidence``.

    >>> discrete_laplace_quantile(1, 0.95)
    3
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    q = math.exp(-1 / float(as_scale(scale)))
    h = 0
    while 1 - 2 * q ** (h + 1) / (1 + q) < confidence:
        h += 1
    return h


def discrete_laplace_pmf(scale: Any, y: int) -> float:
    """P[L = y] = (1 − q)/(1 + q)·q^{|y|}."""
    q = math.exp(-1 / float(as_scale(scale)))
    return (1 - q) / (1 + q) * q ** abs(int(y))


def key_release_probability(*, scale: Any, threshold: int, boundary: Fraction = Fraction(0)) -> float:
    """P[a count-1 key is released] = P[L ≥ τ − 1] + r·P[L = τ − 2] (r: the boundary coin's probability)."""
    return discrete_laplace_tail(scale, int(threshold) - 1) + float(boundary) * discrete_laplace_pmf(scale, int(threshold) - 2)


def laplace_selection_delta(*, scale: Any, threshold: int, max_keys_per_user: int,
                            boundary: Fraction = Fraction(0)) -> float:
    """p = P[one of Δ count-1 keys is released] = 1 − (1 − :func:`key_release_probability`)^Δ."""
    p = key_release_probability(scale=scale, threshold=threshold, boundary=boundary)
    return -math.expm1(max_keys_per_user * math.log1p(-p)) if p < 1 else 1.0


def boundary_probability(*, scale: Any, threshold: int, delta: float, max_keys_per_user: int) -> Fraction:
    """The coin r ∈ [0, 1) for noisy counts exactly τ − 1 that spends the δ the integer τ leaves unused:
    the largest r (a dyadic fraction, rounded down with a 1e-9 relative margin) with p/(1 − p) ≤ δ.

    >>> round(float(boundary_probability(scale=1, threshold=15, delta=1e-6, max_keys_per_user=1)), 4)
    0.3754
    """
    target = delta / (1 + delta)
    p_max = -math.expm1(math.log1p(-target) / max_keys_per_user) * (1 - TAIL_MARGIN)
    room = p_max - discrete_laplace_tail(scale, int(threshold) - 1)
    edge = discrete_laplace_pmf(scale, int(threshold) - 2)
    if room <= 0 or edge <= 0:
        return Fraction(0)
    r = min(room / edge, 1.0) * (1 - TAIL_MARGIN)
    return Fraction(r).limit_denominator(2**40) if r > 0 else Fraction(0)


def laplace_histogram_threshold(*, scale: Any, delta: float, max_keys_per_user: int) -> int:
    """The smallest integer τ ≥ 1 whose :func:`laplace_selection_delta` p satisfies p/(1 − p) ≤ δ, i.e.
    p ≤ δ/(1 + δ) (module docstring: the remove direction costs 1/(1 − p)).

    >>> laplace_histogram_threshold(scale=1, delta=1e-6, max_keys_per_user=1)
    15
    """
    b = as_scale(scale)
    delta = check_delta(delta)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    target = delta / (1 + delta)
    p_max = -math.expm1(math.log1p(-target) / dk) * (1 - TAIL_MARGIN)

    return smallest_threshold(lambda tau: discrete_laplace_tail(b, tau - 1) <= p_max)


@dataclass(frozen=True)
class LaplaceHistogramCalibration:
    """Scale, threshold and cost of one Laplace histogram release."""

    scale: Fraction
    threshold: int
    threshold_delta: float
    max_keys_per_user: int
    boundary: Fraction = Fraction(0)  # P[keep] of a key whose noisy count is exactly threshold − 1
    unit: ClassVar[int] = 1  # noise units per count: 1 (the per-user weighted calibration's is its U)

    @property
    def epsilon(self) -> float:
        return self.max_keys_per_user / float(self.scale)

    def events(self) -> tuple[DpEvent, ...]:
        return (ApproxDpEvent(self.epsilon, self.threshold_delta, mechanism=MECHANISM),)


def laplace_calibration_for_scale(*, scale: Any, threshold_delta: float, max_keys_per_user: int
                                  ) -> LaplaceHistogramCalibration:
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    b = as_scale(scale)
    b = Fraction(math.ceil(b / SCALE_GRID)) * SCALE_GRID
    tau = laplace_histogram_threshold(scale=b, delta=threshold_delta, max_keys_per_user=dk)
    r = boundary_probability(scale=b, threshold=tau, delta=threshold_delta, max_keys_per_user=dk)
    return LaplaceHistogramCalibration(b, tau, float(threshold_delta), dk, r)


def calibrate_laplace_histogram(*, epsilon: float, threshold_delta: float, max_keys_per_user: int
                                ) -> LaplaceHistogramCalibration:
    """b = Δ/ε rounded up to the 1/1000 grid (ε only shrinks) and τ for ``threshold_delta``: one release is
    (ε, threshold_delta)-DP on its own -- no conversion δ′ is needed.

    >>> cal = calibrate_laplace_histogram(epsilon=1.0, threshold_delta=1e-6, max_keys_per_user=1)
    >>> cal.scale, cal.threshold, cal.epsilon
    (Fraction(1, 1), 15, 1.0)
    """
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    return laplace_calibration_for_scale(scale=Fraction(dk) / Fraction(check_epsilon(epsilon)),
                                         threshold_delta=threshold_delta, max_keys_per_user=dk)


def laplace_histogram(counts: Mapping[Hashable, object] | CountParts, *, calibration: LaplaceHistogramCalibration,
                      max_keys: int, confidence: float = 0.95, domain: Collection[Hashable] = (),
                      rng: RngLike = None) -> HistogramResult:
    """Release the keys whose discrete-Laplace-noised count clears τ (and the public ``domain`` keys), with
    noisy counts and intervals; see :func:`stream_dp.mechanisms.gaussian_histogram.gaussian_histogram`.

    >>> cal = calibrate_laplace_histogram(epsilon=1.0, threshold_delta=1e-6, max_keys_per_user=1)
    >>> [row.key for row in laplace_histogram({"a": 500, "b": 1}, calibration=cal, max_keys=10, rng=1).rows]
    ['a']
    """
    h = discrete_laplace_quantile(calibration.scale, confidence)
    generator = make_rng(rng)
    r = calibration.boundary

    def coins(n: int) -> np.ndarray:  # exact Bernoulli(r): a uniform integer below the denominator (≤ 2^40)
        return uniform_below(generator, r.denominator, n) < r.numerator

    return noisy_threshold_release(
        counts, noise=lambda n: sample_discrete_laplace(calibration.scale, n, rng=generator),
        threshold=calibration.threshold, max_keys=max_keys, ci_half_width=h, domain=domain,
        events=calibration.events(), boundary=coins if r else None)
