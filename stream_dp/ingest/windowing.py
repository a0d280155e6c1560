"""Event-time tumbling windows and the watermark rule.

Windows are ``[start, start + size)`` with ``start`` a multiple of ``size`` (integer epoch seconds).

**Watermark.** Per Kafka partition, ``watermark = max event time seen − allowed lateness``; it only ever
moves forward. The **global** watermark is the minimum over the *active* partitions of the topic, never
moves backwards, and means: every window with ``end <= global`` is closed. A partition is active while its
owner reports it busy (it delivered records, or has records not yet consumed) and for
``idle_partition_timeout_seconds`` after that; a partition the service has not heard from within that
time (idle, or its owner is gone and nobody took it over yet) stops holding windows back. A partition
that is known but has no watermark yet holds the global back until it turns idle. When every partition
is idle the global moves to the highest partition watermark (the stream went quiet; every window the
partitions have seen past is done).

An event is **late** when its window's end is at or below the global watermark when its batch is applied;
late events are dropped and counted. The authoritative computation runs in Redis
(``lua/advance_watermark.lua``) so that several ingest workers, each owning some partitions, agree on one
global watermark; :func:`global_watermark` is the same rule in Python (tests check they agree).

>>> window_start(7199.9, 3600), window_start(7200, 3600)
(3600, 7200)
>>> seen = {0: 9.0, 1: 8.0, 2: 9.5}
>>> global_watermark({0: 100.0, 1: 50.0}, last_seen=seen, now=10.0, idle_timeout=5.0)
50.0
>>> global_watermark({0: 100.0, 1: 50.0}, last_seen=seen, now=13.5, idle_timeout=5.0)  # partition 1 idle
100.0
>>> global_watermark({0: 100.0, 1: 50.0, 2: None}, last_seen=seen, now=10.0, idle_timeout=5.0) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping


def window_start(ts: float, size: int) -> int:
    """Start (epoch seconds) of the tumbling window of ``size`` seconds holding event time ``ts``."""
    return int(ts // size) * size


class PartitionClock:
    """Per-partition maximum event time seen by this worker (the local half of the watermark)."""

    def __init__(self, allowed_lateness: float) -> None:
        self.allowed_lateness = float(allowed_lateness)
        self._max_ts: dict[int, float] = {}

    def observe(self, partition: int, ts: float) -> None:
        if ts > self._max_ts.get(partition, float("-inf")):
            self._max_ts[partition] = ts

    def watermark(self, partition: int) -> float | None:
        """``max event time − allowed lateness`` of a partition, None before its first event."""
        ts = self._max_ts.get(partition)
        return None if ts is None else ts - self.allowed_lateness

    def watermarks(self) -> dict[int, float]:
        return {p: ts - self.allowed_lateness for p, ts in self._max_ts.items()}

    def forget(self, partitions: set[int]) -> None:
        """Drop revoked partitions (their new owner continues from the watermark stored in Redis)."""
        for p in partitions:
            self._max_ts.pop(p, None)


def global_watermark(watermarks: Mapping[int, float | None], *, last_seen: Mapping[int, float], now: float,
                     idle_timeout: float) -> float | None:
    """Candidate global watermark: min over active partitions (None = known without a watermark yet,
    which holds everything back); the max watermark when all are idle; None when nothing is known.

    The stored global is ``max(previous global, candidate)`` (it never moves backwards).
    """
    active = [p for p in watermarks if now - last_seen.get(p, float("-inf")) <= idle_timeout]
    if active:
        if any(watermarks[p] is None for p in active):
            return None
        return min(watermarks[p] for p in active)  # type: ignore[type-var]
    known = [w for w in watermarks.values() if w is not None]
    return max(known) if known else None
