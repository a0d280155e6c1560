"""Release builders: for each batch release type, what to read, what to reserve, and how to run it.

A builder is a small object with one job per step, so the worker treats every type alike:

- ``measurement`` -- the mechanism at the configured parameters with its privacy map
  (:mod:`stream_dp.mechanisms.measurement`): ``measurement.privacy_map()`` is reserved in the ledger *before*
  the mechanism runs (a release the budget cannot cover never runs, docs/privacy.md §4);
- ``read(reader, window, watchlist)`` -- only the data the mechanism needs (top k̄+1 for top-k, the watched
  keys' counts for watch_topk, the count histogram and then the reported keys for sampling, the whole window
  for the large-margin mechanism), as a :class:`~stream_dp.node_batches.ReadStep`: read ``now``, or -- when it
  is one command -- ``later``, in the round trip of the reservation (the mechanism still runs only once the
  hold is accepted: reading a closed window reveals nothing);
- ``run(window, data, rng)`` -- call the pure mechanism and build the record draft whose events are
  ``measurement.realized(result)``, what the release actually cost (pay-what-you-get for top-k: the outcomes
  returned, DR19 Theorem 3).

The online ``alerts`` type keeps state across windows and lives in :mod:`stream_dp.release.alerts`; its
measurement is :func:`alerts_measurement`. ``BUILDERS`` is a dispatch table (one entry per type, each
tested), not an ``isinstance`` chain; :func:`release_measurements` gives every enabled type's measurement
(the budget plan and the worker's start check use only those).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from stream_dp.config import AlertsConfig, Config
from stream_dp.mechanisms.measurement import Measurement
from stream_dp.node_batches import ReadStep
from stream_dp.release import drafts, window_budget
from stream_dp.release.records import RecordDraft
from stream_dp.release.released_domain import Domained, DomainRule, PublicDomain
from stream_dp.release.windows import Window, WindowReader


class Builder(Protocol):
    type: str
    mechanism: str

    @property
    def measurement(self) -> Measurement[Any]: ...

    def parameters(self) -> dict[str, Any]: ...

    def skip_reason(self, watchlist: list[str]) -> str | None: ...

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        """What the mechanism needs: ``.now()``, or -- when it is one command -- ``.later(ride)``, in the round
        trip of the reservation. Making the step reads nothing."""
        ...

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft: ...


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
        self.static_domain: list[str] = list(dict.fromkeys(list(t.domain) + _read_domain_file(t.domain_file)))
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
        p: dict[str, Any] = {"k": t.k, "k_bar": t.k_bar, **_window_budget(t, window_budget.LEGACY_TOPK),
                             "max_keys_per_user": self.cfg.contribution.max_keys_per_user}
        if isinstance(calibrated, window_budget.KnownDomainParameters):
            p.update(drafts.known_domain_parameters(calibrated, discovery_share=t.discovery_share))
            p.update({"domain_size_static": len(self.static_domain), "domain_from_released": t.domain_from_released})
        else:
            p.update({"epsilon": calibrated.epsilon, "delta": calibrated.delta})
        return p

    @cached_property
    def measurement(self) -> Measurement[Any]:
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
        m = self.measurement
        if self.cfg.releases.topk.has_domain:
            domain_counts, outside = data.data
            known = m(domain_counts, outside, rng=rng)
            return drafts.known_domain_draft(window, p, known, m, domain_size=len(domain_counts), domain=data.block)
        return drafts.topk_draft(window, p, m(data, rng=rng), m)


def _read_domain_file(path: str, section: str = "releases.topk") -> list[str]:
    """Keys of a domain file, one per line (blank lines skipped); a missing file names the setting."""
    if not path:
        return []
    from stream_dp.config import ConfigError

    try:
        with open(path, encoding="utf-8") as fh:
            return [line.strip() for line in fh if line.strip()]
    except OSError as exc:
        raise ConfigError(f"{section}.domain_file {path!r} cannot be read: {exc.strerror}") from None


@dataclass
class SampleBuilder:
    """Private weighted sampling (CGSS21, "late" Algorithm 4): reads the window's count histogram, then only
    the keys it reports (:func:`stream_dp.release.sampling.sample_count_classes`)."""

    cfg: Config
    type: str = "sample"
    mechanism: str = "private_weighted_sample"

    WARM_UP_ROWS = 1024
    """Sanitizer-table rows (and their estimates) built when the builder is made, i.e. when the worker starts."""

    def __post_init__(self) -> None:
        """Build the Algorithm-4 table and its estimates ahead of the first window (0.1-0.3 s for typical
        parameters, else paid by the first release). A function of public parameters only; process-wide cache."""
        if self.cfg.releases.sample.enabled:
            self.warm_up(self.WARM_UP_ROWS)

    def warm_up(self, rows: int) -> None:
        from stream_dp.mechanisms.pws import sanitizer_table
        from stream_dp.mechanisms.pws_estimators import estimator_for

        p = self.parameters()
        table = sanitizer_table(scheme=p["scheme"], tau=p["tau"], epsilon=p["epsilon"], delta=p["delta"],
                                max_keys_per_user=p["max_keys_per_user"])
        table.extend_to(rows)
        estimates = estimator_for(table, kind="mle")
        for token in range(1, min(table.built, rows) + 2):
            estimates.estimate(token)

    def parameters(self) -> dict[str, Any]:
        s = self.cfg.releases.sample
        return {"scheme": s.scheme, "tau": s.tau, "epsilon": s.window_epsilon, "delta": s.window_delta,
                "max_keys_per_user": self.cfg.contribution.max_keys_per_user}

    @cached_property
    def measurement(self) -> Measurement[Any]:
        from stream_dp.mechanisms import PrivateWeightedSample

        s = self.cfg.releases.sample
        return PrivateWeightedSample(scheme=s.scheme, tau=s.tau, epsilon=s.window_epsilon, delta=s.window_delta,
                                     max_keys_per_user=self.cfg.contribution.max_keys_per_user)

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        """The count classes, and how to read the keys at given ranks (run reads only the reported ones): a
        walk of the count histogram in chunks, not one command."""
        from functools import partial

        from stream_dp.release.sampling import count_classes

        return ReadStep(lambda: (count_classes(reader.count_histogram(window)), partial(reader.members_at, window)))

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        from stream_dp.release.sampling import sample_count_classes

        p = self.parameters()
        classes, members_at = data
        res = sample_count_classes(classes, members_at, scheme=p["scheme"], tau=p["tau"], epsilon=p["epsilon"],
                                   delta=p["delta"], max_keys_per_user=p["max_keys_per_user"], rng=rng)
        return drafts.sample_draft(window, p, res, self.measurement)


@dataclass
class ArgmaxBuilder:
    """Large margin mechanism (CHS14 Algorithm 1): the single top key, range-independent."""

    cfg: Config
    type: str = "argmax"
    mechanism: str = "large_margin"

    def parameters(self) -> dict[str, Any]:
        a = self.cfg.releases.argmax
        return {"epsilon": a.window_epsilon, "delta": a.window_delta}

    @cached_property
    def measurement(self) -> Measurement[Any]:
        from stream_dp.mechanisms import LargeMargin

        a = self.cfg.releases.argmax
        return LargeMargin(epsilon=a.window_epsilon, delta=a.window_delta)

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        return ReadStep(lambda: reader.all_counts(window))  # the whole window, in chunks

    def universe_size(self) -> int:
        """The public universe: every key the config admits (byte strings of 1..events.max_key_bytes bytes).

        It must not depend on the data (CHS14 Algorithm 1's universe), so it is not the set of keys seen in the window; the
        unseen ones have count 0 and are never enumerated (large_margin_argmax's implicit universe).
        """
        m = self.cfg.events.max_key_bytes
        return (256 ** (m + 1) - 256) // 255

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        from stream_dp.mechanisms import UNLISTED

        m = self.measurement
        # Scores are counts of distinct users: 1-Lipschitz per user, i.e. f = count / n with n = 1.
        key = m(data.as_dict(), n=1, universe_size=max(len(data), self.universe_size()), rng=rng)
        unlisted = key is UNLISTED
        items = [] if unlisted else [{"key": str(key), "rank": 1}]
        return RecordDraft(window, self.type, self.mechanism, self.parameters(), items=items, events=m.realized(key),
                           info={"no_clear_winner": unlisted})


@dataclass
class WatchTopkBuilder:
    """Noisy top-k with gap (Ding et al.) over the public watchlist: ranks and free gaps."""

    cfg: Config
    type: str = "watch_topk"
    mechanism: str = "noisy_topk_with_gap"

    def parameters(self) -> dict[str, Any]:
        w = self.cfg.releases.watch_topk
        return {"k": w.k, "epsilon": w.window_epsilon, "noise": w.noise, "monotone": True}

    @cached_property
    def measurement(self) -> Measurement[Any]:
        return self.measurement_for(self.cfg.releases.watch_topk.k)

    def measurement_for(self, k: int) -> Any:
        """Noisy top-``k`` with gap at the configured ε (the cost does not depend on k)."""
        from stream_dp.mechanisms import NoisyTopkWithGap

        w = self.cfg.releases.watch_topk
        return NoisyTopkWithGap(k=k, epsilon=w.window_epsilon, noise=w.noise, monotone=True)

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        return reader.counts_of(window, watchlist)

    def skip_reason(self, watchlist: list[str]) -> str | None:
        """Noisy top-k with gap needs k+1 watched keys; with fewer there is nothing to release (and no cost)."""
        return None if len(watchlist) >= 2 else "watchlist_too_small"

    def run(self, window: Window, data: dict[str, float], rng: Any) -> RecordDraft:
        p = self.parameters()
        # the k-th gap needs the (k+1)-th answer; the cost does not depend on k
        m = self.measurement_for(min(p["k"], len(data) - 1))
        ranked = m(data, rng=rng)
        as_number = int if p["noise"] == "geometric" else float  # discrete noise: integer gaps
        items = [{"key": str(key), "rank": i + 1, "gap": as_number(gap)} for i, (key, gap) in enumerate(ranked)]
        return RecordDraft(window, self.type, self.mechanism, p, items=items, events=m.realized(ranked),
                           info={"watchlist_size": len(data)})


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
        budget = _window_budget(h, window_budget.LEGACY_HISTOGRAM)
        if "epsilon" in budget:  # the deprecated keys: ε was measured at the period's δ′
            budget["delta_prime"] = self.cfg.budget.delta_prime
        return {**budget, **drafts.histogram_parameters(
            self.calibration(), noise=h.noise, weighting=h.weighting, max_keys=h.max_keys, confidence=h.confidence,
            max_keys_per_user=self.cfg.contribution.max_keys_per_user), "domain_size": len(self.domain)}

    @cached_property
    def measurement(self) -> Measurement[Any]:
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
            keys_per_user = Counter(user for user, _ in reader.bounding_pairs(window))
            return Domained(weighted_scores(reader.bounding_pairs(window), keys_per_user=keys_per_user,
                                            max_keys_per_user=self.cfg.contribution.max_keys_per_user), domain, block)
        return Domained(reader.all_counts(window).as_dict(), domain, block)

    def __post_init__(self) -> None:
        h = self.cfg.releases.histogram
        self.domain: list[str] = list(dict.fromkeys(list(h.domain) + _read_domain_file(h.domain_file,
                                                                                       "releases.histogram")))
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


def _window_budget(section: Any, legacy_defaults: tuple[float, float]) -> dict[str, Any]:
    """What a record states about its type's budget: the window budget, or the deprecated keys that set it."""
    legacy = window_budget.legacy_values(section, legacy_defaults)
    if legacy is not None:
        return {"epsilon": legacy[0], "delta": legacy[1]}
    return {"window_epsilon": section.window_epsilon, "window_delta": section.window_delta}


BUILDERS: dict[str, Callable[[Config], Builder]] = {
    "topk": TopkBuilder,
    "sample": SampleBuilder,
    "argmax": ArgmaxBuilder,
    "watch_topk": WatchTopkBuilder,
    "histogram": HistogramBuilder,
}


def alerts_measurement(cfg: AlertsConfig) -> Any:
    """The ``alerts`` type's measurement: one Adaptive SVT instance at the configured parameters (its whole ε
    charged in the window it opens in, :mod:`stream_dp.release.alerts`)."""
    from stream_dp.mechanisms import AdaptiveSvtInstance

    return AdaptiveSvtInstance(threshold=cfg.threshold, k=cfg.k, epsilon=cfg.epsilon, noise=cfg.noise,
                               theta=cfg.theta or None, monotone=True)


def release_measurements(cfg: Config) -> dict[str, Measurement[Any]]:
    """Every enabled release type's measurement, in release order: the one source of what a window can cost
    (reserved by the worker, planned by the budget check). ``alerts``: the cost of opening an instance."""
    return {t: alerts_measurement(cfg.releases.alerts) if t == "alerts" else BUILDERS[t](cfg).measurement
            for t in enabled_types(cfg)}


def enabled_types(cfg: Config) -> list[str]:
    """Release types the config enables, in release order (top-k first: alerts watch what it released)."""
    return cfg.releases.enabled()
