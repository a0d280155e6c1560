"""Prometheus metrics of the ingest worker (namespace ``stream_dp``, subsystem ``ingest``).

Only totals and bounded labels (reject reason, bounding rule, dependency): never a key, a user or a
per-key count. Build one :class:`IngestMetrics` per process with an injected registry (tests pass a fresh
``CollectorRegistry``); every labelled child exists from the start at 0.

>>> from prometheus_client import CollectorRegistry
>>> reg = CollectorRegistry()
>>> m = IngestMetrics(reg)
>>> m.rejected.labels(reason="bad_json").inc()
>>> reg.get_sample_value("stream_dp_ingest_events_rejected_total", {"reason": "bad_json"})
1.0
>>> reg.get_sample_value("stream_dp_ingest_events_rejected_total", {"reason": "not_utf8"})
0.0
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from stream_dp.ingest.bounding import BOUNDING_RULES
from stream_dp.ingest.decode import REJECT_REASONS

DEPENDENCIES: tuple[str, ...] = ("redis", "kafka")
REBALANCE_CHANGES: tuple[str, ...] = ("assigned", "revoked")

_NS, _SUB = "stream_dp", "ingest"


class IngestMetrics:
    """Every ingest metric, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        kw: dict[str, Any] = {"namespace": _NS, "subsystem": _SUB, "registry": registry}
        self.consumed = Counter("events_consumed", "Records fetched from the events topic", **kw)
        self.applied = Counter("events_applied", "Events counted in a window after contribution bounding", **kw)
        self.rejected = Counter("events_rejected", "Records sent to the dead-letter topic, by reason",
                                ["reason"], **kw)
        self.late = Counter("events_late", "Valid events dropped because their window was already closed "
                            "(or starts before the release schedule, windows.start)", **kw)
        self.clock_ticks = Counter("clock_ticks", "Null-value records (clock ticks of the trusted producer) that "
                                   "advanced a partition's record-time clock", **kw)
        self.bounded = Counter("events_bounded", "Valid events dropped by contribution bounding, by rule "
                               "(linf: user already counted for the key; l0: user already at max_keys_per_user)",
                               ["rule"], **kw)
        self.duplicate = Counter("events_duplicate", "Events skipped because their offset was already applied "
                                 "(replays after a crash or rebalance)", **kw)
        self.replanned = Counter("chunks_replanned", "Chunks bounded again because another writer changed the "
                                 "window's bounding state first (several workers on one window)", **kw)
        self.dead_lettered = Counter("dead_letters_produced", "Records written to the dead-letter topic", **kw)
        self.dead_letters_bounded = Counter("dead_letters_bounded", "Dead letters written in bounded form (position, "
                                            "size, hash, prefix): the record was too large or refused as is", **kw)
        self.dead_letters_lost = Counter("dead_letters_lost", "Rejected records whose dead letter the broker refused "
                                         "for good even in bounded form (logged by position, then skipped)", **kw)
        self.batch_duration = Histogram("batch_duration_seconds", "Wall time to decode, apply and commit one batch",
                                        buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10),
                                        **kw)
        self.batch_events = Histogram("batch_size_records", "Records per batch",
                                      buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000, 50000), **kw)
        self.lag = Gauge("consumer_lag_records", "Records behind the fetched high-water mark, summed over the "
                         "partitions this worker owns", **kw)
        self.partitions = Gauge("partitions_assigned", "Partitions of the events topic this worker owns", **kw)
        self.shard_fill = Gauge("shard_fill_ratio", "Fullest window shard this worker writes: its bounding log as a "
                                "fraction of windows.max_shard_log_bytes (at 1, events are dead-lettered "
                                "window_shard_full)", **kw)
        self.windows_open = Gauge("windows_open", "Windows in the index that the global watermark has not closed",
                                  **kw)
        self.watermark = Gauge("watermark_seconds", "Global event-time watermark (epoch seconds); windows ending "
                               "at or before it are closed", **kw)
        self.up = Gauge("up", "1 while the last loop iteration reached every dependency, else 0", **kw)
        self.dependency_up = Gauge("dependency_up", "1 when the last call to the dependency succeeded",
                                   ["dependency"], **kw)
        self.errors = Counter("dependency_errors", "Failed calls to a dependency (each is retried with backoff)",
                              ["dependency"], **kw)
        self.rebalances = Counter("rebalances", "Partition assignment changes", ["change"], **kw)
        self.commits_failed = Counter("commits_failed", "Offset commits that failed (retried with the next batch; "
                                      "replays are harmless)", **kw)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason=reason)
        for rule in BOUNDING_RULES:
            self.bounded.labels(rule=rule)
        for dep in DEPENDENCIES:
            self.dependency_up.labels(dependency=dep).set(0)
            self.errors.labels(dependency=dep)
        for change in REBALANCE_CHANGES:
            self.rebalances.labels(change=change)
