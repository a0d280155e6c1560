"""Limited-domain top-k with pay-what-you-get accounting (Durfee & Rogers, NeurIPS 2019).

``LimitDom^{k, k̄}`` (Algorithm 1) reads only the top k̄+1 counts of a histogram over a possibly
unknown universe and releases at most k keys, best first:

1. d = the k̄ keys with the highest counts (fixed tie order, :func:`~stream_dp.mechanisms._validation.tie_key`);
   h_(k̄+1) = the next count (0 when there are at most k̄ keys: missing counts are 0).
2. h_⊥ = h_(k̄+1) + 1 + ln(min{Δ, k̄}/δ)/ε, where Δ = ``max_keys_per_user`` (ℓ0 sensitivity).
3. Add i.i.d. Gumbel(scale 1/ε) noise once to each count in d and to h_⊥ (one-shot Gumbel, Corollary 4.1:
   the same distribution as peeling the exponential mechanism k times over d ∪ {⊥}).
4. Release the keys in decreasing noisy order; stop after k keys, or at ⊥ (which is then released too).

Privacy (docs/privacy.md §2): with user-level add/remove neighbours, ℓ∞ sensitivity 1 and
monotone counts, every released outcome -- each key and the ⊥ -- is one ε-range-bounded peel of the
exponential mechanism (ρ = ε²/8 each), and the call as a whole adds δ: the probability that a key outside
the common limited domain of two neighbours is ever released is at most δ (DR19 Lemma 5.5; the union bound
over at most min{Δ, k̄} boundary keys is what the ln(min{Δ, k̄}/δ)/ε offset pays for). The cost is charged
for what was returned ("pay what you get", Theorem 3): ``result.events`` is one
:class:`~stream_dp.accounting.events.RangeBoundedEvent` with ``count = len(keys) + hit_bottom``.
:class:`LimitedDomainTopk` is the measurement: its ``privacy_map()`` is the k-outcome worst case to reserve
before running, its ``realized(result)`` the events above (both from :func:`outcome_events`).

Keys the caller does not list are treated as count 0 and are never released: when the universe is unknown
the released domain is the listed keys among the top k̄. A key that goes from 0 to 1 between neighbours
is a boundary key (its count ≤ h_(k̄+1) + 1), so the same δ bound covers it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from stream_dp.accounting.events import DpEvent, RangeBoundedEvent
from stream_dp.mechanisms._validation import (
    check_delta,
    check_epsilon,
    check_positive_int,
    check_scores,
    kth_largest,
    top_indices,
)
from stream_dp.rng import RngLike, make_rng

MECHANISM = "limited_domain_topk"


@dataclass(frozen=True)
class TopKResult:
    """Outcome of one limited-domain top-k call.

    ``keys`` are the released keys, best first; ``hit_bottom`` is True when the call stopped at ⊥ (fewer
    than k keys are then released, and the ⊥ itself is one charged outcome).
    """

    keys: tuple[Hashable, ...]
    hit_bottom: bool
    epsilon: float
    delta: float
    mechanism: str = MECHANISM

    @property
    def outcomes(self) -> int:
        """Number of charged outcomes: the released keys plus the ⊥ when it was returned."""
        return len(self.keys) + int(self.hit_bottom)

    @property
    def events(self) -> tuple[DpEvent, ...]:
        """The realized privacy cost: ``outcomes`` ε-range-bounded peels and the δ of the ⊥ rule."""
        return outcome_events(self.outcomes, epsilon=self.epsilon, delta=self.delta, mechanism=self.mechanism)


def outcome_events(outcomes: int, *, epsilon: float, delta: float,
                   mechanism: str = MECHANISM) -> tuple[DpEvent, ...]:
    """The privacy map of one call that returned ``outcomes`` outcomes (keys and ⊥): one event of that many
    ε-range-bounded peels whose δ is the ⊥ rule's (DR19 Lemma 5.5). The one place this formula is written.

    >>> outcome_events(3, epsilon=0.5, delta=1e-6)[0].count
    3
    """
    return (RangeBoundedEvent(epsilon=check_epsilon(epsilon), count=check_positive_int(outcomes, "outcomes"),
                              delta=check_delta(delta), mechanism=mechanism),)


@dataclass(frozen=True)
class LimitedDomainTopk:
    """The limited-domain top-k measurement (DR19 Algorithm 1) with its privacy map.

    Input: a histogram of distinct-user counts (user-level add/remove neighbours, each user on at most
    ``max_keys_per_user`` keys). ``privacy_map()`` is the worst case, k outcomes -- what the ledger reserves
    before the call; ``realized(result)`` what the call returned (pay-what-you-get, DR19 Theorem 3).

    >>> m = LimitedDomainTopk(k=3, k_bar=5, epsilon=0.5, delta=1e-6, max_keys_per_user=1)
    >>> m.privacy_map()[0].count, m.realized(m({"a": 90, "b": 80}, rng=1))[0].count <= 3
    (3, True)
    """

    k: int
    k_bar: int
    epsilon: float
    delta: float
    max_keys_per_user: int
    mechanism: str = MECHANISM

    def __post_init__(self) -> None:
        _check_parameters(self.k, self.k_bar, self.epsilon, self.delta, self.max_keys_per_user)

    def __call__(self, counts: Mapping[Hashable, float], rng: RngLike = None) -> TopKResult:
        return limited_domain_topk(counts, k=self.k, k_bar=self.k_bar, epsilon=self.epsilon, delta=self.delta,
                                   max_keys_per_user=self.max_keys_per_user, rng=rng)

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return outcome_events(self.k, epsilon=self.epsilon, delta=self.delta, mechanism=self.mechanism)

    def realized(self, result: TopKResult) -> tuple[DpEvent, ...]:
        if not 1 <= result.outcomes <= self.k or (result.epsilon, result.delta) != (self.epsilon, self.delta):
            raise ValueError(f"a {self.mechanism} result with {result.outcomes} outcomes at "
                             f"(ε={result.epsilon}, δ={result.delta}) is not one of this measurement's")
        return outcome_events(result.outcomes, epsilon=self.epsilon, delta=self.delta, mechanism=self.mechanism)


def bottom_offset(*, k_bar: int, epsilon: float, delta: float, max_keys_per_user: int) -> float:
    """h_⊥ − h_(k̄+1) = 1 + ln(min{Δ, k̄}/δ)/ε (DR19 Algorithm 1, the count of ⊥).

    >>> round(bottom_offset(k_bar=10, epsilon=1.0, delta=0.01, max_keys_per_user=1), 4)
    5.6052
    """
    return 1.0 + math.log(min(max_keys_per_user, k_bar) / delta) / epsilon


def _check_parameters(k: int, k_bar: int, epsilon: float, delta: float,
                      max_keys_per_user: int) -> tuple[int, int, float, float, int]:
    k = check_positive_int(k, "k")
    k_bar = check_positive_int(k_bar, "k_bar")
    if k > k_bar:
        raise ValueError(f"k must be <= k_bar, got k={k}, k_bar={k_bar}")
    return (k, k_bar, check_epsilon(epsilon), check_delta(delta),
            check_positive_int(max_keys_per_user, "max_keys_per_user"))


def limited_domain_topk(counts: Mapping[Hashable, float], *, k: int, k_bar: int, epsilon: float,
                        delta: float, max_keys_per_user: int, rng: RngLike = None) -> TopKResult:
    """Release up to ``k`` of the top keys of ``counts`` with limited-domain top-k (DR19 Algorithm 1).

    ``counts`` maps key → count (distinct bounded users); all counts or at least the top ``k_bar``+1.
    ``epsilon`` is the per-outcome ε (Gumbel scale 1/ε), ``delta`` the δ of the ⊥ rule,
    ``max_keys_per_user`` the ℓ0 bound Δ. Raises ``ValueError`` on ε ≤ 0, δ ∉ (0, 1), k < 1, k > k̄,
    Δ < 1, or a NaN / infinite / negative count. Guarantee: see the module docstring.

    >>> r = limited_domain_topk({"a": 900, "b": 800, "c": 3, "d": 1}, k=2, k_bar=3,
    ...                         epsilon=1.0, delta=1e-6, max_keys_per_user=1, rng=7)
    >>> r.keys, r.hit_bottom, r.outcomes
    (('a', 'b'), False, 2)
    >>> r.events[0].count, r.events[0].delta
    (2, 1e-06)
    """
    k, k_bar, epsilon, delta, max_keys = _check_parameters(k, k_bar, epsilon, delta, max_keys_per_user)
    keys, values = check_scores(counts)
    generator = make_rng(rng)

    domain = top_indices(keys, values, k_bar)
    h_bottom = kth_largest(values, k_bar + 1) + bottom_offset(
        k_bar=k_bar, epsilon=epsilon, delta=delta, max_keys_per_user=max_keys)

    # One-shot Gumbel: position len(domain) of `noisy` is ⊥.
    noisy = np.empty(len(domain) + 1)
    noisy[:-1] = values[domain]
    noisy[-1] = h_bottom
    noisy += generator.gumbel(loc=0.0, scale=1.0 / epsilon, size=len(noisy))
    if len(noisy) > k + 1:
        best = np.argpartition(-noisy, k)[:k]
    else:
        best = np.arange(len(noisy))
    best = best[np.argsort(-noisy[best], kind="stable")][:k]

    released: list[Hashable] = []
    hit_bottom = False
    for position in best:
        if position == len(domain):
            hit_bottom = True
            break
        released.append(keys[domain[position]])
    return TopKResult(keys=tuple(released), hit_bottom=hit_bottom, epsilon=epsilon, delta=delta)
