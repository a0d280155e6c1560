"""Noise families of the sparse-vector-with-gap algorithms and the exact tails of their gap noise.

Ding et al., "Free Gap Estimates from the Exponential Mechanism, Sparse Vector, Noisy Max and Related
Algorithms" (seed 003), §5.1–5.3, Table 1.

Every noise is parameterised by its **rate** ``λ``: shifting the noise by one unit changes its log-density
(log-mass) by at most ``λ``. So ``Lap(1/λ)``, ``Exp(1/λ)`` and ``Geo(1 - e^{-λ})`` all pay ``λ`` for a unit
shift, which is what the alignment proofs of Algorithms 1 and 3 need. One-sided noises are centred by
subtracting a constant **offset**: the mean ``1/λ`` for ``Exp(1/λ)``; for numpy's geometric (support
``{1, 2, …}``, mean ``1/p``) the *integer nearest the mean*, ``round(1/p)`` — the seed's Table 1 gives
support ``{0, 1, …}`` but the mean ``1/p``, which only fits ``{1, 2, …}`` (numpy's, as in the authors' code). The
integer offset keeps every geometric quantity an integer (issue 16): with integer counts and an integer
threshold the noisy threshold, the released gap, the estimate and the lower bound are integers, so no
floating-point noise ever leaves the service (Mironov 2012's least-significant-bits attack needs the
float noise of Laplace/exponential draws). The price is a bias of at most 1/2 per draw (at most 1 in a
gap), against a noise standard deviation of ``√(1−p)/p`` — tens for the rates used.

The released gap of a query is ``γ = q + N* − T − N0`` with ``N*`` the (centred) query noise of the branch
that fired (rate ``a``) and ``N0`` the (centred) threshold noise (rate ``c``). Hence
``q = γ + T − X`` with ``X = N* − N0`` and ``P(q ≥ γ + T − t) = P(X ≤ t)``. The CDFs of ``X``:

- **Laplace** (Lemma 3, restated for general rates): for ``t ≥ 0``
  ``P(X ≤ t) = 1 − (c² e^{−a t} − a² e^{−c t}) / (2 (c² − a²))`` (``a ≠ c``),
  ``1 − (2 + c t) e^{−c t} / 4`` (``a = c``); ``X`` is symmetric, so ``P(X ≤ −t) = 1 − P(X ≤ t)``.
- **Exponential** (derived here): with ``D = E* − E0``, ``E* ~ Exp(1/a)``, ``E0 ~ Exp(1/c)`` independent,
  ``P(D ≤ x) = 1 − c/(a+c) · e^{−a x}`` for ``x ≥ 0`` and ``a/(a+c) · e^{c x}`` for ``x < 0``
  (condition on ``E0`` and integrate); ``X = D − (1/a − 1/c)``.
- **Geometric** (derived here): with ``r* = e^{−a}``, ``r0 = e^{−c}`` and ``D = G* − G0`` (integers),
  ``P(D = d) = p* p0 r*^d / (1 − r* r0)`` for ``d ≥ 0`` and ``p* p0 r0^{−d} / (1 − r* r0)`` for ``d < 0``,
  so ``P(D ≤ d) = 1 − p0 r*^{d+1} / (1 − r* r0)`` for ``d ≥ 0`` and ``p* r0^{−d} / (1 − r* r0)`` for
  ``d < 0``; ``X = D − (b* − b0)`` with ``b = round(1/p)`` the integer offsets. The bound ``γ + T − t`` is then an integer whenever
  the query value and ``T`` are integers.

These tails are for the noise of one query with a fixed value; a bound attached to an answer that passed
a branch test is conditioned on that test (selection), which shifts the noise upward for queries near
the threshold, so the stated confidence holds exactly only for queries far above the threshold
(:mod:`stream_dp.mechanisms.svt_bounds` calibrates the published bound for that).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

NoiseName = Literal["laplace", "exponential", "geometric"]
NOISES: tuple[str, ...] = ("laplace", "exponential", "geometric")


def noise_mean(noise: str, rate: float) -> float:
    """Mean of the *sampled* (uncentred) noise of ``rate``: 0, ``1/λ`` or ``1/p``.

    >>> noise_mean("exponential", 0.5)
    2.0
    """
    if noise == "laplace":
        return 0.0
    if noise == "exponential":
        return 1.0 / rate
    if noise == "geometric":
        return 1.0 / -math.expm1(-rate)
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def noise_variance(noise: str, rate: float) -> float:
    """Variance of the noise of ``rate``: ``2/λ²`` (Laplace), ``1/λ²`` (exponential), ``(1−p)/p²``.

    >>> noise_variance("laplace", 0.5)
    8.0
    """
    if noise == "laplace":
        return 2.0 / rate**2
    if noise == "exponential":
        return 1.0 / rate**2
    if noise == "geometric":
        p = -math.expm1(-rate)
        return math.exp(-rate) / p**2
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def noise_offset(noise: str, rate: float) -> float:
    """The constant :func:`sample_centred` subtracts: 0 (Laplace), ``1/λ`` (exponential) or the integer
    ``round(1/p)`` (geometric: the released numbers stay integers).

    >>> noise_offset("geometric", 0.4), round(noise_mean("geometric", 0.4), 3)
    (3.0, 3.033)
    """
    if noise == "geometric":
        return float(math.floor(noise_mean(noise, rate) + 0.5))
    return noise_mean(noise, rate)


def sample_centred(noise: str, rate: float, rng: np.random.Generator) -> float:
    """One draw of the noise of ``rate`` minus its offset (:func:`noise_offset`): an integer for geometric.

    Exactly one call to the generator per draw (``laplace``, ``exponential`` or ``geometric``).
    """
    if noise == "laplace":
        return float(rng.laplace(0.0, 1.0 / rate))
    if noise == "exponential":
        return float(rng.exponential(1.0 / rate)) - 1.0 / rate
    if noise == "geometric":
        p = -math.expm1(-rate)
        return float(int(rng.geometric(p)) - int(noise_offset(noise, rate)))
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def default_theta(k: int, *, noise: str, monotone: bool, branch: str = "middle") -> float:
    """The seed's variance-optimal threshold share θ (§5.1 and §5.2, "Choice of θ").

    ``branch="top"`` optimises the gap of top-branch answers, ``"middle"`` the middle branch; exponential
    and geometric noise use the same θ as Laplace (their variances all halve). Monotone: ``1/(1+∛(4k²))``
    (top) or ``1/(1+∛k²)`` (middle); general: ``1/(1+∛(16k²))`` or ``1/(1+∛(4k²))``.

    >>> round(default_theta(8, noise="laplace", monotone=True), 4)
    0.2
    """
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    if branch not in ("top", "middle"):
        raise ValueError(f"branch must be 'top' or 'middle', got {branch!r}")
    factor = {("top", True): 4.0, ("middle", True): 1.0, ("top", False): 16.0, ("middle", False): 4.0}
    return 1.0 / (1.0 + float((factor[branch, monotone] * k * k) ** (1.0 / 3.0)))


@dataclass(frozen=True)
class GapTail:
    """The distribution of ``X = N* − N0``, the noise in a released gap (module docstring).

    ``noise`` names the family, ``query_rate`` is ``a`` (branch that fired), ``threshold_rate`` is ``c``.
    """

    noise: str
    query_rate: float
    threshold_rate: float

    @property
    def mean(self) -> float:
        """``E[X]``: 0 for Laplace and exponential; for geometric the bias of the integer offsets,
        ``(1/p* − round(1/p*)) − (1/p0 − round(1/p0))``, at most 1 in absolute value."""
        a, c = self.query_rate, self.threshold_rate
        return ((noise_mean(self.noise, a) - noise_offset(self.noise, a))
                - (noise_mean(self.noise, c) - noise_offset(self.noise, c)))

    @property
    def variance(self) -> float:
        """``Var(X) = Var(N*) + Var(N0)``: the variance of the gap as an estimate of ``q − T``."""
        return noise_variance(self.noise, self.query_rate) + noise_variance(self.noise, self.threshold_rate)

    def cdf(self, t: float) -> float:
        """``P(X ≤ t)``, exact (Lemma 3 for Laplace; the derived forms above otherwise).

        >>> round(GapTail("laplace", 1.0, 1.0).cdf(0.0), 6)
        0.5
        """
        a, c = self.query_rate, self.threshold_rate
        if self.noise == "laplace":
            if t < 0:
                return 1.0 - self.cdf(-t)
            return 1.0 - _laplace_diff_upper(a, c, t)
        if self.noise == "exponential":
            x = t + (1.0 / a - 1.0 / c)
            if x >= 0:
                return 1.0 - c / (a + c) * math.exp(-a * x)
            return a / (a + c) * math.exp(c * x)
        if self.noise == "geometric":
            shift = noise_offset("geometric", a) - noise_offset("geometric", c)
            return self._geo_cdf_d(math.floor(t + shift + 1e-9))
        raise ValueError(f"noise must be one of {NOISES}, got {self.noise!r}")

    def _geo_cdf_d(self, d: int) -> float:
        """``P(G* − G0 ≤ d)`` for an integer ``d``."""
        a, c = self.query_rate, self.threshold_rate
        r_q, r_0 = math.exp(-a), math.exp(-c)
        p_q, p_0 = -math.expm1(-a), -math.expm1(-c)
        norm = -math.expm1(-(a + c))  # 1 − r* r0
        if d >= 0:
            return 1.0 - p_0 * r_q ** (d + 1) / norm
        return p_q * r_0 ** (-d) / norm

    def quantile(self, confidence: float) -> float:
        """Smallest ``t`` with ``P(X ≤ t) ≥ confidence`` (so ``q ≥ γ + T − t`` w.p. ``confidence``).

        >>> tail = GapTail("exponential", 1.0, 1.0)
        >>> round(tail.cdf(tail.quantile(0.95)), 9)
        0.95
        """
        if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        a, c = self.query_rate, self.threshold_rate
        if self.noise == "exponential":
            split = a / (a + c)  # P(D ≤ 0)
            if confidence >= split:
                x = -math.log((1.0 - confidence) * (a + c) / c) / a
            else:
                x = math.log(confidence * (a + c) / a) / c
            return x - (1.0 / a - 1.0 / c)
        if self.noise == "geometric":
            shift = noise_offset("geometric", a) - noise_offset("geometric", c)
            d = self._geo_quantile_d(confidence)
            return d - shift
        if self.noise == "laplace":
            return _bisect_quantile(self.cdf, confidence, scale=math.sqrt(self.variance))
        raise ValueError(f"noise must be one of {NOISES}, got {self.noise!r}")

    def _geo_quantile_d(self, confidence: float) -> int:
        a, c = self.query_rate, self.threshold_rate
        # closed-form guess from the two branches, then step to the exact smallest integer
        if confidence >= self._geo_cdf_d(-1):
            p_0, norm = -math.expm1(-c), -math.expm1(-(a + c))
            guess = math.ceil(math.log((1.0 - confidence) * norm / p_0) / -a) - 1
        else:
            p_q, norm = -math.expm1(-a), -math.expm1(-(a + c))
            guess = -math.floor(math.log(confidence * norm / p_q) / -c)
        d = int(guess)
        while self._geo_cdf_d(d) < confidence:
            d += 1
        while self._geo_cdf_d(d - 1) >= confidence:
            d -= 1
        return d


def _laplace_diff_upper(a: float, c: float, t: float) -> float:
    """``P(X > t)`` for ``t ≥ 0``, ``X = Lap(1/a) − Lap(1/c)`` (Lemma 3), stable when ``a ≈ c``."""
    if abs(a - c) <= 1e-6 * max(a, c):
        m = 0.5 * (a + c)
        return (2.0 + m * t) * math.exp(-m * t) / 4.0
    return (c * c * math.exp(-a * t) - a * a * math.exp(-c * t)) / (2.0 * (c * c - a * a))


def _bisect_quantile(cdf: Callable[[float], float], confidence: float, *, scale: float) -> float:
    lo, hi = -scale, scale
    while cdf(lo) > confidence:
        lo *= 2.0
    while cdf(hi) < confidence:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if cdf(mid) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, abs(hi)):
            break
    return hi
