"""Private histogram: discrete Gaussian counts with partition selection (docs/privacy.md, "Histogram").

For one window's bounded counts (distinct users per key; a user touches at most Δ = ``max_keys_per_user``
keys, adding 1 to each), :func:`gaussian_histogram`

1. adds i.i.d. discrete Gaussian noise N_Z(0, σ²) (CKS20, exact sampler) to the count of every key present;
2. keeps the keys whose noisy count is at least the integer threshold τ (:func:`histogram_threshold`);
3. if more than ``max_keys`` are kept, keeps the ``max_keys`` largest noisy counts (ties by the fixed,
   data-independent :func:`~stream_dp.mechanisms._validation.tie_key` order);
4. releases each kept key with its noisy count and a two-sided interval count ± h, where h is the
   ``confidence`` quantile of |Z| (:func:`~stream_dp.mechanisms.discrete_gaussian.discrete_gaussian_quantile`).

Guarantee (derivation in docs/privacy.md): δ-approximate ρ-zCDP with ρ = Δ/(2σ²) -- the counts of the keys
present in both neighbours form an integer vector of L2 sensitivity √Δ -- and δ = 1 − (1 − P[1 + Z ≥ τ])^Δ,
the probability that one of the (at most Δ) keys only the extra user touched, each with count exactly 1, is
kept. τ is the smallest integer with that δ ≤ ``delta``. Steps 3 and 4 are post-processing. The cost does not
depend on the data, so what is reserved is what is settled: one
:class:`~stream_dp.accounting.events.ZCdpEvent` (:func:`gaussian_histogram_events`).

The confidence interval covers the true count with probability ≥ ``confidence`` for a key fixed in advance;
for released keys near τ the interval is conditioned on selection and reads high (selection bias).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Protocol

import numpy as np

from stream_dp.accounting.composition import loose_zcdp_to_epsilon, zcdp_to_epsilon  # noqa: F401 (doctests)
from stream_dp.accounting.events import DpEvent, ZCdpAndApproxDpEvent, ZCdpEvent
from stream_dp.mechanisms._validation import check_delta, check_epsilon, check_positive_int, ranked_top
from stream_dp.mechanisms.count_parts import CountParts
from stream_dp.mechanisms.discrete_gaussian import (
    as_sigma2,
    discrete_gaussian_quantile,
    discrete_gaussian_tail,
    sample_discrete_gaussian,
)
from stream_dp.rng import RngLike, make_rng

MECHANISM = "gaussian_histogram"
# σ² is rounded *up* to a multiple of this (so ρ only shrinks) to keep the exact sampler's fractions small.
SIGMA2_GRID = Fraction(1, 1000)
# Float tail sums are accurate to ~1e-15 relative; a threshold keeps this much relative margin below its δ (the
# Laplace and the weighted histograms' thresholds use the same one).
TAIL_MARGIN = 1e-9


@dataclass(frozen=True)
class HistogramCalibration:
    """The noise and threshold parameters of one histogram release and its cost."""

    sigma2: Fraction
    threshold: int
    threshold_delta: float  # the bound δ the threshold was solved for
    max_keys_per_user: int
    # calibrated by the exact joint privacy profile (calibrate_histogram_exact): the (ε, δ) it guarantees
    exact_epsilon: float | None = None
    exact_delta: float | None = None
    unit: ClassVar[int] = 1  # noise units per count: 1 (the per-user weighted calibration's is its U)

    @property
    def rho(self) -> float:
        return self.max_keys_per_user / (2 * float(self.sigma2))

    @property
    def calibration(self) -> str:
        """``"exact"`` (by the joint privacy profile) or ``"zcdp"`` (σ by the ρ conversion, τ on its own δ)."""
        return "zcdp" if self.exact_epsilon is None else "exact"

    def events(self) -> tuple[DpEvent, ...]:
        if self.exact_epsilon is not None and self.exact_delta is not None:
            return (ZCdpAndApproxDpEvent(rho=self.rho, zcdp_delta=self.threshold_delta, epsilon=self.exact_epsilon,
                                         delta=self.exact_delta, mechanism=MECHANISM),)
        return gaussian_histogram_events(sigma2=self.sigma2, delta=self.threshold_delta,
                                         max_keys_per_user=self.max_keys_per_user)


@dataclass(frozen=True)
class HistogramRow:
    key: Hashable
    count: int  # noisy count
    ci_low: int
    ci_high: int
    in_domain: bool = False  # a public domain key (released whatever its noisy count)


@dataclass(frozen=True)
class HistogramResult:
    rows: tuple[HistogramRow, ...]
    above_threshold: int  # keys outside the domain whose noisy count cleared τ
    threshold: int
    ci_half_width: int
    events: tuple[DpEvent, ...]

    kept: int = 0  # keys kept before the cap (domain keys + above_threshold)

    @property
    def capped(self) -> bool:
        return self.kept > len(self.rows)


def selection_delta(*, sigma2: object, threshold: int, max_keys_per_user: int) -> float:
    """δ of the threshold: P[at least one of Δ count-1 keys has 1 + Z ≥ τ] = 1 − (1 − P[Z ≥ τ − 1])^Δ."""
    p = discrete_gaussian_tail(sigma2, int(threshold) - 1)
    return -math.expm1(max_keys_per_user * math.log1p(-p)) if p < 1 else 1.0


def histogram_threshold(*, sigma2: object, delta: float, max_keys_per_user: int) -> int:
    """The smallest integer τ ≥ 1 whose :func:`selection_delta` is at most ``delta`` (bisection).

    >>> histogram_threshold(sigma2=1, delta=1e-6, max_keys_per_user=1)
    7
    """
    s2 = as_sigma2(sigma2)
    delta = check_delta(delta)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    p_max = -math.expm1(math.log1p(-delta) / dk) * (1 - TAIL_MARGIN)  # per-key bound, with margin

    return smallest_threshold(lambda tau: discrete_gaussian_tail(s2, tau - 1) <= p_max)


def smallest_threshold(ok: Callable[[int], bool]) -> int:
    """The smallest integer τ ≥ 1 with ``ok(τ)``, for a predicate monotone in τ (false, then true for
    good): doubling, then bisection."""
    lo, hi = 1, 2
    while not ok(hi):
        lo, hi = hi, hi * 2
    if ok(lo):
        return lo
    while hi - lo > 1:  # invariant: not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


@functools.lru_cache(maxsize=256)
def rho_for_epsilon(epsilon: float, delta_prime: float) -> float:
    """The largest ρ (to ~1e-13 relative) whose ledger conversion :func:`zcdp_to_epsilon` (CKS20 Cor. 13) at δ′
    is at most ε: bisection on ρ, from the classic conversion's closed form (sqrt(L + ε) − sqrt(L))²,
    L = ln(1/δ′), which the CKS20 conversion never exceeds. The ρ returned always satisfies the bound.

    >>> eps = 1.0; rho = rho_for_epsilon(eps, 1e-6)
    >>> zcdp_to_epsilon(rho, 1e-6) <= eps, abs(zcdp_to_epsilon(rho, 1e-6) - eps) < 1e-12
    (True, True)
    >>> round(rho / loose_rho_for_epsilon(eps, 1e-6), 3)  # the same ε buys this much more ρ
    1.394
    """
    epsilon = check_epsilon(epsilon)
    delta_prime = check_delta(delta_prime, "delta_prime")
    lo = loose_rho_for_epsilon(epsilon, delta_prime)
    while not zcdp_to_epsilon(lo, delta_prime) <= epsilon:  # the closed form may overshoot by an ulp
        lo *= 1 - 1e-12
    hi = 2 * lo
    while zcdp_to_epsilon(hi, delta_prime) <= epsilon:
        lo, hi = hi, 2 * hi
    for _ in range(200):  # invariant: conversion(lo) <= ε < conversion(hi)
        mid = (lo + hi) / 2
        if not lo < mid < hi or hi - lo <= 1e-13 * lo:
            break
        lo, hi = (mid, hi) if zcdp_to_epsilon(mid, delta_prime) <= epsilon else (lo, mid)
    return lo


def loose_rho_for_epsilon(epsilon: float, delta_prime: float) -> float:
    """The largest ρ whose classic conversion ρ + 2·sqrt(ρ·ln(1/δ′)) is at most ε: (sqrt(L + ε) − sqrt(L))²."""
    epsilon = check_epsilon(epsilon)
    log_term = math.log(1 / check_delta(delta_prime, "delta_prime"))
    return (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2


def calibrate_histogram(*, epsilon: float, threshold_delta: float, conversion_delta: float,
                        max_keys_per_user: int) -> HistogramCalibration:
    """Parameters making one release (ε, threshold_delta + conversion_delta)-DP on its own: the largest ρ
    whose ledger conversion (CKS20 Cor. 13) at δ′ = ``conversion_delta`` is at most ε (:func:`rho_for_epsilon`), σ² = Δ/(2ρ) rounded up to
    the 1/1000 grid (so ρ can only shrink), and τ for ``threshold_delta``.

    >>> cal = calibrate_histogram(epsilon=1.0, threshold_delta=5e-7, conversion_delta=5e-7, max_keys_per_user=5)
    >>> zcdp_to_epsilon(cal.rho, 5e-7) <= 1.0, cal.threshold_delta, cal.threshold
    (True, 5e-07, 56)
    """
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    rho = rho_for_epsilon(epsilon, conversion_delta)
    return calibration_for_sigma2(sigma2=dk / (2 * rho), threshold_delta=threshold_delta, max_keys_per_user=dk)


def on_sigma2_grid(sigma2: Fraction) -> Fraction:
    """σ² rounded *up* to a multiple of :data:`SIGMA2_GRID` (so ρ can only shrink)."""
    return Fraction(math.ceil(sigma2 / SIGMA2_GRID)) * SIGMA2_GRID


def calibration_for_sigma2(*, sigma2: float | Fraction, threshold_delta: float, max_keys_per_user: int
                           ) -> HistogramCalibration:
    """The calibration for a given σ² (rounded up to the grid) and threshold δ."""
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    s2 = on_sigma2_grid(as_sigma2(sigma2))
    tau = histogram_threshold(sigma2=s2, delta=threshold_delta, max_keys_per_user=dk)
    return HistogramCalibration(sigma2=s2, threshold=tau, threshold_delta=float(threshold_delta),
                                max_keys_per_user=dk)


def calibrate_histogram_exact(*, epsilon: float, delta: float, max_keys_per_user: int) -> HistogramCalibration:
    """Parameters making one release (ε, δ)-DP by the exact joint privacy profile of the thresholded discrete
    Gaussian (docs/privacy.md §8c; :func:`~stream_dp.mechanisms.sparse_gaussian_profile.calibrate_exact`: the
    σ, τ pair minimising τ + Φ⁻¹(0.9)·σ). Its events carry both guarantees
    (:class:`~stream_dp.accounting.events.ZCdpAndApproxDpEvent`): the exact (ε, δ), and (ρ = Δ/(2σ²),
    δ_τ)-approximate zCDP with δ_τ = :func:`selection_delta` (≤ δ: the profile's j = Δ term is at least δ_τ).

    >>> cal = calibrate_histogram_exact(epsilon=1.0, delta=1e-6, max_keys_per_user=5)
    >>> cal.calibration, cal.threshold < calibrate_histogram(epsilon=1.0, threshold_delta=5e-7,
    ...     conversion_delta=5e-7, max_keys_per_user=5).threshold
    ('exact', True)
    """
    from stream_dp.mechanisms.sparse_gaussian_profile import calibrate_exact

    exact = calibrate_exact(epsilon=epsilon, delta=delta, max_keys_per_user=max_keys_per_user)
    # float tail sums are accurate to ~1e-15 relative: a 1e-8 margin keeps δ_τ an upper bound; it never
    # exceeds δ (exactly true of the real δ_τ, so the min is sound)
    tau_delta = min(exact.delta, selection_delta(sigma2=exact.sigma2, threshold=exact.threshold,
                                                 max_keys_per_user=exact.max_keys_per_user) * (1 + 1e-8))
    return HistogramCalibration(sigma2=exact.sigma2, threshold=exact.threshold, threshold_delta=tau_delta,
                                max_keys_per_user=exact.max_keys_per_user, exact_epsilon=exact.epsilon,
                                exact_delta=exact.delta)


def gaussian_histogram_events(*, sigma2: object, delta: float, max_keys_per_user: int) -> tuple[DpEvent, ...]:
    """One (ρ = Δ/(2σ²), δ)-approximate-zCDP event: the whole cost of one release, data-independent."""
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    rho = dk / (2 * float(as_sigma2(sigma2)))
    return (ZCdpEvent(rho, delta=check_delta(delta), mechanism=MECHANISM),)


_NUMBER_TYPES = (int, float, np.integer, np.floating)


def _check_counts(counts: Mapping[Hashable, object]) -> tuple[list[Hashable], np.ndarray]:
    """(keys, int64 counts) of a mapping key → integer count >= 0; ``ValueError`` naming what is wrong (never a key
    or a count). Numbers of one array dtype are checked in bulk; anything else value by value."""
    if not isinstance(counts, Mapping):
        raise ValueError(f"counts must be a mapping key -> integer count, got {type(counts).__name__}")
    keys = list(counts)
    values = list(counts.values())
    kinds = set(map(type, values))
    if kinds and all(issubclass(kind, _NUMBER_TYPES) and not issubclass(kind, (bool, np.bool_)) for kind in kinds):
        array = np.asarray(values)
        if array.dtype.kind in "iu":
            if array.size and array.min() < 0:
                raise ValueError("counts must map every key to an integer count >= 0")
            return keys, array.astype(np.int64)
        if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array >= 0) \
                and np.all(array == np.floor(array)):
            return keys, array.astype(np.int64)
    checked = []
    for value in values:
        number = float(value) if isinstance(value, _NUMBER_TYPES) and not isinstance(value, bool) else math.nan
        if not (math.isfinite(number) and number >= 0 and number == int(number)):
            raise ValueError("counts must map every key to an integer count >= 0")
        checked.append(int(number))
    return keys, np.asarray(checked, dtype=np.int64)


class ThresholdedGaussian(Protocol):
    """What the release needs of a calibration: σ² (rational), the integer threshold τ and the cost."""

    @property
    def sigma2(self) -> Fraction: ...

    @property
    def threshold(self) -> int: ...

    def events(self) -> tuple[DpEvent, ...]: ...


def gaussian_histogram(counts: Mapping[Hashable, object] | CountParts, *, calibration: ThresholdedGaussian, max_keys: int,
                       confidence: float = 0.95, domain: Collection[Hashable] = (),
                       rng: RngLike = None) -> HistogramResult:
    """Release the keys whose discretely noised count clears τ, with noisy counts and intervals.

    ``counts`` are the window's bounded counts (the keys present); keys not listed have count 0 and are never
    released -- except the keys of the public ``domain`` (config or earlier releases, never the data), which
    get a noisy count whatever their count (0 if absent) and need no threshold: they are coordinates of the
    same ρ-zCDP Gaussian vector, and only keys outside the domain can be "new" (module docstring).

    >>> cal = calibration_for_sigma2(sigma2=4, threshold_delta=1e-6, max_keys_per_user=1)
    >>> r = gaussian_histogram({"a": 500, "b": 1}, calibration=cal, max_keys=10, rng=1)
    >>> [row.key for row in r.rows], r.threshold
    (['a'], 11)
    >>> [row.key for row in gaussian_histogram({"a": 500}, calibration=cal, max_keys=10, domain=["z"], rng=1).rows]
    ['a', 'z']
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    generator = make_rng(rng)  # one generator for every part of the counts, never re-seeded
    return noisy_threshold_release(
        counts, noise=lambda n: sample_discrete_gaussian(calibration.sigma2, n, rng=generator),
        threshold=calibration.threshold, max_keys=max_keys,
        ci_half_width=discrete_gaussian_quantile(calibration.sigma2, confidence), domain=domain,
        events=calibration.events())


def noisy_threshold_release(counts: Mapping[Hashable, object] | CountParts, *, noise: Callable[[int], np.ndarray],
                            threshold: int, max_keys: int, ci_half_width: int, domain: Collection[Hashable],
                            events: tuple[DpEvent, ...],
                            boundary: Callable[[int], np.ndarray] | None = None) -> HistogramResult:
    """Steps 1-4 of the module docstring for any i.i.d. integer noise (``noise(n)``: n draws): noise every key
    present and every ``domain`` key, keep the domain keys and the keys at or above ``threshold``, cap at
    ``max_keys`` by noisy count (ties in the fixed :func:`tie_key` order), attach count ± ``ci_half_width``.
    ``boundary(n)``: n independent coins; a key whose noisy count is exactly ``threshold − 1`` is also kept
    when its coin is true (a randomised threshold, used by the Laplace histogram). ``counts`` may come as
    disjoint :class:`~stream_dp.mechanisms.count_parts.CountParts` (key shards): steps 1-3 then run part by
    part, each part's ``max_keys`` best kept, and the union capped (the same law, one part in memory)."""
    parts = counts if isinstance(counts, CountParts) else CountParts.whole(counts)
    max_keys = check_positive_int(max_keys, "max_keys")
    public = set(domain)
    domain_of: dict[int, list[Hashable]] = {}
    for key in dict.fromkeys(domain):
        domain_of.setdefault(parts.part_of(key), []).append(key)
    best_keys: list[Hashable] = []
    best_noisy: list[np.ndarray] = []
    best_domain: list[np.ndarray] = []
    kept_total = above = 0
    for part in range(parts.size):
        present, values = _check_counts(parts.read(part))
        if public:
            seen = set(present)
            absent = [key for key in domain_of.get(part, []) if key not in seen]
            keys = present + absent
            values = np.concatenate([values, np.zeros(len(absent), dtype=np.int64)])
            in_domain = np.array([key in public for key in keys], dtype=bool)
        else:
            keys, in_domain = present, np.zeros(len(present), dtype=bool)
        noisy = values + noise(len(keys))
        keep = in_domain | (noisy >= threshold)
        if boundary is not None:
            edge = np.flatnonzero(~keep & (noisy == threshold - 1))
            keep[edge] = boundary(len(edge))
        kept = np.flatnonzero(keep)
        kept_total += len(kept)
        above += int(np.count_nonzero(~in_domain[kept]))
        top = ranked_top(kept, noisy, keys, max_keys)  # the part's best: the window's best are among them
        best_keys += [keys[i] for i in top]
        best_noisy.append(noisy[top])
        best_domain.append(in_domain[top])
    noisy_best = np.concatenate(best_noisy) if best_noisy else np.zeros(0, dtype=np.int64)
    domain_best = np.concatenate(best_domain) if best_domain else np.zeros(0, dtype=bool)
    order = ranked_top(np.arange(len(best_keys)), noisy_best, best_keys, max_keys)
    h = ci_half_width
    rows = tuple(HistogramRow(best_keys[i], value, value - h, value + h, public_key)
                 for i, value, public_key in zip(order, noisy_best[order].tolist(), domain_best[order].tolist()))
    return HistogramResult(rows=rows, above_threshold=above, threshold=threshold, ci_half_width=h, events=events,
                           kept=kept_total)
