"""Known-domain top-k with discovery: track a public domain exactly, discover new keys with a small share.

Discover-then-track (the key selection then counting of DP-SQLP, Zhang et al. 2023, specialised to top-k):

1. **Discover** (optional, ``discover_epsilon``): limited-domain top-k (DR19 Algorithm 1,
   :func:`~stream_dp.mechanisms.limited_domain_topk`) on the counts of the keys *outside* the public domain
   D. Restricting a user's contribution to the keys outside D keeps them a user of ≤ Δ keys, so the call
   costs what LDT always costs: ε_d-range-bounded outcomes paid for as returned, plus its ⊥-rule δ.
2. **Track**: the candidates are D ∪ (keys discovered in step 1) -- public, the first from config or earlier
   releases, the second the output of step 1. One-shot Gumbel (scale 1/ε_t) on every candidate's count,
   zeros included, top min(k, |candidates|) (the peeling exponential mechanism, DR19 Corollary 4.1). For a
   fixed candidate set and monotone counts each peel is ε_t-range-bounded: no δ and no ⊥ offset. The
   candidate set depends only on step 1's output, so the two steps compose adaptively.

Cost (:attr:`KnownDomainResult.events`): ``RangeBoundedEvent(ε_d, outcomes of step 1, δ)`` (when discovery
ran) and ``RangeBoundedEvent(ε_t, keys released by step 2)``. The measurement :class:`KnownDomainTopk`
carries the map: ``privacy_map()`` is the worst case to reserve (k outcomes of each), ``realized(result)``
what a call returned. Every released key says whether it is in the
domain or was discovered.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from stream_dp.accounting.events import DpEvent, RangeBoundedEvent
from stream_dp.mechanisms._validation import check_epsilon, check_positive_int, check_scores, ranked_top
from stream_dp.mechanisms.limited_domain import limited_domain_topk, outcome_events
from stream_dp.rng import RngLike, make_rng

TRACK_MECHANISM = "known_domain_gumbel_topk"
DOMAIN = "domain"
DISCOVERED = "discovered"


@dataclass(frozen=True)
class KnownDomainResult:
    keys: tuple[Hashable, ...]  # best first
    sources: tuple[str, ...]  # "domain" or "discovered", per key
    discovered: tuple[Hashable, ...]  # every key step 1 released (public), best first
    hit_bottom: bool  # step 1 stopped at ⊥ (False when discovery did not run)
    events: tuple[DpEvent, ...]


def track_events(keys: int, *, track_epsilon: float) -> tuple[DpEvent, ...]:
    """The privacy map of step 2 when it released ``keys`` keys: that many ε_t-range-bounded peels, no δ
    (none when no candidate existed). The one place this formula is written."""
    if keys == 0:
        return ()
    return (RangeBoundedEvent(check_epsilon(track_epsilon, "track_epsilon"), count=check_positive_int(keys, "keys"),
                              mechanism=TRACK_MECHANISM),)


@dataclass(frozen=True)
class KnownDomainTopk:
    """The discover-then-track measurement (module docstring) with its privacy map.

    ``privacy_map()``: k discovery outcomes with the ⊥-rule δ (when discovery runs) and k tracked peels --
    reserved before the call; ``realized(result)``: the discovery outcomes returned (keys + ⊥) and the keys
    step 2 released.

    >>> m = KnownDomainTopk(k=2, k_bar=4, track_epsilon=0.3, discover_epsilon=0.1, delta=1e-6, max_keys_per_user=1)
    >>> [e.count for e in m.privacy_map()]
    [2, 2]
    """

    k: int
    k_bar: int
    track_epsilon: float
    discover_epsilon: float | None
    delta: float
    max_keys_per_user: int

    def __post_init__(self) -> None:
        check_positive_int(self.k, "k")
        check_epsilon(self.track_epsilon, "track_epsilon")

    def __call__(self, domain_counts: Mapping[Hashable, float], outside_counts: Mapping[Hashable, float],
                 rng: RngLike = None) -> KnownDomainResult:
        return known_domain_topk(domain_counts, outside_counts, k=self.k, k_bar=self.k_bar,
                                 track_epsilon=self.track_epsilon, discover_epsilon=self.discover_epsilon,
                                 delta=self.delta, max_keys_per_user=self.max_keys_per_user, rng=rng)

    def _discovery(self, outcomes: int) -> tuple[DpEvent, ...]:
        if self.discover_epsilon is None:
            return ()
        return outcome_events(outcomes, epsilon=self.discover_epsilon, delta=self.delta)

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return self._discovery(self.k) + track_events(self.k, track_epsilon=self.track_epsilon)

    def realized(self, result: KnownDomainResult) -> tuple[DpEvent, ...]:
        outcomes = len(result.discovered) + int(result.hit_bottom)
        if len(result.keys) > self.k or outcomes > self.k or (self.discover_epsilon is None and outcomes):
            raise ValueError(f"a known-domain top-k result with {len(result.keys)} keys and {outcomes} discovery "
                             f"outcomes is not one of this measurement's (k = {self.k})")
        return self._discovery(outcomes) + track_events(len(result.keys), track_epsilon=self.track_epsilon)


def known_domain_topk(domain_counts: Mapping[Hashable, float], outside_counts: Mapping[Hashable, float], *,
                      k: int, k_bar: int, track_epsilon: float, discover_epsilon: float | None, delta: float,
                      max_keys_per_user: int, rng: RngLike = None) -> KnownDomainResult:
    """Top-k over a public domain plus discovered keys (module docstring).

    ``domain_counts``: every domain key with its count (0 for keys without events); ``outside_counts``: the
    counts of keys outside the domain -- all of them, or at least the top ``k_bar`` + 1 (discovery reads no
    more). ``discover_epsilon=None`` skips discovery (a domain known to be complete).

    >>> r = known_domain_topk({"a": 50, "b": 0, "c": 900}, {"new": 5000, "x": 1}, k=2, k_bar=2,
    ...                       track_epsilon=1.0, discover_epsilon=1.0, delta=1e-6, max_keys_per_user=1, rng=3)
    >>> r.keys, r.sources
    (('new', 'c'), ('discovered', 'domain'))
    """
    k = check_positive_int(k, "k")
    track_epsilon = check_epsilon(track_epsilon, "track_epsilon")
    generator = make_rng(rng)
    domain_keys, domain_values = check_scores(domain_counts, name="domain_counts")
    in_domain = set(domain_keys)
    outside = {key: v for key, v in outside_counts.items() if key not in in_domain}

    events: list[DpEvent] = []
    discovered: tuple[Hashable, ...] = ()
    hit_bottom = False
    if discover_epsilon is not None:
        found = limited_domain_topk(outside, k=k, k_bar=k_bar, epsilon=discover_epsilon, delta=delta,
                                    max_keys_per_user=max_keys_per_user, rng=generator)
        discovered, hit_bottom = found.keys, found.hit_bottom
        events.extend(found.events)

    candidates = list(domain_keys) + list(discovered)
    values = np.concatenate([domain_values, np.array([float(outside[key]) for key in discovered])])
    if not candidates:
        return KnownDomainResult((), (), discovered, hit_bottom, tuple(events))
    noisy = values + generator.gumbel(scale=1.0 / track_epsilon, size=len(values))
    m = min(k, len(candidates))
    order = ranked_top(np.arange(len(candidates)), noisy, candidates, m)
    keys = tuple(candidates[i] for i in order)
    sources = tuple(DOMAIN if i < len(domain_keys) else DISCOVERED for i in order)
    events.extend(track_events(m, track_epsilon=track_epsilon))
    return KnownDomainResult(keys, sources, discovered, hit_bottom, tuple(events))


def domain_split(*, epsilon: float, discovery_share: float) -> tuple[float, float | None]:
    """(ε_t, ε_d) per outcome so that k outcomes of each cost what k outcomes of ``epsilon`` cost in zCDP:
    ε_d² = share·ε², ε_t² = (1 − share)·ε² (ρ = kε²/8 is split, not ε). share 0: no discovery.

    >>> domain_split(epsilon=0.2, discovery_share=0.0)
    (0.2, None)
    """
    if not 0 <= discovery_share < 1:
        raise ValueError(f"discovery_share must be in [0, 1), got {discovery_share!r}")
    epsilon = check_epsilon(epsilon)
    track = epsilon * (1 - discovery_share) ** 0.5
    return track, (epsilon * discovery_share ** 0.5 if discovery_share > 0 else None)
