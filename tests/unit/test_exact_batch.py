"""The batched exact samplers (stream_dp/mechanisms/exact_batch.py) draw exactly the discrete Gaussian and Laplace.

Each law is checked by a chi-square test of many draws against the exact pmf (cells of expected count ≥ 20, the
tails pooled); every test is seeded and asks p > 1e-4, so a correct sampler fails with probability < 1e-4 per
check. Deliberately broken batches -- a coin of the wrong probability, the zero of the Laplace counted twice, a
pool that keeps its accepted proposals by value -- fail the same tests with p < 1e-9 (each is run here).
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from stream_dp.mechanisms import exact_batch
from stream_dp.mechanisms.discrete_gaussian import (
    discrete_gaussian_pmf,
    sample_discrete_gaussian,
    sample_discrete_gaussian_scalar,
)
from stream_dp.mechanisms.exact_batch import (
    bernoulli_exp,
    bernoulli_ratio,
    discrete_gaussian_batch,
    discrete_laplace_batch,
    exp_minus_one,
)
from stream_dp.mechanisms.laplace_histogram import sample_discrete_laplace, sample_discrete_laplace_scalar
from stream_dp.rng import secure_rng


def laplace_pmf(t: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of P[y] ∝ e^{−|y|·s/t}, truncated where the mass left is < 1e-300."""
    q = math.exp(-s / t)
    half = int(700 * t / s) + 1
    ys = np.arange(-half, half + 1)
    return ys, (1 - q) / (1 + q) * q ** np.abs(ys).astype(float)


def chi_square_pvalue(draws: np.ndarray, ys: np.ndarray, p: np.ndarray, min_expected: float = 20.0) -> float:
    """Chi-square of ``draws`` against the pmf (ys, p): cells of expected count ≥ ``min_expected`` (merged from
    the centre outwards), what is left in each tail pooled into its neighbour."""
    n = len(draws)
    counts = np.bincount(np.searchsorted(ys, draws), minlength=len(ys))[:len(ys)]
    cells_observed, cells_expected = [], []
    observed = expected = 0.0
    for c, e in zip(counts, p * n):
        observed, expected = observed + c, expected + e
        if expected >= min_expected:
            cells_observed.append(observed)
            cells_expected.append(expected)
            observed = expected = 0.0
    cells_observed[-1] += observed
    cells_expected[-1] += expected
    cells_observed, cells_expected = np.array(cells_observed), np.array(cells_expected)
    cells_expected *= cells_observed.sum() / cells_expected.sum()  # the pmf's truncation (< 1e-300) rescaled away
    assert np.sum(counts) == n, "a draw fell outside the support tested"
    return float(stats.chisquare(cells_observed, cells_expected).pvalue)


# σ² on the calibration grid (the histogram's), tiny, a rational with a large denominator (every coin through
# Python integers), and large σ² (the acceptance exponent beyond int64)
GAUSSIAN_CASES = [Fraction(108993, 1000), Fraction(1, 3), Fraction(5, 2), Fraction(0.37), Fraction(15_000_000_123, 1000)]


@pytest.mark.parametrize("sigma2", GAUSSIAN_CASES, ids=str)
def test_the_batched_gaussian_has_the_exact_pmf(sigma2: Fraction) -> None:
    draws = discrete_gaussian_batch(np.random.default_rng(101), sigma2.numerator, sigma2.denominator, 200_000)
    ys, p = discrete_gaussian_pmf(sigma2)
    assert chi_square_pvalue(draws, ys, p) > 1e-4


@pytest.mark.parametrize("t,s", [(3, 2), (1, 1), (7, 3), (200, 1), (20_001, 1000)])
def test_the_batched_laplace_has_the_exact_pmf(t: int, s: int) -> None:
    draws = discrete_laplace_batch(np.random.default_rng(102), t, s, 200_000)
    ys, p = laplace_pmf(t, s)
    assert chi_square_pvalue(draws, ys, p) > 1e-4


def test_the_public_samplers_are_the_batched_ones_and_match_the_scalar_reference() -> None:
    """``sample_discrete_gaussian`` / ``sample_discrete_laplace`` (what releases call) draw the batched law on the
    production generator; the scalar reference draws the same law (a two-sample chi-square)."""
    sigma2 = Fraction(5, 2)
    batched = sample_discrete_gaussian(sigma2, 30_000, rng=secure_rng())
    scalar = sample_discrete_gaussian_scalar(sigma2, 30_000, rng=7)
    values = np.arange(-6, 7)
    table = [[np.sum(np.clip(x, -6, 6) == v) for v in values] for x in (batched, scalar)]
    assert stats.chi2_contingency(table).pvalue > 1e-4
    laplace = sample_discrete_laplace(Fraction(3, 2), 30_000, rng=secure_rng())
    reference = sample_discrete_laplace_scalar(Fraction(3, 2), 30_000, rng=8)
    table = [[np.sum(np.clip(x, -6, 6) == v) for v in values] for x in (laplace, reference)]
    assert stats.chi2_contingency(table).pvalue > 1e-4


@pytest.mark.parametrize("num,den", [(0, 5), (1, 3), (3, 3), (5, 2), (7, 1), (2**70 + 1, 3 * 2**68)])
def test_exp_coins_have_probability_e_to_minus_gamma(num: int, den: int) -> None:
    n = 200_000
    numbers = np.full(n, num, dtype=np.int64 if num < 2**62 else object)
    coins = bernoulli_exp(np.random.default_rng(103), numbers, den)
    p = math.exp(-num / den)
    assert abs(coins.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_ratio_coins_beyond_int64_compare_digit_by_digit() -> None:
    """num/den with den > 2⁶²: the long comparison in base 2⁶² (p = 1/3 and p = 1, which must always be true)."""
    den = 3 * 2**64
    coins = bernoulli_ratio(np.random.default_rng(104), np.full(90_000, 2**64, dtype=object), den)
    assert abs(coins.mean() - 1 / 3) <= 5 * math.sqrt(2 / 9 / 90_000)
    assert bernoulli_ratio(np.random.default_rng(105), np.full(1000, den, dtype=object), den).all()


@pytest.mark.parametrize("digits", [8, 3, 2])
def test_the_e_minus_one_coin_is_exact_also_past_its_packed_digits(digits: int, monkeypatch) -> None:
    """One integer below 8! carries the loop's coins for K = 2 … 8; loops past it continue with fresh coins. With
    fewer packed digits the continuation runs often -- the law must not change."""
    monkeypatch.setattr(exact_batch, "_DIGITS", digits)
    n = 400_000
    coins = exp_minus_one(np.random.default_rng(106), n)
    p = math.exp(-1)
    assert abs(coins.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------------------------------------------------------
# Broken variants: each must fail the test the real sampler passes
# ------------------------------------------------------------------------------------------------------------------


def _broken_exp_minus_one(rng: np.random.Generator, size: int) -> np.ndarray:
    """The packed coin with the divisibility test off by one factorial: coin K passes iff (K−1)! | R."""
    out = np.empty(size, dtype=bool)
    idx = np.arange(size)
    r = rng.integers(0, math.factorial(8), size=size)
    k = 2
    while len(idx):
        passed = r % math.factorial(k - 1) == 0 if k <= 8 else rng.integers(0, k, size=len(idx)) == 0
        out[idx[~passed]] = k % 2 == 1
        idx, r = idx[passed], r[passed]
        k += 1
    return out


def _laplace_counting_zero_twice(rng: np.random.Generator, t: int, s: int, size: int) -> np.ndarray:
    """Algorithm 2 without its "negative zero" rejection: P[0] doubled."""
    u = rng.integers(0, t, size=4 * size)
    u = u[exact_batch.bernoulli_exp_fraction(rng, u, t)][:size]
    y = (u + t * exact_batch._geometric_exp_minus_one(rng, len(u))) // s
    return np.where(rng.integers(0, 2, size=len(u)) == 1, -y, y)


def _gaussian_keeping_small_proposals(rng: np.random.Generator, n: int, d: int, size: int) -> np.ndarray:
    """A pool that keeps the accepted proposals of smallest magnitude instead of the first ones (value-dependent)."""
    t = math.isqrt(n // d) + 1
    y = exact_batch.discrete_laplace_batch(rng, t, 1, 3 * size)
    a = np.abs(y) * t * d - n
    kept = y[exact_batch.bernoulli_exp(rng, a * a, 2 * n * d * t * t)]
    return kept[np.argsort(np.abs(kept), kind="stable")][:size]


def test_broken_batches_fail_the_exactness_tests(monkeypatch) -> None:
    sigma2 = Fraction(5, 2)
    ys, p = discrete_gaussian_pmf(sigma2)
    with monkeypatch.context() as patch:
        patch.setattr(exact_batch, "exp_minus_one", _broken_exp_minus_one)
        draws = discrete_gaussian_batch(np.random.default_rng(101), 5, 2, 200_000)
    assert chi_square_pvalue(draws, ys, p) < 1e-9
    lys, lp = laplace_pmf(3, 2)
    assert chi_square_pvalue(_laplace_counting_zero_twice(np.random.default_rng(102), 3, 2, 200_000), lys, lp) < 1e-9
    draws = _gaussian_keeping_small_proposals(np.random.default_rng(107), 5, 2, 60_000)
    assert chi_square_pvalue(draws, ys, p) < 1e-9


def test_small_numerators_over_a_denominator_beyond_int64_stay_exact() -> None:
    """int64 numerators over a denominator past 2⁶³ (the acceptance coin's 2·n·d·t² can pass it while |a| is small):
    the coins run on Python integers -- int64 arithmetic with that denominator would overflow."""
    den = 3 * 2**62  # > 2⁶³
    coins = bernoulli_exp(np.random.default_rng(108), np.full(100_000, 2**62, dtype=np.int64), den)
    p = math.exp(-1 / 3)
    assert abs(coins.mean() - p) <= 5 * math.sqrt(p * (1 - p) / 100_000)


# ------------------------------------------------------------------------------------------------------------------
# Same seed, same draws: speed-ups of the batched samplers must not change a single draw
# ------------------------------------------------------------------------------------------------------------------


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_the_draws_of_a_seed_are_the_ones_before_the_packed_coin_table() -> None:
    """Digests of draws for fixed seeds, computed on d1e79a6 (exp_minus_one testing K = 2 … 8 in turn) and pinned:
    the look-up table of :func:`exact_batch._packed_coins` draws the same coins and decides them the same way, so a
    seeded simulation reproduces exactly across the change -- and a release's items too (tests/unit/test_api.py)."""
    assert _digest(sample_discrete_gaussian(Fraction(108993, 1000), 20_000, rng=11).tobytes()) == "7ef2ac8de928236f"
    assert _digest(sample_discrete_gaussian(Fraction(15_000_000_123, 1000), 5_000, rng=11).tobytes()) \
        == "3aa19d421ba6564e"
    assert _digest(sample_discrete_laplace(Fraction(5), 20_000, rng=12).tobytes()) == "22a642ebe59774c4"


@pytest.mark.parametrize("digits", [8, 3, 2])
def test_the_packed_coin_table_is_the_loop_over_k(digits: int) -> None:
    """Every entry of the table against CKS20 Algorithm 1's loop at γ = 1 read off R: pass K while K! divides R, the
    coin is whether the first failing K is odd; R = 0 passes every packed K (decided by fresh coins)."""
    table = exact_batch._packed_coins(digits)
    assert len(table) == math.factorial(digits)
    for r in range(1, math.factorial(digits)):
        k = 2
        while r % math.factorial(k) == 0:
            k += 1
        assert bool(table[r]) == (k % 2 == 1), r


def test_a_broken_packed_coin_table_fails_the_law(monkeypatch) -> None:
    """The table with its coins inverted (the loop's parity read the wrong way round): P = 1 − e^{−1}, caught."""
    real = exact_batch._packed_coins
    monkeypatch.setattr(exact_batch, "_packed_coins", lambda digits: ~real(digits))
    n = 100_000
    coins = exp_minus_one(np.random.default_rng(109), n)
    p = math.exp(-1)
    assert abs(coins.mean() - p) > 5 * math.sqrt(p * (1 - p) / n)
