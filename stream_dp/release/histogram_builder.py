"""The ``histogram`` release's builder: partition selection with noisy counts and intervals -- discrete
Gaussian, discrete Laplace or per-user weighted (:mod:`stream_dp.mechanisms.gaussian_histogram`,
:mod:`~stream_dp.mechanisms.laplace_histogram`, :mod:`~stream_dp.mechanisms.weighted_histogram`), over the
window's public domain when one is configured. The steps are :class:`~stream_dp.release.builders.Builder`'s."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from stream_dp.config import Config
from stream_dp.node_batches import ReadStep
from stream_dp.release import drafts, window_budget
from stream_dp.release.records import RecordDraft
from stream_dp.release.public_domain import Domained, DomainRule, PublicDomain, read_domain_file
from stream_dp.release.windows import Window, WindowReader

if TYPE_CHECKING:
    from collections.abc import Hashable

    from stream_dp.mechanisms import GaussianHistogram, LaplaceHistogram, WeightedHistogram


@dataclass
class HistogramBuilder:
    """Discrete-Gaussian (or, ``releases.histogram.noise = "laplace"``, discrete-Laplace) histogram with
    partition selection: every key whose noisy count clears τ, with its noisy count and interval
    (:mod:`stream_dp.mechanisms.gaussian_histogram`, :mod:`~stream_dp.mechanisms.laplace_histogram`). Reads the
    whole window; the cost does not depend on the data, so the reserved worst case is what is settled. An empty window
    releases an empty (still charged) histogram: whether a window is empty is not public."""

    cfg: Config
    type: str = "histogram"
    mechanism: str = "gaussian_histogram"

    def calibration(self) -> Any:
        """The noise and threshold: from ``window_epsilon`` / ``window_delta`` (:mod:`~stream_dp.release.window_budget`,
        cached), or the deprecated keys' old meaning."""
        return window_budget.configured_histogram(self.cfg.releases.histogram,
                                                  max_keys_per_user=self.cfg.contribution.max_keys_per_user,
                                                  delta_prime=self.cfg.budget.delta_prime)

    def parameters(self) -> dict[str, Any]:
        h = self.cfg.releases.histogram
        budget = window_budget.record_budget(h, window_budget.LEGACY_HISTOGRAM)
        if "epsilon" in budget:  # the deprecated keys: ε was measured at the period's δ′
            budget["delta_prime"] = self.cfg.budget.delta_prime
        return {**budget, **drafts.histogram_parameters(
            self.calibration(), noise=h.noise, weighting=h.weighting, max_keys=h.max_keys, confidence=h.confidence,
            max_keys_per_user=self.cfg.contribution.max_keys_per_user), "domain_size": len(self.domain)}

    @cached_property
    def measurement(self) -> GaussianHistogram | LaplaceHistogram | WeightedHistogram:
        """The histogram at the configured calibration (computed once per builder), without a domain."""
        h = self.cfg.releases.histogram
        return drafts.histogram_measurement(self.calibration(), noise=h.noise, weighting=h.weighting,
                                            max_keys=h.max_keys, confidence=h.confidence)

    def measurement_for(self, domain: list[str]) -> Any:
        """The release over ``domain``: the cached measurement with that domain (the cost does not depend on the
        domain: docs/privacy.md §8)."""
        return dataclasses.replace(self.measurement, domain=tuple(domain))

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        return ReadStep(lambda: self._read_domained(reader, window))  # the whole window, in chunks

    def _read_domained(self, reader: WindowReader, window: Window) -> Domained:
        """The window's counts (or per-user scores) with its public domain (static keys, then the keys earlier
        windows published, :mod:`stream_dp.release.released_domain`)."""
        domain, block = self.public_domain.for_window(window)
        if self.cfg.releases.histogram.weighting == "per_user":  # the scores, from the counted (user, key) pairs
            from collections import Counter

            from stream_dp.mechanisms.weighted_histogram import weighted_scores

            # two passes over the logs: each user's number of keys, then the scores (no pair is held)
            keys_per_user: Counter[Hashable] = Counter(user for user, _ in reader.bounding_pairs(window))
            return Domained(weighted_scores(reader.bounding_pairs(window), keys_per_user=keys_per_user,
                                            max_keys_per_user=self.cfg.contribution.max_keys_per_user), domain, block)
        # the counts as parts read one at a time (the key layout's key shards; else the whole window as one part)
        return Domained(reader.count_parts(window), domain, block)

    def __post_init__(self) -> None:
        h = self.cfg.releases.histogram
        self.domain: list[str] = list(dict.fromkeys(list(h.domain) + read_domain_file(h.domain_file, "releases.histogram")))
        if h.noise == "laplace":
            self.mechanism = "laplace_histogram"
        if h.weighting == "per_user":
            if self.cfg.contribution.unit != "user":  # no per-user state is kept: nothing to weigh by
                from stream_dp.config import ConfigError

                raise ConfigError('releases.histogram.weighting must be "uniform" with contribution.unit = "event" '
                                  f"(no user is recorded to weigh by), got {h.weighting!r}")
            self.mechanism = "weighted_histogram"
        self.public_domain = PublicDomain(self.domain, DomainRule.of(self.cfg, "histogram"))

    def run(self, window: Window, data: Domained, rng: Any) -> RecordDraft:
        m = self.measurement_for(data.domain)
        res = m(data.data, rng=rng)
        return drafts.histogram_draft(window, self.mechanism, {**self.parameters(), "domain_size": len(data.domain)},
                                      res, m, has_domain=self.public_domain.configured,
                                      confidence=self.cfg.releases.histogram.confidence, domain=data.block)
