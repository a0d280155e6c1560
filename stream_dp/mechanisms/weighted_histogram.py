"""Private histogram with per-user weights: each user spreads one unit of L2 norm over the keys they touched
(docs/privacy.md §8d; the "weighted Gaussian" of differentially private set union, Gopi et al. 2020).

The uniform histogram (:mod:`stream_dp.mechanisms.gaussian_histogram`) adds 1 to each of a user's m ≤ Δ keys and
calibrates its noise to the worst case, a user on Δ keys (L2 sensitivity √Δ). A user on fewer keys then uses
only √(m/Δ) of the norm the noise pays for. Here a user on m keys adds

    w_m = ⌊U·√(Δ/m)⌋   (an integer: U = :data:`WEIGHT_UNIT`, the score of one user on Δ keys)

to each of them, so every user's vector has L2 norm √m·w_m ≤ U·√Δ, whatever m is (:func:`user_weight`). A key's
*score* is the sum of its users' weights, an integer; a user on one key counts √Δ times a user on Δ keys. Where
users touch fewer than Δ keys per window (a typical trending stream), scores stand further above the noise than
counts at the same privacy cost; where every user touches Δ keys, every weight is U and the release is the
uniform one.

Mechanism (:func:`weighted_histogram`): the thresholded discrete-Gaussian release of
:func:`~stream_dp.mechanisms.gaussian_histogram.gaussian_histogram` on the scores, with σ_w = U·σ.

Guarantee (derivation in docs/privacy.md §8d): δ-approximate ρ-zCDP with ρ = U²Δ/(2σ_w²) -- the same ρ as the
uniform histogram with σ = σ_w/U. Neighbours differ by one user u; the others' weights do not depend on u (m is
the number of keys u's own bounded events count, docs/ingest.md), so the scores of the keys present in both
differ on at most m coordinates by w_m each, an integer vector of L2 norm ≤ U·√Δ (integer shifts of the discrete
Gaussian cost what the continuous one does, CKS20 Proposition 5, and independent coordinates add; §8). The ≤ m keys only u touched have score exactly w_m each; τ is the smallest integer
with δ_τ = max over m = 1 … Δ of 1 − (1 − P[Z ≥ τ − w_m])^m ≤ ``delta`` (:func:`weighted_selection_delta`). The
cost does not depend on the data: one :class:`~stream_dp.accounting.events.ZCdpEvent` per release.

Released values are in *count units* (score / U, :func:`rows_in_count_units`): a weighted count, which equals
the number of users of the key when every one of them touched Δ keys and exceeds it when they touched fewer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from stream_dp.accounting.events import DpEvent, ZCdpEvent
from stream_dp.mechanisms._validation import check_delta, check_positive_int
from stream_dp.mechanisms.discrete_gaussian import as_sigma2
from stream_dp.mechanisms.gaussian_histogram import (
    TAIL_MARGIN,
    HistogramResult,
    gaussian_histogram,
    on_sigma2_grid,
    rho_for_epsilon,
    selection_delta,
    smallest_threshold,
)
from stream_dp.rng import RngLike

MECHANISM = "weighted_histogram"
#: The score of one user on Δ keys. Weights are rounded down to integers, so a larger unit wastes less of the
#: norm (at U = 16 a user on m < Δ keys keeps ≥ 1 − 1/16 of hers; a user on Δ keys all of it).
WEIGHT_UNIT = 16


def user_weight(keys: int, max_keys_per_user: int, unit: int = WEIGHT_UNIT) -> int:
    """w_m = ⌊U·√(Δ/m)⌋ for a user on m = ``keys`` keys, in integer arithmetic (⌊√x⌋ = isqrt(⌊x⌋) for real x ≥ 0).

    m·w_m² ≤ U²·Δ for every m ≥ 1 (also m > Δ, which bounding never lets through): a user's L2 norm is at most
    U·√Δ.

    >>> [user_weight(m, 5) for m in range(1, 6)]
    [35, 25, 20, 17, 16]
    """
    m = check_positive_int(keys, "keys")
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    u = check_positive_int(unit, "unit")
    return math.isqrt(u * u * dk // m)


def weighted_scores(pairs: Iterable[tuple[Hashable, Hashable]], *, max_keys_per_user: int,
                    unit: int = WEIGHT_UNIT, keys_per_user: Mapping[Hashable, int] | None = None
                    ) -> dict[Hashable, int]:
    """Key → Σ over its users of w_m(user), from a window's counted (user, key) pairs (each pair once: ingest's
    bounding log, docs/ingest.md; a user's m is her number of pairs).

    ``keys_per_user``: each user's m, counted in an earlier pass over the same pairs (then ``pairs`` is only
    iterated, never held: the release worker reads a window's log twice rather than keep its pairs in memory).

    >>> weighted_scores([("u1", "a"), ("u2", "a"), ("u2", "b")], max_keys_per_user=2, unit=4)
    {'a': 9, 'b': 4}
    """
    if keys_per_user is None:
        pairs = list(pairs)
        keys_per_user = Counter(user for user, _ in pairs)
    keys_of = keys_per_user
    weight = {m: user_weight(m, max_keys_per_user, unit) for m in set(keys_of.values())}
    scores: dict[Hashable, int] = {}
    for user, key in pairs:
        scores[key] = scores.get(key, 0) + weight[keys_of[user]]
    return scores


def weighted_selection_delta(*, sigma2: object, threshold: int, max_keys_per_user: int,
                             unit: int = WEIGHT_UNIT) -> float:
    """δ_τ = max over m = 1 … Δ of P[one of m score-w_m keys has w_m + Z ≥ τ] = 1 − (1 − P[Z ≥ τ − w_m])^m."""
    s2 = as_sigma2(sigma2)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    # a score-w key clears τ exactly when a count-1 key clears τ − w + 1: §8's δ_τ at that threshold, for m keys
    return max(selection_delta(sigma2=s2, threshold=int(threshold) - user_weight(m, dk, unit) + 1,
                               max_keys_per_user=m) for m in range(1, dk + 1))


@dataclass(frozen=True)
class WeightedHistogramCalibration:
    """Noise (σ_w², score units), threshold (score units) and cost of one weighted histogram release."""

    sigma2: Fraction
    threshold: int
    threshold_delta: float
    max_keys_per_user: int
    unit: int = WEIGHT_UNIT

    @property
    def rho(self) -> float:
        """U²Δ/(2σ_w²): the zCDP of the scores (L2 sensitivity U·√Δ)."""
        return self.unit * self.unit * self.max_keys_per_user / (2 * float(self.sigma2))

    @property
    def calibration(self) -> str:
        return "zcdp"

    def events(self) -> tuple[DpEvent, ...]:
        return (ZCdpEvent(self.rho, delta=check_delta(self.threshold_delta), mechanism=MECHANISM),)


def weighted_threshold(*, sigma2: object, delta: float, max_keys_per_user: int, unit: int = WEIGHT_UNIT) -> int:
    """The smallest integer τ ≥ 1 with :func:`weighted_selection_delta` ≤ ``delta`` (less a 1e-9 margin)."""
    s2 = as_sigma2(sigma2)
    target = check_delta(delta) * (1 - TAIL_MARGIN)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    return smallest_threshold(lambda tau: weighted_selection_delta(sigma2=s2, threshold=tau, max_keys_per_user=dk,
                                                                   unit=unit) <= target)


def calibrate_weighted_histogram(*, epsilon: float, threshold_delta: float, conversion_delta: float,
                                 max_keys_per_user: int, unit: int = WEIGHT_UNIT) -> WeightedHistogramCalibration:
    """As :func:`~stream_dp.mechanisms.gaussian_histogram.calibrate_histogram`: the largest ρ whose ledger
    conversion at δ′ = ``conversion_delta`` is at most ε, σ_w² = U²Δ/(2ρ) rounded up to the 1/1000 grid (ρ only
    shrinks), and τ for ``threshold_delta`` over every m ≤ Δ.

    >>> cal = calibrate_weighted_histogram(epsilon=1.0, threshold_delta=1e-7, conversion_delta=1e-7,
    ...                                    max_keys_per_user=5)
    >>> cal.rho <= rho_for_epsilon(1.0, 1e-7), round(cal.threshold / cal.unit, 2)
    (True, 62.19)
    """
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    u = check_positive_int(unit, "unit")
    rho = rho_for_epsilon(epsilon, conversion_delta)
    s2 = on_sigma2_grid(Fraction(u * u * dk) / (2 * Fraction(rho)))
    tau = weighted_threshold(sigma2=s2, delta=threshold_delta, max_keys_per_user=dk, unit=u)
    return WeightedHistogramCalibration(sigma2=s2, threshold=tau, threshold_delta=float(threshold_delta),
                                        max_keys_per_user=dk, unit=u)


def weighted_histogram(scores: Mapping[Hashable, object], *, calibration: WeightedHistogramCalibration,
                       max_keys: int, confidence: float = 0.95, domain: Collection[Hashable] = (),
                       rng: RngLike = None) -> HistogramResult:
    """Release the keys whose noisy score clears τ (and the public ``domain`` keys), with noisy scores and
    intervals, all in score units (:func:`rows_in_count_units` converts).

    >>> cal = calibrate_weighted_histogram(epsilon=1.0, threshold_delta=1e-7, conversion_delta=1e-7,
    ...                                    max_keys_per_user=5)
    >>> [row.key for row in weighted_histogram({"a": 5000, "b": 35}, calibration=cal, max_keys=10, rng=1).rows]
    ['a']
    """
    return gaussian_histogram(scores, calibration=calibration, max_keys=max_keys, confidence=confidence,
                              domain=domain, rng=rng)


def rows_in_count_units(result: HistogramResult, unit: int) -> list[tuple[Hashable, int, int, int, bool]]:
    """(key, weighted count, interval low, interval high, in domain) per released row: the noisy score over U
    rounded to the nearest integer (halves up), the interval rounded outwards (so it covers at least what the
    score's interval covers). Post-processing of the release."""
    u = check_positive_int(unit, "unit")
    return [(row.key, (2 * row.count + u) // (2 * u), row.ci_low // u, -(-row.ci_high // u), row.in_domain)
            for row in result.rows]
