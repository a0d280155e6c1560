"""``[releases.histogram]`` and ``[releases]`` as a whole (the one list of release types, :data:`RELEASE_TYPES`,
and the rule that a learned domain learns only from enabled types) -- read by the histogram builder
(:mod:`stream_dp.release.builders`) and the release worker."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import model_validator

from stream_dp.config.fields import Count, Flag, Number, Str, Texts, check, rule_error, section
from stream_dp.config.releases import (AlertsConfig, ArgmaxConfig, LearnedDomainSettings, SampleConfig, TopkConfig,
                                       RenamedKeys, WatchTopkConfig, _positive, _probability)


@section
class HistogramConfig(LearnedDomainSettings, RenamedKeys):
    section_name: ClassVar[str] = "releases.histogram"

    # on by default: a domain learned from what earlier windows published costs nothing and wins on small windows
    # (docs/privacy.md §10; docs/evaluation, experiment 2b)
    domain_from_released: Flag = True
    enabled: Flag = True
    # gaussian: discrete Gaussian, zCDP (L2 sensitivity √Δ); laplace: discrete Laplace, pure ε (L1 sensitivity Δ)
    # -- better for small Δ (docs/evaluation; stream-dp budget plan --expected-users recommends one)
    noise: Literal["gaussian", "laplace"] = "gaussian"
    # gaussian only -- zcdp: σ by the ρ-zCDP conversion at half the window δ, τ on the other half (charged as ρ-zCDP);
    # exact: σ and τ together by the thresholded histogram's exact privacy profile at the window budget
    # (docs/privacy.md §8c; both guarantees charged: lower τ and σ for one window, more ε and δ over a period)
    calibration: Literal["zcdp", "exact"] = "zcdp"
    # uniform: a user adds 1 to each of her ≤ Δ keys; per_user: a user on m keys adds ⌊16·√(Δ/m)⌋/16 to each (her
    # L2 norm stays ≤ √Δ), so users on fewer than Δ keys weigh more at the same cost (docs/privacy.md §8d;
    # gaussian noise, zcdp calibration and contribution.unit = "user" only); released counts are weighted counts
    weighting: Literal["uniform", "per_user"] = "uniform"
    window_epsilon: Number = 1.0  # window budget: ε of one release (sets the noise)
    window_delta: Number = 2e-7  # window budget: δ of one release (gaussian zcdp: half the threshold's, half σ's)
    max_keys: Count = 1000  # at most this many keys per release (the largest noisy counts above threshold)
    confidence: Number = 0.95  # of the two-sided interval released with each noisy count
    domain: Texts = ()  # public keys: always released with a noisy count, no threshold needed
    domain_file: Str = ""  # a file of public keys, one per line, added to domain
    epsilon: Number | None = None  # deprecated (renamed_settings.py): ε at δ′ = budget.delta_prime
    delta: Number | None = None  # deprecated: δ of the threshold

    @model_validator(mode="after")
    def _rules(self) -> HistogramConfig:
        if self.enabled:
            check(self, [(_positive(self.window_epsilon), "window_epsilon", "> 0"),
                         (_probability(self.window_delta), "window_delta", "in (0, 1)"),
                         (self.epsilon is None or _positive(self.epsilon), "epsilon", "> 0"),
                         (self.delta is None or _probability(self.delta), "delta", "in (0, 1)"),
                         (self.max_keys >= 1, "max_keys", ">= 1"),
                         (_probability(self.confidence), "confidence", "in (0, 1)"),
                         (self.calibration == "zcdp" or self.noise == "gaussian", "calibration",
                          '"zcdp" with noise = "laplace" (the exact profile is the Gaussian\'s)'),
                         (self.weighting == "uniform" or (self.noise, self.calibration) == ("gaussian", "zcdp"),
                          "weighting", '"uniform" unless noise = "gaussian" and calibration = "zcdp" (§8d)')])
        return self


@section
class ReleasesConfig:
    topk: TopkConfig = dataclasses.field(default_factory=TopkConfig)
    alerts: AlertsConfig = dataclasses.field(default_factory=AlertsConfig)
    sample: SampleConfig = dataclasses.field(default_factory=SampleConfig)
    argmax: ArgmaxConfig = dataclasses.field(default_factory=ArgmaxConfig)
    watch_topk: WatchTopkConfig = dataclasses.field(default_factory=WatchTopkConfig)
    histogram: HistogramConfig = dataclasses.field(default_factory=HistogramConfig)

    def enabled(self) -> list[str]:
        """The release types this config computes, in :data:`RELEASE_TYPES` order (top-k first: alerts
        watch what it released)."""
        return [name for name in RELEASE_TYPES if getattr(self, name).enabled]

    def domain_sources(self, name: str) -> tuple[str, ...]:
        """The release types whose published keys ``releases.<name>``'s released domain learns from
        (``domain_sources``; empty: the type itself, for alerts: topk)."""
        own = getattr(self, name).domain_sources
        return tuple(dict.fromkeys(own)) if own else (("topk",) if name == "alerts" else (name,))

    @model_validator(mode="after")
    def _sources_enabled(self) -> ReleasesConfig:
        for name in ("topk", "alerts", "histogram"):
            section = getattr(self, name)
            if section.enabled and section.domain_from_released:
                off = [t for t in self.domain_sources(name) if not getattr(self, t).enabled]
                if off:
                    raise rule_error(f"enabled release types (releases.{', releases.'.join(off)} not enabled: "
                                     "it would never publish a key to learn from)",
                                     setting=f"{name}.domain_sources", value=list(self.domain_sources(name)))
        return self


#: Every release type, in release order: one ``[releases.<type>]`` section each (the one list of them).
RELEASE_TYPES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ReleasesConfig))
