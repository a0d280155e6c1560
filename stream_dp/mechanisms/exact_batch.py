"""Exact discrete Laplace and discrete Gaussian draws in batches: CKS20 Algorithms 1-3 on whole arrays.

Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020) give exact samplers
built from rejection loops over integer coins: Bernoulli(e^{−γ}) for rational γ (Algorithm 1), the discrete
Laplace (Algorithm 2) and the discrete Gaussian (Algorithm 3). The scalar versions in
:mod:`stream_dp.mechanisms.discrete_gaussian` run those loops one draw at a time in Python. Here every element of
a batch runs *the same* loop, and one pass of the loop body serves every element still in it: an element leaves
when its own loop would stop, the others go round again. Each element thus consumes its own fresh coins and
stops by its own rule, so the draws are i.i.d. with exactly the scalar sampler's law -- batching changes the
order in which coins are drawn, not what any draw is.

What keeps it exact (no floating point anywhere, as in the scalar sampler):

- every coin is "a uniform integer below d is below n" (:func:`bernoulli_ratio`): numpy's
  ``Generator.integers`` with an integer bound draws uniformly by rejection (Lemire's method), with no rounding;
  for bounds at or above 2^62 the comparison V < n/d runs digit by digit in base 2^62 on Python integers
  (V uniform in [0, 1), the digits of n/d by long division), so no quantity is ever rounded or overflows;
- Bernoulli(γ/K) in Algorithm 1 is drawn as Bernoulli(γ) ∧ Bernoulli(1/K), two independent coins whose
  conjunction has probability γ/K exactly (so K·d never has to fit a machine integer);
- integers that may exceed int64 (the acceptance exponent (|y|·t·d − n)² of Algorithm 3 for large σ² or
  σ² with a large denominator) are held as Python integers (object arrays) -- slower, equally exact.

The only randomness is ``Generator.integers`` of :func:`stream_dp.rng.make_rng`'s generator, so the production
ChaCha20 generator drops in (docs/privacy.md §1: noise from a CSPRNG). tests/unit/test_exact_batch.py compares
the draws with the exact pmf (chi-square) and checks that a deliberately broken batch (a coin at the wrong
probability) fails the same test.
"""

from __future__ import annotations

import functools
import math

import numpy as np

_SAFE = 2**62  # integers below this are held in int64 (products are bounded before they are formed)
_BASE = 2**62  # digit size of the long comparison of bernoulli_ratio for large denominators
# n! for n = 0 … 8 (8! < 2^16): one uniform integer below 8! carries the coins of e^{−1} for K = 2 … 8
_DIGITS = 8
_FACTORIAL = [math.factorial(n) for n in range(_DIGITS + 1)]


def uniform_below(rng: np.random.Generator, bound: int, size: int) -> np.ndarray:
    """``size`` uniform integers in [0, ``bound``) for 1 ≤ bound ≤ 2^62, drawn in the narrowest integer type that
    holds the bound (numpy draws 16- and 32-bit bounded integers from fewer generator bits; all exact)."""
    dtype = np.uint16 if bound <= 2**16 else np.uint32 if bound <= 2**32 else np.int64
    return rng.integers(0, bound, size=size, dtype=dtype)


def bernoulli_ratio(rng: np.random.Generator, num: np.ndarray, den: int) -> np.ndarray:
    """Independent coins, element i true with probability num[i]/den exactly (0 ≤ num ≤ den, den ≥ 1).

    >>> coins = bernoulli_ratio(np.random.default_rng(1), np.array([0, 5]), 5)
    >>> bool(coins[0]), bool(coins[1])
    (False, True)
    """
    if len(num) == 0:
        return np.zeros(0, dtype=bool)
    if den < _SAFE and num.dtype != object:
        return uniform_below(rng, den, len(num)) < num
    # digit by digit: V = 0.c1 c2 … (uniform digits below B) against p = num/den = 0.q1 q2 …; V < p iff the first
    # digit where they differ has c < q. p = 1 (num = den) gives q1 = B > every c: always true.
    out = np.zeros(len(num), dtype=bool)
    pending = np.arange(len(num))
    rest = num.astype(object)
    while len(pending):
        scaled = rest * _BASE
        q = scaled // den
        rest = scaled - q * den
        c = uniform_below(rng, _BASE, len(pending)).astype(object)
        below, above = c < q, c > q
        out[pending[below]] = True
        same = ~(below | above)
        pending, rest = pending[same], rest[same]
    return out


def bernoulli_exp_fraction(rng: np.random.Generator, num: np.ndarray, den: int) -> np.ndarray:
    """Coins of probability e^{−γ}, γ = num[i]/den ∈ [0, 1] per element (CKS20 Algorithm 1, first branch): K = 1, 2, …
    while Bernoulli(γ/K) succeeds; the coin is whether the loop stopped at an odd K. One round per K, over the
    elements whose loop is still running (Bernoulli(γ/K): a uniform integer below den·K is below num, or, when den·K
    does not fit int64, Bernoulli(γ) ∧ Bernoulli(1/K))."""
    out = np.empty(len(num), dtype=bool)
    idx, part = np.arange(len(num)), num
    k = 1
    while len(idx):
        if den * k < _SAFE and part.dtype != object:
            passed = uniform_below(rng, den * k, len(idx)) < part
        else:
            passed = bernoulli_ratio(rng, part, den) & (uniform_below(rng, k, len(idx)) == 0)
        out[idx[~passed]] = k % 2 == 1
        idx, part = idx[passed], part[passed]
        k += 1
    return out


@functools.lru_cache(maxsize=None)
def _packed_coins(digits: int) -> np.ndarray:
    """The coin decided by each R below ``digits``!: the loop passes K = 2 … j iff j! divides R, so it stops at the
    first K with K! ∤ R and the coin is whether that K is odd. Only R = 0 passes every packed K (its entry is unused:
    :func:`exp_minus_one` goes on with fresh coins). A table of ``digits``! booleans, built once per ``digits``."""
    r = np.arange(_FACTORIAL[digits])
    coin = np.zeros(len(r), dtype=bool)
    undecided = np.ones(len(r), dtype=bool)
    for k in range(2, digits + 1):
        stops = undecided & (r % _FACTORIAL[k] != 0)
        coin[stops] = k % 2 == 1
        undecided &= ~stops
    return coin


def exp_minus_one(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` coins of probability e^{−1} (Algorithm 1 at γ = 1). The loop's coin at K = 1 is Bernoulli(1); those at
    K = 2 … 8 are Bernoulli(1/K), independent: the mixed-radix digits d_K (uniform below K) of one uniform integer
    R below 8!, coin K passing iff d_K = 0 -- i.e. the loop passes K = 2 … j iff R is divisible by j!. Where that
    loop stops, and so the coin, is a function of R alone: one look-up in :func:`_packed_coins` decides every
    element at once (the same coins, the same outcome as testing K = 2 … 8 in turn). A loop that passes K = 8
    (R = 0, probability 1/8!) goes on with fresh Bernoulli(1/K) coins.

    >>> float(np.mean(exp_minus_one(np.random.default_rng(3), 100_000))).__round__(2)
    0.37
    """
    r = uniform_below(rng, _FACTORIAL[_DIGITS], size)
    out: np.ndarray = _packed_coins(_DIGITS)[r]
    idx = np.flatnonzero(r == 0)
    k = _DIGITS + 1
    while len(idx):
        passed = uniform_below(rng, k, len(idx)) == 0
        out[idx[~passed]] = k % 2 == 1
        idx = idx[passed]
        k += 1
    return out


def bernoulli_exp(rng: np.random.Generator, num: np.ndarray, den: int) -> np.ndarray:
    """Coins of probability e^{−γ}, γ = num[i]/den ≥ 0 per element (CKS20 Algorithm 1): ⌊γ⌋ coins of e^{−1}, all of
    which must succeed, then one of e^{−(γ − ⌊γ⌋)}.

    >>> bool(bernoulli_exp(np.random.default_rng(1), np.array([0]), 3)[0])  # e^0 = 1
    True
    """
    if den >= _SAFE and num.dtype != object:  # int64 arithmetic with den would overflow
        num = num.astype(object)
    whole = num // den
    frac = num - whole * den
    out = np.ones(len(num), dtype=bool)
    pending = np.flatnonzero(whole > 0)
    left = whole[pending]
    while len(pending):
        coin = exp_minus_one(rng, len(pending))
        out[pending[~coin]] = False
        left = left - 1
        keep = coin & (left > 0)
        pending, left = pending[keep], left[keep]
    alive = np.flatnonzero(out)
    out[alive] = bernoulli_exp_fraction(rng, frac[alive], den)
    return out


def _geometric_exp_minus_one(rng: np.random.Generator, size: int) -> np.ndarray:
    """V per element: the number of successes of Bernoulli(e^{−1}) coins before the first failure."""
    v = np.zeros(size, dtype=np.int64)
    idx = np.arange(size)
    while len(idx):
        idx = idx[exp_minus_one(rng, len(idx))]
        v[idx] += 1
    return v


def _pool_size(need: int, rate: float) -> int:
    """How many proposals to draw for ``need`` acceptances at an acceptance rate near ``rate``."""
    return int(need / max(rate, 0.05) * 1.1) + 16


def discrete_laplace_batch(rng: np.random.Generator, t: int, s: int, size: int) -> np.ndarray:
    """``size`` exact i.i.d. draws with P[y] ∝ e^{−|y|·s/t} (scale t/s; integers t, s ≥ 1; CKS20 Algorithm 2), int64.

    Proposals are drawn in pools and the first ``size`` accepted ones, in the order drawn, are returned: the
    accepted proposals of an i.i.d. sequence are i.i.d. with the accepted law, and which ones are used does not
    depend on their values (a pool's size may depend on the previous pool's acceptance count: that only decides
    how far the sequence is drawn).

    >>> discrete_laplace_batch(np.random.default_rng(1), 3, 2, 4).dtype
    dtype('int64')
    """
    if t < 1 or s < 1:
        raise ValueError(f"t and s must be integers >= 1, got {t!r}, {s!r}")
    if t >= 2**40:  # t·V must stay far inside int64; beyond, the scalar loop (Python integers)
        from stream_dp.mechanisms.discrete_gaussian import _discrete_laplace

        return np.fromiter((_discrete_laplace(rng, t, s) for _ in range(size)), dtype=np.int64, count=size)
    parts: list[np.ndarray] = []
    need, rate = size, 0.5
    while need > 0:
        m = _pool_size(need, rate)
        u = uniform_below(rng, t, m).astype(np.int64)
        u = u[bernoulli_exp_fraction(rng, u, t)]
        y = (u + t * _geometric_exp_minus_one(rng, len(u))) // s
        negative = uniform_below(rng, 2, len(u)) == 1
        keep = ~(negative & (y == 0))
        accepted = np.where(negative, -y, y)[keep][:need]
        parts.append(accepted)
        need -= len(accepted)
        rate = np.count_nonzero(keep) / m
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def discrete_gaussian_batch(rng: np.random.Generator, n: int, d: int, size: int) -> np.ndarray:
    """``size`` exact i.i.d. draws of N_Z(0, σ²), σ² = n/d (integers n, d ≥ 1; CKS20 Algorithm 3), int64: a discrete
    Laplace proposal y of scale t = ⌊σ⌋ + 1, accepted with probability e^{−γ}, γ = (|y|·t·d − n)²/(2·n·d·t²);
    proposals in pools as in :func:`discrete_laplace_batch`.

    >>> discrete_gaussian_batch(np.random.default_rng(1), 4, 1, 3).dtype
    dtype('int64')
    """
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be integers >= 1, got {n!r}, {d!r}")
    t = math.isqrt(n // d) + 1
    td = t * d
    den = 2 * n * td * t
    parts: list[np.ndarray] = []
    need, rate = size, 0.5
    while need > 0:
        m = _pool_size(need, rate)
        y = discrete_laplace_batch(rng, t, 1, m)
        magnitude = np.abs(y)
        bound = int(magnitude.max()) * td + n  # |a| ≤ bound for a = |y|·t·d − n
        a = magnitude * td - n if bound * bound < _SAFE else magnitude.astype(object) * td - n
        keep = bernoulli_exp(rng, a * a, den)  # Python integers when a² or den may not fit int64: exact at any size
        accepted = y[keep][:need]
        parts.append(accepted)
        need -= len(accepted)
        rate = np.count_nonzero(keep) / m
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
