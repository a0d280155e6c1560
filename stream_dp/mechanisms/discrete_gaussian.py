"""The discrete Gaussian on the integers: an exact sampler and its tail probabilities (CKS20).

N_Z(0, σ²) puts mass  e^{−y²/(2σ²)} / Σ_{z∈Z} e^{−z²/(2σ²)}  on every integer y (Canonne, Kamath &
Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Definition 1).

Why discrete: the counts are integers, so integer noise keeps every released value an integer and the
sampler never touches floating point -- the floating-point attacks on textbook continuous samplers
(Mironov 2012) have nothing to act on. :func:`sample_discrete_gaussian` follows CKS20 Algorithm 3
(discrete Laplace proposals, Algorithm 2, accepted with an exact Bernoulli(e^{−γ}) coin, Algorithm 1) in
rational arithmetic: σ² is a :class:`fractions.Fraction`, every coin is "a uniform integer below d is below
n", and the only source of randomness is the numpy Generator API of :func:`stream_dp.rng.make_rng`
(``integers`` and ``bytes``), so a CSPRNG-backed generator drops in. It runs the algorithm on whole arrays
(:mod:`stream_dp.mechanisms.exact_batch`, ~50x faster); :func:`sample_discrete_gaussian_scalar` is the same
algorithm one draw at a time in Python integers, kept as the reference.

Privacy fact used by the histogram (CKS20 Proposition 5 plus tensorisation): for integers μ, ν,
D_α(N_Z(μ, σ²) ‖ N_Z(ν, σ²)) ≤ α(μ−ν)²/(2σ²); independent coordinates add their Rényi divergences, so an
integer vector query of L2 sensitivity Δ₂ with i.i.d. N_Z(0, σ²) noise is Δ₂²/(2σ²)-zCDP -- exactly the
continuous Gaussian's ρ.

:func:`discrete_gaussian_tail` computes P[Z ≥ m] in float64 from the pmf (a relative error of ~1e-15,
tested against 60-digit decimal arithmetic in tests/unit/test_gaussian_histogram.py).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import check_positive_fraction, check_size
from stream_dp.mechanisms.exact_batch import discrete_gaussian_batch
from stream_dp.rng import RngLike, make_rng

# Coordinates beyond this many σ carry mass < e^{-800}: below float64's smallest normal number.
_TAIL_SIGMAS = 40


def as_sigma2(sigma2: Any) -> Fraction:
    """σ² as an exact positive Fraction (floats convert exactly; the sampler then uses exactly this σ²)."""
    return check_positive_fraction(sigma2, "sigma2")


def _uniform_below(rng: np.random.Generator, n: int) -> int:
    """A uniform integer in [0, n) for any Python int n ≥ 1 (rejection from whole random bytes)."""
    if n <= 2**62:
        return int(rng.integers(0, n))
    nbits = n.bit_length()
    nbytes = (nbits + 7) // 8
    excess = 8 * nbytes - nbits
    while True:
        r = int.from_bytes(rng.bytes(nbytes), "big") >> excess
        if r < n:
            return r


def _bernoulli_exp_le1(rng: np.random.Generator, num: int, den: int) -> bool:
    """Exact Bernoulli(e^{−γ}) for γ = num/den in [0, 1] (CKS20 Algorithm 1, first branch): count the
    successes of Bernoulli(γ/k), k = 1, 2, ...; the first failure at an odd k has probability e^{−γ}."""
    k = 1
    while _uniform_below(rng, den * k) < num:
        k += 1
    return k % 2 == 1


def _bernoulli_exp(rng: np.random.Generator, num: int, den: int) -> bool:
    """Exact Bernoulli(e^{−γ}) for γ = num/den ≥ 0 (CKS20 Algorithm 1): ⌊γ⌋ coins of e^{−1}, then the rest."""
    whole = num // den
    for _ in range(whole):
        if not _bernoulli_exp_le1(rng, 1, 1):
            return False
    return _bernoulli_exp_le1(rng, num - whole * den, den)


def _discrete_laplace(rng: np.random.Generator, t: int, s: int = 1) -> int:
    """Exact discrete Laplace with P[y] ∝ e^{−|y|·s/t}: scale t/s, integers t, s ≥ 1 (CKS20 Algorithm 2)."""
    while True:
        u = _uniform_below(rng, t)
        if not _bernoulli_exp(rng, u, t):
            continue
        v = 0
        while _bernoulli_exp_le1(rng, 1, 1):
            v += 1
        y = (u + t * v) // s
        negative = _uniform_below(rng, 2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def _discrete_gaussian_one(rng: np.random.Generator, n: int, d: int, t: int) -> int:
    """One exact draw of N_Z(0, σ²), σ² = n/d (CKS20 Algorithm 3, t = ⌊σ⌋ + 1): accept a discrete Laplace
    proposal y with probability e^{−γ}, γ = (|y| − σ²/t)²/(2σ²) = (|y|·t·d − n)² / (2·n·d·t²)."""
    den = 2 * n * d * t * t
    while True:
        y = _discrete_laplace(rng, t)
        if _bernoulli_exp(rng, (abs(y) * t * d - n) ** 2, den):
            return y


def sample_discrete_gaussian(sigma2: Any, size: int, rng: RngLike = None) -> np.ndarray:
    """``size`` exact i.i.d. draws of N_Z(0, σ²) as an int64 array (CKS20 Algorithm 3, in batches:
    :func:`~stream_dp.mechanisms.exact_batch.discrete_gaussian_batch`).

    >>> sample_discrete_gaussian(4, 3, rng=1).dtype
    dtype('int64')
    """
    s2 = as_sigma2(sigma2)
    size = check_size(size)
    return discrete_gaussian_batch(make_rng(rng), s2.numerator, s2.denominator, size)


def sample_discrete_gaussian_scalar(sigma2: Any, size: int, rng: RngLike = None) -> np.ndarray:
    """The same law as :func:`sample_discrete_gaussian`, one draw at a time in Python integers (CKS20 Algorithm 3
    as written): the reference the batched sampler is tested and benchmarked against (bench/bench_samplers.py).

    >>> sample_discrete_gaussian_scalar(4, 3, rng=1).dtype
    dtype('int64')
    """
    s2 = as_sigma2(sigma2)
    size = check_size(size)
    generator = make_rng(rng)
    n, d = s2.numerator, s2.denominator
    t = math.isqrt(n // d) + 1  # ⌊σ⌋ + 1, exact
    return np.fromiter((_discrete_gaussian_one(generator, n, d, t) for _ in range(size)), dtype=np.int64,
                       count=size)


def _support(sigma2: float) -> np.ndarray:
    half = int(math.ceil(_TAIL_SIGMAS * math.sqrt(sigma2))) + 1
    return np.arange(-half, half + 1, dtype=np.int64)


def discrete_gaussian_pmf(sigma2: Any) -> tuple[np.ndarray, np.ndarray]:
    """(support, pmf) of N_Z(0, σ²) over |y| ≤ 40σ + 1 (the rest has mass < 1e-300).

    >>> ys, p = discrete_gaussian_pmf(1)
    >>> round(float(p.sum()), 12), int(ys[p.argmax()])
    (1.0, 0)
    """
    s2 = float(as_sigma2(sigma2))
    ys = _support(s2)
    w = np.exp(-(ys.astype(np.float64) ** 2) / (2 * s2))
    return ys, w / w.sum()


def discrete_gaussian_tail(sigma2: Any, m: int) -> float:
    """P[Z ≥ m] for Z ~ N_Z(0, σ²), integer m, in float64.

    The terms are summed from the smallest (so rounding does not swamp them) relative to the largest one
    of the tail, which keeps the relative error near machine precision even far out in the tail.

    >>> discrete_gaussian_tail(1, 0) > 0.5
    True
    >>> abs(discrete_gaussian_tail(2, 1) + discrete_gaussian_tail(2, 0) - 1) < 1e-15  # symmetry
    True
    """
    s2 = float(as_sigma2(sigma2))
    m = int(m)
    ys = _support(s2)
    if m <= -ys[-1]:
        return 1.0
    if m > 0:
        tail = np.arange(m, m + int(math.ceil(_TAIL_SIGMAS * math.sqrt(s2))) + 2, dtype=np.float64)
        # log of each unnormalised term minus the log of the first, then the normaliser in log space
        rel = np.exp(-(tail**2 - float(m) ** 2) / (2 * s2))
        log_tail = -float(m) ** 2 / (2 * s2) + math.log(float(np.sum(rel[::-1])))
        log_norm = math.log(float(np.sum(np.exp(-(ys.astype(np.float64) ** 2) / (2 * s2)))))
        return math.exp(log_tail - log_norm)
    return 1.0 - discrete_gaussian_tail(sigma2, 1 - m)


def discrete_gaussian_quantile(sigma2: Any, confidence: float) -> int:
    """The smallest integer h ≥ 0 with P[|Z| ≤ h] ≥ ``confidence`` (the half-width of a two-sided interval).

    >>> discrete_gaussian_quantile(1, 0.95)
    2
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    ys, p = discrete_gaussian_pmf(sigma2)
    centre = len(ys) // 2
    inside = p[centre] + 2 * np.cumsum(p[centre + 1:])  # P[|Z| ≤ h] for h = 1, 2, ...
    if p[centre] >= confidence:
        return 0
    return int(np.searchsorted(inside, confidence) + 1)
