"""Known-domain top-k with discovery: track a public domain exactly, discover new keys with a small share.

Discover-then-track (the key selection then counting of DP-SQLP, Zhang et al. 2023, specialised to top-k):

1. **Discover** (optional) on the counts of the keys *outside* the public domain D. Restricting a user's
   contribution to the keys outside D keeps them a user of ≤ Δ keys, so either discovery costs what it costs on
   a whole window:

   - ``discovery="threshold"`` (``discovery_calibration``): the discrete-Gaussian histogram with partition
     selection (:func:`~stream_dp.mechanisms.gaussian_histogram.gaussian_histogram`, docs/privacy.md §8) on the
     keys outside D; the keys whose noisy count clears its threshold τ are discovered (at most k̄, the largest
     noisy counts). Its cost does not depend on the data: one (ρ_d = Δ/(2σ²), δ_τ)-approximate-zCDP event;
   - ``discovery="limited_domain"`` (``discover_epsilon``): limited-domain top-k (DR19 Algorithm 1,
     :func:`~stream_dp.mechanisms.limited_domain_topk`): ε_d-range-bounded outcomes paid for as returned, plus
     its ⊥-rule δ. Its ⊥ sits ln(min(Δ, k̄)/δ)/ε_d above the (k̄+1)-th count: with a small share of a small ε it
     finds nothing in a small window, where the threshold (which needs no k̄ and gets the share's whole ρ) does.
2. **Track**: the candidates are D ∪ (keys discovered in step 1) -- public, the first from config or earlier
   releases, the second the output of step 1. One-shot Gumbel (scale 1/ε_t) on every candidate's count,
   zeros included, top min(k, |candidates|) (the peeling exponential mechanism, DR19 Corollary 4.1). For a
   fixed candidate set and monotone counts each peel is ε_t-range-bounded: no δ and no ⊥ offset. The
   candidate set depends only on step 1's output, so the two steps compose adaptively.

Cost (:attr:`KnownDomainResult.events`): step 1's events (threshold: ``ZCdpEvent(ρ_d, δ_τ)``; limited domain:
``RangeBoundedEvent(ε_d, outcomes of step 1, δ)``), when discovery ran, and ``RangeBoundedEvent(ε_t, keys
released by step 2)``. The measurement :class:`KnownDomainTopk`
carries the map: ``privacy_map()`` is the worst case to reserve (k outcomes of each), ``realized(result)``
what a call returned. Every released key says whether it is in the
domain or was discovered.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from stream_dp.accounting.events import DpEvent, RangeBoundedEvent
from stream_dp.mechanisms._validation import check_epsilon, check_positive_int, check_scores, ranked_top
from stream_dp.mechanisms.gaussian_histogram import HistogramCalibration, calibration_for_sigma2, gaussian_histogram
from stream_dp.mechanisms.limited_domain import limited_domain_topk, outcome_events
from stream_dp.rng import RngLike, make_rng

TRACK_MECHANISM = "known_domain_gumbel_topk"
DOMAIN = "domain"
DISCOVERED = "discovered"
DISCOVERIES = ("threshold", "limited_domain")


@dataclass(frozen=True)
class KnownDomainResult:
    keys: tuple[Hashable, ...]  # best first
    sources: tuple[str, ...]  # "domain" or "discovered", per key
    discovered: tuple[Hashable, ...]  # every key step 1 released (public), best first
    hit_bottom: bool  # step 1 stopped at ⊥ (limited-domain discovery only; else False)
    events: tuple[DpEvent, ...]
    discovery_ran: bool = False  # step 1 ran (its events are charged)


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

    ``privacy_map()``: step 1's worst case (threshold: its one event; limited domain: k outcomes with the ⊥-rule
    δ) when discovery runs, and k tracked peels -- reserved before the call; ``realized(result)``: step 1's
    events (threshold: the same event; limited domain: the outcomes returned, keys + ⊥) and the keys step 2
    released.

    >>> m = KnownDomainTopk(k=2, k_bar=4, track_epsilon=0.3, discover_epsilon=0.1, delta=1e-6, max_keys_per_user=1,
    ...                     discovery="limited_domain")
    >>> [e.count for e in m.privacy_map()]
    [2, 2]
    """

    k: int
    k_bar: int
    track_epsilon: float
    discover_epsilon: float | None
    delta: float
    max_keys_per_user: int
    discovery: str = "threshold"
    discovery_calibration: HistogramCalibration | None = None  # threshold discovery's σ² and τ
    mechanism: ClassVar[str] = "known_domain_topk"  # the Measurement protocol's name (not a parameter)

    def __post_init__(self) -> None:
        check_positive_int(self.k, "k")
        check_epsilon(self.track_epsilon, "track_epsilon")
        if self.discovery not in DISCOVERIES:
            raise ValueError(f"discovery must be one of {', '.join(DISCOVERIES)}, got {self.discovery!r}")
        if self.discovery == "threshold" and self.discover_epsilon is not None and self.discovery_calibration is None:
            raise ValueError("threshold discovery needs its discovery_calibration (threshold_discovery_calibration)")

    @property
    def discovers(self) -> bool:
        return self.discover_epsilon is not None

    def __call__(self, domain_counts: Mapping[Hashable, float], outside_counts: Mapping[Hashable, float],
                 rng: RngLike = None) -> KnownDomainResult:
        return known_domain_topk(domain_counts, outside_counts, k=self.k, k_bar=self.k_bar,
                                 track_epsilon=self.track_epsilon, discover_epsilon=self.discover_epsilon,
                                 delta=self.delta, max_keys_per_user=self.max_keys_per_user, rng=rng,
                                 discovery=self.discovery, discovery_calibration=self.discovery_calibration)

    def _discovery(self, outcomes: int) -> tuple[DpEvent, ...]:
        if not self.discovers:
            return ()
        if self.discovery == "threshold":
            return tuple(self.discovery_calibration.events())  # type: ignore[union-attr]
        return outcome_events(outcomes, epsilon=self.discover_epsilon, delta=self.delta)  # type: ignore[arg-type]

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return self._discovery(self.k) + track_events(self.k, track_epsilon=self.track_epsilon)

    def realized(self, result: KnownDomainResult) -> tuple[DpEvent, ...]:
        outcomes = len(result.discovered) + int(result.hit_bottom)
        limit = self.k if self.discovery == "limited_domain" else self.k_bar
        if (len(result.keys) > self.k or outcomes > limit or result.discovery_ran != self.discovers
                or (self.discovery == "threshold" and result.hit_bottom)):
            raise ValueError(f"a known-domain top-k result with {len(result.keys)} keys and {outcomes} discovery "
                             f"outcomes is not one of this measurement's (k = {self.k})")
        return self._discovery(outcomes) + track_events(len(result.keys), track_epsilon=self.track_epsilon)


def threshold_discovery_calibration(*, k: int, epsilon: float, discovery_share: float, delta: float,
                                    max_keys_per_user: int) -> HistogramCalibration:
    """Threshold discovery's σ² and τ: ρ_d = share·kε²/8 -- the share of what k limited-domain outcomes at ε cost
    (the same worst case as :func:`domain_split`'s limited-domain discovery) --, σ² = Δ/(2ρ_d) rounded up to the
    1/1000 grid (ρ_d only shrinks), τ for δ_τ ≤ ``delta``.

    >>> cal = threshold_discovery_calibration(k=10, epsilon=0.2, discovery_share=0.5, delta=1e-7, max_keys_per_user=5)
    >>> float(cal.sigma2), cal.threshold
    (100.0, 57)
    """
    if not 0 < discovery_share < 1:
        raise ValueError(f"discovery_share must be in (0, 1) for threshold discovery, got {discovery_share!r}")
    rho = discovery_share * check_positive_int(k, "k") * check_epsilon(epsilon) ** 2 / 8
    return calibration_for_sigma2(sigma2=max_keys_per_user / (2 * rho), threshold_delta=delta,
                                  max_keys_per_user=max_keys_per_user)


def known_domain_topk(domain_counts: Mapping[Hashable, float], outside_counts: Mapping[Hashable, float], *,
                      k: int, k_bar: int, track_epsilon: float, discover_epsilon: float | None, delta: float,
                      max_keys_per_user: int, rng: RngLike = None, discovery: str = "limited_domain",
                      discovery_calibration: HistogramCalibration | None = None) -> KnownDomainResult:
    """Top-k over a public domain plus discovered keys (module docstring).

    ``domain_counts``: every domain key with its count (0 for keys without events); ``outside_counts``: the
    counts of keys outside the domain -- all of them for threshold discovery; for limited-domain discovery all
    of them or at least the top ``k_bar`` + 1 (it reads no more). ``discover_epsilon=None`` skips discovery (a
    domain known to be complete); with ``discovery="threshold"`` step 1 uses ``discovery_calibration``.

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
    if discover_epsilon is not None and discovery == "threshold":
        if discovery_calibration is None:
            raise ValueError("threshold discovery needs discovery_calibration")
        found = gaussian_histogram(outside, calibration=discovery_calibration, max_keys=check_positive_int(k_bar, "k_bar"),
                                   rng=generator)
        discovered = tuple(row.key for row in found.rows)
        events.extend(found.events)
    elif discover_epsilon is not None:
        found_ldt = limited_domain_topk(outside, k=k, k_bar=k_bar, epsilon=discover_epsilon, delta=delta,
                                        max_keys_per_user=max_keys_per_user, rng=generator)
        discovered, hit_bottom = found_ldt.keys, found_ldt.hit_bottom
        events.extend(found_ldt.events)
    ran = discover_epsilon is not None

    candidates = list(domain_keys) + list(discovered)
    values = np.concatenate([domain_values, np.array([float(outside[key]) for key in discovered])])
    if not candidates:
        return KnownDomainResult((), (), discovered, hit_bottom, tuple(events), ran)
    noisy = values + generator.gumbel(scale=1.0 / track_epsilon, size=len(values))
    m = min(k, len(candidates))
    order = ranked_top(np.arange(len(candidates)), noisy, candidates, m)
    keys = tuple(candidates[i] for i in order)
    sources = tuple(DOMAIN if i < len(domain_keys) else DISCOVERED for i in order)
    events.extend(track_events(m, track_epsilon=track_epsilon))
    return KnownDomainResult(keys, sources, discovered, hit_bottom, tuple(events), ran)


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
