"""The exact privacy profile of the thresholded (sparse) discrete-Gaussian histogram, and a calibration by it
(docs/privacy.md §8c; Wilkins, Kifer, Zhang & Karrer 2024, "Exact privacy analysis of the Gaussian sparse
histogram mechanism", for the continuous Gaussian).

Mechanism (:mod:`stream_dp.mechanisms.gaussian_histogram`): for every key with count h_k ≥ 1, Y_k = h_k + Z_k,
Z_k i.i.d. discrete Gaussian N_Z(0, σ²); (k, Y_k) is published iff Y_k ≥ τ. Neighbours: D = D′ plus one user
who adds 1 to m ≤ Δ keys, j of them new (count 0 in D′), m − j shared.

- Shared keys: thresholding them is post-processing of their full noisy values, so they are bounded by the
  uncensored d = m − j dimensional discrete Gaussian with shift (1, …, 1). Its privacy loss is linear in
  S = Z_1 + … + Z_d: L = (2S + d)/(2σ²) under either direction (S is symmetric), so its hockey-stick
  divergence is δ_G(d, ε) = E[(1 − e^{ε − L})₊], a sum over S's pmf (:func:`shared_keys_delta`).
- New keys: under D each is withheld with probability q = P[1 + Z < τ], under D′ always. Summing the
  hockey-stick over (new keys' part, shared values):
  δ_{D→D′}(ε) = 1 − q^j + q^j·δ_G(d, ε + j·ln(1/q)) and δ_{D′→D}(ε) = δ_G(d, ε − j·ln(1/q))
  (the reverse direction has no q^j weight: e^ε·q^j·P = e^{ε − j ln(1/q)}·P).
- δ(ε) = the max over m ≤ Δ, 0 ≤ j ≤ m and both directions. For a fixed j both terms grow with d (dropping a
  shared coordinate is post-processing), so m = Δ is the worst case: the max runs over j only
  (:func:`sparse_histogram_delta`; the test suite checks the full max over m agrees).

Every number computed here is an upper bound: the pmf of Z is truncated at ±K with its normaliser taken over
the truncated support (so each kept probability is over-, not under-stated), the mass never represented
(outside ±K, and the far tails of S trimmed below 1e-30) is added to δ_G, the per-key release probability is
inflated by a relative 1e-9, and the final δ by a relative 1e-9 against float rounding.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from stream_dp.mechanisms._validation import check_delta, check_epsilon, check_positive_int
from stream_dp.mechanisms.discrete_gaussian import as_sigma2, discrete_gaussian_tail

_TRIM = 1e-30  # S's pmf entries below this at either end are dropped (their mass is added to δ)
_RELATIVE_MARGIN = 1e-9  # relative inflation of the key release probability and of the final δ


@dataclass(frozen=True)
class _SumPmf:
    """The pmf of S = Z_1 + … + Z_d on the integers [offset, offset + len(pmf)), each entry an upper bound,
    and ``lost``: an upper bound on the probability mass not represented."""

    offset: int
    pmf: np.ndarray
    lost: float


def _truncated_pmf(s2: float) -> _SumPmf:
    """N_Z(0, σ²) on [−K, K], K = ⌈11.8σ⌉ + 1 (e^{−K²/(2σ²)} < 1e-30), normalised over the truncated support
    (so every entry ≥ the true probability); ``lost`` bounds P[|Z| > K] ≤ 2·e^{−(K+1)²/(2σ²)}/(1 − e^{−(K+1)/σ²})
    (the normaliser is ≥ 1, and z² ≥ (K+1)² + 2(K+1)(z−K−1) for z ≥ K+1)."""
    k = math.ceil(11.8 * math.sqrt(s2)) + 1
    z = np.arange(-k, k + 1, dtype=np.float64)
    w = np.exp(-(z * z) / (2 * s2))
    pmf = w / w.sum()
    lost = 2 * math.exp(-((k + 1) ** 2) / (2 * s2)) / -math.expm1(-(k + 1) / s2)
    return _SumPmf(-k, pmf, lost)


def _trim(s: _SumPmf) -> _SumPmf:
    keep = np.flatnonzero(s.pmf >= _TRIM)
    lo, hi = int(keep[0]), int(keep[-1]) + 1
    dropped = float(s.pmf[:lo].sum() + s.pmf[hi:].sum())
    return _SumPmf(s.offset + lo, s.pmf[lo:hi], s.lost + dropped)


@functools.lru_cache(maxsize=64)
def _sum_pmfs(sigma2: Fraction, max_d: int) -> tuple[_SumPmf, ...]:
    """The pmfs of S_d for d = 0 … max_d by direct convolution (all terms positive: no cancellation)."""
    z = _truncated_pmf(float(sigma2))
    out = [_SumPmf(0, np.ones(1), 0.0)]
    for _ in range(max_d):
        prev = out[-1]
        conv = np.convolve(prev.pmf, z.pmf)  # direct: relative accuracy ~1e-15 per entry, also in the tails
        out.append(_trim(_SumPmf(prev.offset + z.offset, conv, prev.lost + z.lost)))
    return tuple(out)


def _delta_g(s: _SumPmf, d: int, s2: float, eps: float) -> float:
    """δ_G(d, ε) = Σ_s P[S = s]·(1 − e^{ε − (2s + d)/(2σ²)})₊ + lost (an upper bound)."""
    if d == 0:
        return max(0.0, -math.expm1(eps))
    # terms are positive where (2s + d)/(2σ²) > ε, i.e. s > σ²ε − d/2
    first = max(0, math.floor(s2 * eps - d / 2) + 1 - s.offset)
    if first >= len(s.pmf):
        return s.lost
    values = np.arange(s.offset + first, s.offset + len(s.pmf), dtype=np.float64)
    loss = (2 * values + d) / (2 * s2)
    terms = s.pmf[first:] * -np.expm1(eps - loss)
    return float(np.sum(np.maximum(terms, 0.0))) + s.lost


def shared_keys_delta(*, sigma2: object, shifted_keys: int, epsilon: float) -> float:
    """δ_G(d, ε): the exact hockey-stick divergence (an upper bound within ~1e-30) of d i.i.d. discrete
    Gaussians N_Z(0, σ²) shifted by 1 each (either direction: the loss distribution is the same).

    >>> shared_keys_delta(sigma2=1, shifted_keys=0, epsilon=0.5)
    0.0
    >>> 0.0 < shared_keys_delta(sigma2=100, shifted_keys=5, epsilon=1.0) < 1e-3
    True
    """
    s2 = as_sigma2(sigma2)
    d = int(shifted_keys)
    if d < 0:
        raise ValueError(f"shifted_keys must be >= 0, got {shifted_keys!r}")
    return _delta_g(_sum_pmfs(s2, d)[d], d, float(s2), float(epsilon))


def key_release_probability(*, sigma2: object, threshold: int) -> float:
    """P[1 + Z ≥ τ] for a key of count 1, inflated by a relative 1e-9 (every δ term grows with it)."""
    return min(1.0, discrete_gaussian_tail(as_sigma2(sigma2), int(threshold) - 1) * (1 + _RELATIVE_MARGIN))


def direction_deltas(*, sigma2: object, threshold: int, new_keys: int, shared_keys: int, epsilon: float
                     ) -> tuple[float, float]:
    """(δ_{D→D′}(ε), δ_{D′→D}(ε)) for a user with ``new_keys`` new and ``shared_keys`` shared keys."""
    s2 = as_sigma2(sigma2)
    j, d = int(new_keys), int(shared_keys)
    sums = _sum_pmfs(s2, d)[d]
    p = key_release_probability(sigma2=s2, threshold=threshold)
    if p >= 1:
        return (1.0 if j else _delta_g(sums, d, float(s2), epsilon)), _delta_g(sums, d, float(s2), epsilon)
    log_inv_q = -math.log1p(-p)
    log_q_j = -j * log_inv_q
    q_j = math.exp(log_q_j)
    forward = -math.expm1(log_q_j) + q_j * _delta_g(sums, d, float(s2), epsilon + j * log_inv_q)
    backward = _delta_g(sums, d, float(s2), epsilon - j * log_inv_q)
    return forward, backward


def sparse_histogram_delta(*, sigma2: object, threshold: int, max_keys_per_user: int, epsilon: float) -> float:
    """δ(ε) of one thresholded discrete-Gaussian histogram release (module docstring): the max over
    j = 0 … Δ new keys (with Δ − j shared) and both directions, inflated by a relative 1e-9.

    >>> sparse_histogram_delta(sigma2=109, threshold=56, max_keys_per_user=5, epsilon=1.0) < 1e-6
    True
    """
    s2 = as_sigma2(sigma2)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    eps = float(epsilon)
    worst = 0.0
    for j in range(dk + 1):
        worst = max(worst, *direction_deltas(sigma2=s2, threshold=threshold, new_keys=j, shared_keys=dk - j,
                                             epsilon=eps))
    return min(1.0, worst * (1 + _RELATIVE_MARGIN))


def exact_threshold(*, sigma2: object, epsilon: float, delta: float, max_keys_per_user: int) -> int | None:
    """The smallest integer τ ≥ 1 with :func:`sparse_histogram_delta` ≤ δ, or None when no τ reaches it (the
    shared-key term alone, δ_G(Δ, ε), exceeds δ: σ is too small). δ falls as τ grows (both directions'
    terms decrease as q grows), so the search is a doubling and bisection."""
    from stream_dp.mechanisms.gaussian_histogram import smallest_threshold

    s2 = as_sigma2(sigma2)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    if shared_keys_delta(sigma2=s2, shifted_keys=dk, epsilon=epsilon) * (1 + _RELATIVE_MARGIN) >= delta:
        return None
    return smallest_threshold(lambda tau: sparse_histogram_delta(sigma2=s2, threshold=tau, max_keys_per_user=dk,
                                                                 epsilon=epsilon) <= delta)


# The calibration rule (data-independent: it reads only ε, δ and Δ).
RELEASE_QUANTILE_Z = 1.2815515655446004  # Φ⁻¹(0.9)
_GRID_STEP = 1.01  # σ grid above the smallest feasible σ: geometric, 1 % apart
_LOWEST = 0.5  # the search for the smallest feasible σ starts at this fraction of the zCDP calibration's σ
_PATIENCE = 4  # stop after this many grid points in a row without a better objective
_MAX_POINTS = 80


@dataclass(frozen=True)
class ExactCalibration:
    """σ² and τ chosen by :func:`calibrate_exact`, with the (ε, δ) the release satisfies by its exact profile."""

    sigma2: Fraction
    threshold: int
    epsilon: float
    delta: float  # the target δ; sparse_histogram_delta(σ², τ, Δ, ε) ≤ delta
    max_keys_per_user: int


def _on_grid(sigma: float) -> Fraction:
    from stream_dp.mechanisms.gaussian_histogram import SIGMA2_GRID

    return Fraction(math.ceil(Fraction(sigma) ** 2 / SIGMA2_GRID)) * SIGMA2_GRID


@functools.lru_cache(maxsize=128)
def calibrate_exact(*, epsilon: float, delta: float, max_keys_per_user: int) -> ExactCalibration:
    """The (σ², τ) pair making one release (ε, δ)-DP by its exact joint profile that minimises the count a
    key needs to be released with probability 0.9, τ + Φ⁻¹(0.9)·σ.

    The rule: σ_min, the smallest σ (to 0.1 %, by bisection from half the zCDP calibration's σ at (ε, δ), which
    is always feasible) whose shared-key term δ_G(Δ, ε) is below δ -- below it no threshold helps; then
    σ = σ_min·1.01^i, i = 0, 1, …, each with its smallest valid τ (:func:`exact_threshold`), σ² rounded up to
    1/1000; stop after 4 points in a row without improvement. The rule reads only (ε, δ, Δ): it is public and
    data-independent.

    >>> cal = calibrate_exact(epsilon=1.0, delta=1e-6, max_keys_per_user=5)
    >>> sparse_histogram_delta(sigma2=cal.sigma2, threshold=cal.threshold, max_keys_per_user=5, epsilon=1.0) <= 1e-6
    True
    """
    from stream_dp.mechanisms.gaussian_histogram import rho_for_epsilon

    eps = check_epsilon(epsilon)
    delta = check_delta(delta)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    anchor = math.sqrt(dk / (2 * rho_for_epsilon(eps, delta)))

    def feasible(sigma: float) -> bool:
        return shared_keys_delta(sigma2=_on_grid(sigma), shifted_keys=dk, epsilon=eps) * (1 + _RELATIVE_MARGIN) < delta

    lo, hi = _LOWEST * anchor, anchor  # invariant: feasible(hi); lo infeasible or the search's floor
    if feasible(lo):
        hi = lo
    while hi - lo > 1e-3 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    best: tuple[float, Fraction, int] | None = None
    stale = 0
    for i in range(_MAX_POINTS):
        s2 = _on_grid(hi * _GRID_STEP**i)
        tau = exact_threshold(sigma2=s2, epsilon=eps, delta=delta, max_keys_per_user=dk)
        if tau is None:  # pragma: no cover - σ ≥ σ_min is feasible (δ_G grows as σ falls)
            continue
        objective = tau + RELEASE_QUANTILE_Z * math.sqrt(float(s2))
        if best is None or objective < best[0]:
            best, stale = (objective, s2, tau), 0
        else:
            stale += 1
            if stale >= _PATIENCE:
                break
    if best is None:  # pragma: no cover - the zCDP σ is always feasible (ρ-zCDP converts to (ε, δ))
        raise ValueError(f"no σ makes the histogram ({eps}, {delta})-DP for Δ = {dk}")
    return ExactCalibration(sigma2=best[1], threshold=best[2], epsilon=eps, delta=delta, max_keys_per_user=dk)
