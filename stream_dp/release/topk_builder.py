"""The ``topk`` release's builder: limited-domain top-k (DR19 Algorithm 1), or -- with a public domain --
discover-then-track (:mod:`stream_dp.mechanisms.known_domain`). What it reads, reserves and runs; the steps are
:class:`~stream_dp.release.builders.Builder`'s."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from stream_dp.config import Config
from stream_dp.node_batches import ReadStep
from stream_dp.release import drafts, window_budget
from stream_dp.release.records import RecordDraft
from stream_dp.release.public_domain import Domained, DomainRule, PublicDomain, read_domain_file
from stream_dp.release.windows import Window, WindowReader

if TYPE_CHECKING:
    from stream_dp.mechanisms import LimitedDomainTopk
    from stream_dp.mechanisms.known_domain import KnownDomainTopk


@dataclass
class TopkBuilder:
    """Limited-domain top-k (DR19 Algorithm 1): reads the top k̄+1 counts, returns ≤ k keys and ⊥ flag.

    With a known domain (``releases.topk.domain``, ``domain_file``, ``domain_from_released``): discover-then-
    track (:mod:`stream_dp.mechanisms.known_domain`) -- full-domain Gumbel top-k over the window's public domain
    (static keys, and keys earlier windows published: :mod:`stream_dp.release.released_domain`) plus the keys
    discovered outside it with ``discovery_share`` of ρ (``discovery``: the threshold histogram, or limited-domain
    top-k); each item says its ``source``, the record's ``domain`` block what the domain was."""

    cfg: Config
    type: str = "topk"
    mechanism: str = "limited_domain_topk"

    def __post_init__(self) -> None:
        t = self.cfg.releases.topk
        if t.has_domain:
            self.mechanism = "known_domain_topk"
        self.static_domain: list[str] = list(dict.fromkeys(list(t.domain) + read_domain_file(t.domain_file, "releases.topk")))
        self.public_domain = PublicDomain(self.static_domain, DomainRule.of(self.cfg, "topk"))

    def calibrated(self) -> window_budget.TopkParameters | window_budget.KnownDomainParameters:
        """The mechanism's parameters from the window budget (or the deprecated keys): cached by window_budget."""
        return window_budget.configured_topk(self.cfg.releases.topk,
                                             max_keys_per_user=self.cfg.contribution.max_keys_per_user)

    def split(self) -> tuple[float, float | None]:
        """(ε per tracked peel, ε per discovery outcome or None) with a domain."""
        p = self.calibrated()
        assert isinstance(p, window_budget.KnownDomainParameters)
        return p.track_epsilon, p.discover_epsilon

    def discovery_calibration(self) -> Any:
        """Threshold discovery's σ², τ and ρ_d from the window budget (None: no threshold discovery)."""
        p = self.calibrated()
        return p.discovery_calibration if isinstance(p, window_budget.KnownDomainParameters) else None

    def parameters(self) -> dict[str, Any]:
        t = self.cfg.releases.topk
        calibrated = self.calibrated()
        p: dict[str, Any] = {"k": t.k, "k_bar": t.k_bar, **window_budget.record_budget(t, window_budget.LEGACY_TOPK),
                             "max_keys_per_user": self.cfg.contribution.max_keys_per_user}
        if isinstance(calibrated, window_budget.KnownDomainParameters):
            p.update(drafts.known_domain_parameters(calibrated, discovery_share=t.discovery_share))
            p.update({"domain_size_static": len(self.static_domain), "domain_from_released": t.domain_from_released})
        else:
            p.update({"epsilon": calibrated.epsilon, "delta": calibrated.delta})
        return p

    @cached_property
    def measurement(self) -> LimitedDomainTopk | KnownDomainTopk:
        from stream_dp.mechanisms import LimitedDomainTopk

        t = self.cfg.releases.topk
        max_keys = self.cfg.contribution.max_keys_per_user
        p = self.calibrated()
        if isinstance(p, window_budget.KnownDomainParameters):
            return p.measurement(k=t.k, k_bar=t.k_bar, max_keys_per_user=max_keys)
        return LimitedDomainTopk(k=t.k, k_bar=t.k_bar, epsilon=p.epsilon, delta=p.delta, max_keys_per_user=max_keys)

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        t = self.cfg.releases.topk
        if not t.has_domain:
            return reader.top_counts(window, t.k_bar + 1)
        return ReadStep(lambda: self._read_with_domain(reader, window))

    def _read_with_domain(self, reader: WindowReader, window: Window) -> Domained:
        """The domain's counts and the keys outside it (the top k̄+1, or every key for threshold discovery)."""
        t = self.cfg.releases.topk
        domain, block = self.public_domain.for_window(window)
        if self.split()[1] is None:
            outside: dict[str, float] = {}
        elif t.discovery == "threshold":  # the histogram of the keys outside the domain: every key present
            outside = reader.all_counts(window).as_dict()
        else:  # the top k̄+1 keys outside the domain are among the top k̄+1+|domain| keys
            outside = reader.top_counts(window, t.k_bar + 1 + len(domain)).now()
        return Domained((reader.counts_of(window, domain).now(), outside), domain, block)

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        p = self.parameters()
        if self.cfg.releases.topk.has_domain:  # calibrated with a domain: the known-domain measurement
            m = cast("KnownDomainTopk", self.measurement)
            domain_counts, outside = data.data
            known = m(domain_counts, outside, rng=rng)
            return drafts.known_domain_draft(window, p, known, m, domain_size=len(domain_counts), domain=data.block)
        ldt = cast("LimitedDomainTopk", self.measurement)
        return drafts.topk_draft(window, p, ldt(data, rng=rng), ldt)
