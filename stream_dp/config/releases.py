"""``[releases.<type>]``: what each release type computes and its window budget -- read by the builders of
:mod:`stream_dp.release` (one per type) and by :mod:`stream_dp.release.window_budget`.

Types and enumerations are checked always; ranges only when the type is enabled (a disabled type costs
nothing, so its numbers do not matter): those are the ``enabled``-guarded rules of each section's model
validator. Each batch type's budget is its window budget (``window_epsilon``, ``window_delta``): one release of
the type in one window is (ε, δ)-DP on its own; the mechanism's parameters are calibrated from it
(stream_dp/release/window_budget.py). Renamed keys: stream_dp/renamed_settings.py. Not to be confused with
``budget.delta_prime``: the ledger's conversion δ′ for a whole period.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, get_args

from pydantic import model_validator

from stream_dp.config.fields import Count, Flag, Number, Str, Texts, check, rule_error, section
from stream_dp.renamed_settings import BothSet, renamed

Noise = Literal["laplace", "exponential", "geometric"]
NOISES: tuple[str, ...] = get_args(Noise)
DomainOrder = Literal["recent", "frequent"]
DOMAIN_ORDERS: tuple[str, ...] = get_args(DomainOrder)
#: Release types whose published keys a released domain may learn from (``domain_sources``).
DOMAIN_SOURCE_TYPES = ("topk", "histogram", "argmax")


def _positive(value: float | None) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _probability(value: float | None) -> bool:
    return isinstance(value, (int, float)) and 0 < value < 1


class RenamedKeys:
    """A release section with deprecated keys (stream_dp/renamed_settings.py): before validation they are warned
    about and renamed; an old key and its replacement together are an error naming both."""

    section_name: ClassVar[str]  # e.g. "releases.topk"

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        try:
            return renamed(cls.section_name, data)
        except BothSet as exc:
            raise rule_error(str(exc), setting=exc.old, value=data[exc.old]) from None


@section
class LearnedDomainSettings:
    """A release type's *released domain* (docs/privacy.md §10, :mod:`stream_dp.release.released_domain`): the keys
    that releases of ``domain_sources`` published in the last ``domain_memory_windows`` windows join the type's
    public domain -- a function of published records only. Fields shared by every type that takes a domain."""

    domain_from_released: Flag = False  # keys published by domain_sources in earlier windows join the domain
    domain_sources: Texts = ()  # release types learned from; [] = this type (alerts: topk)
    domain_memory_windows: Count = 4  # keys published in this many windows before the current one (then they age out)
    domain_max_keys: Count = 1000  # at most this many learned keys (the first by domain_order)
    domain_order: DomainOrder = "recent"  # recent: latest window first; frequent: most windows first

    @model_validator(mode="after")
    def _learned_domain_rules(self) -> LearnedDomainSettings:
        if self.domain_from_released:
            check(self, [(self.domain_memory_windows >= 1, "domain_memory_windows", ">= 1"),
                         (self.domain_max_keys >= 1, "domain_max_keys", ">= 1"),
                         (all(t in DOMAIN_SOURCE_TYPES for t in self.domain_sources), "domain_sources",
                          f"release types among {', '.join(DOMAIN_SOURCE_TYPES)}")])
        return self


@section
class TopkConfig(LearnedDomainSettings, RenamedKeys):
    section_name: ClassVar[str] = "releases.topk"

    enabled: Flag = False
    k: Count = 10
    k_bar: Count = 100
    window_epsilon: Number = 0.8  # window budget: ε of one release (its worst case, k outcomes)
    # window budget: δ of one release (half of it the ⊥ rule's or, with a domain and threshold discovery, the threshold's)
    window_delta: Number = 2e-7
    domain: Texts = ()  # public keys tracked by full-domain Gumbel top-k (no δ, no ⊥)
    domain_file: Str = ""  # a file of public keys, one per line, added to domain
    # with a domain: how keys outside it are found -- threshold (a discrete-Gaussian histogram of the keys outside
    # the domain, keys above its threshold) or limited_domain (limited-domain top-k, the k̄-based ⊥ rule)
    discovery: Literal["threshold", "limited_domain"] = "threshold"
    discovery_share: Number = 0.8  # with a domain: share of the zCDP ρ spent discovering keys outside it (docs/evaluation 2b)
    epsilon: Number | None = None  # deprecated (renamed_settings.py): ε per outcome
    delta: Number | None = None  # deprecated: δ of the ⊥ rule (with a domain and threshold discovery: of the threshold)

    @property
    def has_domain(self) -> bool:
        return bool(self.domain or self.domain_file or self.domain_from_released)

    @model_validator(mode="after")
    def _rules(self) -> TopkConfig:
        if self.enabled:
            only_released = self.domain_from_released and not self.domain and not self.domain_file
            check(self, [(self.k >= 1, "k", ">= 1"), (self.k_bar >= self.k, "k_bar", f">= releases.topk.k ({self.k})"),
                         (_positive(self.window_epsilon), "window_epsilon", "> 0"),
                         (_probability(self.window_delta), "window_delta", "in (0, 1)"),
                         (self.epsilon is None or _positive(self.epsilon), "epsilon", "> 0"),
                         (self.delta is None or _probability(self.delta), "delta", "in (0, 1)"),
                         (0 <= self.discovery_share < 1, "discovery_share", "in [0, 1)"),
                         (self.discovery_share > 0 or not only_released, "discovery_share",
                          "> 0 when the domain is only keys released earlier")])
        return self


@section
class AlertsConfig(LearnedDomainSettings):
    enabled: Flag = False
    watchlist: Texts = ()
    include_released_topk: Flag = True
    threshold: Number = 100.0
    k: Count = 10  # answers per SVT instance (c)
    epsilon: Number = 0.5  # per SVT instance
    noise: Noise = "geometric"  # geometric (integer outputs, the default), laplace, exponential
    theta: Number = 0.0  # 0: the seed's optimum
    confidence: Number = 0.95  # of the lower confidence bound
    max_instances_per_period: Count = 2  # SVT instances opened per budget period at most; 0 = no limit

    @model_validator(mode="after")
    def _rules(self) -> AlertsConfig:
        if self.enabled:
            check(self, [
                (self.k >= 1, "k", ">= 1"),
                (_positive(self.epsilon), "epsilon", "> 0"),
                (math.isfinite(self.threshold), "threshold", "a finite number"),
                (self.noise != "geometric" or float(self.threshold).is_integer(), "threshold",
                 "an integer with noise = 'geometric' (integer outputs)"),
                (0 <= self.theta < 1, "theta", "in [0, 1) (0: the seed's optimum)"),
                (_probability(self.confidence), "confidence", "in (0, 1)"),
                (self.max_instances_per_period >= 0, "max_instances_per_period", ">= 0 (0: no limit)"),
                (bool(self.watchlist) or self.include_released_topk, "watchlist",
                 "non-empty when include_released_topk is false"),
            ])
        return self


@section
class SampleConfig(RenamedKeys):
    section_name: ClassVar[str] = "releases.sample"

    enabled: Flag = False
    scheme: Literal["pps", "ppswor", "none"] = "pps"  # pps (priority), ppswor, none
    tau: Number = 0.01
    window_epsilon: Number = 0.5  # window budget (calibrated per key to ε / max_keys_per_user)
    window_delta: Number = 1e-7  # window budget (per key δ / max_keys_per_user)

    @model_validator(mode="after")
    def _rules(self) -> SampleConfig:
        if self.enabled:
            check(self, [(_positive(self.tau), "tau", "> 0"), (_positive(self.window_epsilon), "window_epsilon", "> 0"),
                         (_probability(self.window_delta), "window_delta", "in (0, 1)")])
        return self


@section
class ArgmaxConfig(RenamedKeys):
    section_name: ClassVar[str] = "releases.argmax"

    enabled: Flag = False
    window_epsilon: Number = 0.5  # window budget of the (ε, δ)-DP release
    window_delta: Number = 1e-6

    @model_validator(mode="after")
    def _rules(self) -> ArgmaxConfig:
        if self.enabled:
            check(self, [(_positive(self.window_epsilon), "window_epsilon", "> 0"),
                         (_probability(self.window_delta), "window_delta", "in (0, 1)")])
        return self


@section
class WatchTopkConfig(RenamedKeys):
    section_name: ClassVar[str] = "releases.watch_topk"

    enabled: Flag = False
    k: Count = 5
    window_epsilon: Number = 0.5  # window budget, pure ε-DP
    # geometric (discrete Laplace, integer gaps; the default), laplace, exponential
    noise: Literal["geometric", "laplace", "exponential"] = "geometric"

    @model_validator(mode="after")
    def _rules(self) -> WatchTopkConfig:
        if self.enabled:
            check(self, [(self.k >= 1, "k", ">= 1"), (_positive(self.window_epsilon), "window_epsilon", "> 0")])
        return self
