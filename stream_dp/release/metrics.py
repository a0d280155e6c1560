"""Prometheus metrics of the release worker (``stream_dp_release_*``, ``stream_dp_budget_*``, ``stream_dp_svt_*``).

Built on an injected ``registry`` (tests pass a fresh ``CollectorRegistry``). Label values are bounded:
release type, outcome, phase, error kind -- and the budget ``scope``: one per budget period, of which only the
current and the previous period are exported (:data:`SCOPES_KEPT`; an older period's children are removed
when a newer one appears, and a late record of an older period sets nothing), so the ``stream_dp_budget_*``
series stay two per metric however long the service runs. Never a key, a user or a raw count. Label
children of the fixed label sets are created up front so every series exists at 0.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from stream_dp.release.records import RELEASE_TYPES

OUTCOMES = ("released", "budget_exhausted", "republished")
PHASES = ("redis", "mechanism", "ledger", "kafka")
ERROR_KINDS = ("redis", "kafka", "ledger", "claim_lost", "other")
SVT_ANSWERS = ("above", "below")
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
SCOPES_KEPT = 2  # budget periods exported: the current and the previous one


def _period_order(scope: str) -> tuple[int, str]:
    """Scopes in time order: ISO dates (2026-11-29) and p<epoch start> names of one width sort as strings."""
    return (len(scope), scope)


class ReleaseMetrics:
    """All release-worker metrics on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        ns = "stream_dp"
        self.releases = Counter("releases_total", "Release records published, by type and outcome "
                                "(republished: a stored release published again after a crash or a lost race)",
                                ["type", "outcome"], namespace=ns, subsystem="release", registry=registry)
        self.items = Counter("items_total", "Items (keys) in published releases, by type", ["type"],
                             namespace=ns, subsystem="release", registry=registry)
        self.bottom_stops = Counter("bottom_stops_total", "Top-k releases that stopped early at the bottom outcome",
                                    namespace=ns, subsystem="release", registry=registry)
        self.windows_released = Counter("windows_total", "Windows whose releases were all published",
                                        namespace=ns, subsystem="release", registry=registry)
        self.windows_pending = Gauge("windows_pending", "Closed windows not yet released",
                                     namespace=ns, subsystem="release", registry=registry)
        self.latency = Histogram("publish_latency_seconds", "Window close (watermark passed its end) to the last "
                                 "release of the window published", buckets=LATENCY_BUCKETS,
                                 namespace=ns, subsystem="release", registry=registry)
        self.phase_seconds = Counter("phase_seconds_total", "Time spent releasing, by phase (redis reads, "
                                     "mechanisms, ledger steps, kafka produce)", ["phase"],
                                     namespace=ns, subsystem="release", registry=registry)
        self.errors = Counter("errors_total", "Errors of the release loop, by kind", ["kind"],
                              namespace=ns, subsystem="release", registry=registry)
        self.epsilon_spent = Gauge("epsilon_spent", "ε spent in the budget scope (period)", ["scope"],
                                   namespace=ns, subsystem="budget", registry=registry)
        self.epsilon_remaining = Gauge("epsilon_remaining", "ε remaining in the budget scope", ["scope"],
                                       namespace=ns, subsystem="budget", registry=registry)
        self.delta_spent = Gauge("delta_spent", "δ spent in the budget scope", ["scope"],
                                 namespace=ns, subsystem="budget", registry=registry)
        self.delta_remaining = Gauge("delta_remaining", "δ remaining in the budget scope", ["scope"],
                                     namespace=ns, subsystem="budget", registry=registry)
        self.svt_instances = Counter("instances_opened_total", "Adaptive SVT instances opened (each charged its "
                                     "full ε when it opened)", namespace=ns, subsystem="svt", registry=registry)
        self.svt_epsilon = Counter("instance_epsilon_total", "ε charged for opening SVT instances",
                                   namespace=ns, subsystem="svt", registry=registry)
        self.svt_answers = Counter("answers_total", "SVT answers published, by answer", ["answer"],
                                   namespace=ns, subsystem="svt", registry=registry)
        for t in RELEASE_TYPES:
            self.items.labels(t)
            for o in OUTCOMES:
                self.releases.labels(t, o)
        for p in PHASES:
            self.phase_seconds.labels(p)
        for k in ERROR_KINDS:
            self.errors.labels(k)
        for a in SVT_ANSWERS:
            self.svt_answers.labels(a)
        self._scopes: list[str] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's wall time to ``phase_seconds_total{phase=name}``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phase_seconds.labels(name).inc(time.perf_counter() - t0)

    def budget(self, scope: str, *, epsilon_spent: float, epsilon_remaining: float, delta_spent: float,
               delta_remaining: float) -> None:
        """Set the budget gauges of ``scope`` if it is one of the :data:`SCOPES_KEPT` latest periods seen;
        drop the children of the period it pushes out."""
        if scope not in self._scopes:
            self._scopes = sorted([*self._scopes, scope], key=_period_order)
            while len(self._scopes) > SCOPES_KEPT:
                old = self._scopes.pop(0)
                for g in (self.epsilon_spent, self.epsilon_remaining, self.delta_spent, self.delta_remaining):
                    try:
                        g.remove(old)
                    except KeyError:  # never set: the late record of an old period that was pushed out at once
                        pass
            if scope not in self._scopes:
                return
        self.epsilon_spent.labels(scope).set(epsilon_spent)
        self.epsilon_remaining.labels(scope).set(epsilon_remaining)
        self.delta_spent.labels(scope).set(delta_spent)
        self.delta_remaining.labels(scope).set(delta_remaining)
