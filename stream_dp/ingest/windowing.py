"""Event-time tumbling windows and the watermark rule.

Windows are ``[start, start + size)`` with ``start`` a multiple of ``size`` (integer epoch seconds).

**The clock is the Kafka record timestamp** (docs/privacy.md §1b): the time the service's own producer (the
collector, ``stream-dp replay``) stamped on the record, which users cannot set. Per Kafka partition,
``watermark = max record time seen − allowed lateness``; it only ever moves forward. A body's event time
never moves it: it only chooses the event's window, and only within ``[record time − max_event_delay,
record time + max_clock_skew]`` (outside: dead letter ``event_time_out_of_range``). With
``max_event_delay <= allowed lateness`` and record times that follow one clock, an event is never late
because of other users' records, so adding or removing one user changes no other user's counted events.
A record with a null value is a **clock tick** of the trusted producer: it advances its partition's clock
and counts nothing (a collector sends them while no events come, ``stream-dp replay`` at the end).

The **global** watermark is the minimum over the *active* partitions of the topic, never moves backwards,
and means: every window with ``end <= global`` is closed. A partition is **idle** only when an owner
reported it *caught up* (its position reached the high-water mark, as the partition's leader confirms it:
:mod:`stream_dp.ingest.caught_up`) within
``idle_partition_timeout_seconds`` and it has been quiet (no records, not behind) for that long. Every other
partition is active -- busy, behind, or without a live owner (its worker died and the group has not
handed it over yet) -- and holds the global back at its watermark, or entirely while it has none. So the
watermark never passes records nobody has read (a crash-looping worker cannot close windows early).
When every partition is idle the global moves to the highest partition watermark (the stream went quiet).

An event is **late** when its window's end is at or below the global watermark when its batch is applied,
or when its window starts before the release schedule (:mod:`stream_dp.schedule`); late events are dropped
and counted. The authoritative computation runs in Redis (``lua/advance_watermark.lua``) so that several
ingest workers, each owning some partitions, agree on one global watermark; :func:`global_watermark` is
the same rule in Python (tests check they agree).

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

from stream_dp.schedule import window_start

__all__ = ["PartitionClock", "global_watermark", "window_start"]


class PartitionClock:
    """Per-partition maximum record time seen by this worker (the local half of the watermark)."""

    def __init__(self, allowed_lateness: float) -> None:
        self.allowed_lateness = float(allowed_lateness)
        self._max_ts: dict[int, float] = {}

    def observe(self, partition: int, ts: float) -> None:
        if ts > self._max_ts.get(partition, float("-inf")):
            self._max_ts[partition] = ts

    def watermark(self, partition: int) -> float | None:
        """``max record time − allowed lateness`` of a partition, None before its first record."""
        ts = self._max_ts.get(partition)
        return None if ts is None else ts - self.allowed_lateness

    def forget(self, partitions: set[int]) -> None:
        """Drop revoked partitions (their new owner continues from the watermark stored in Redis)."""
        for p in partitions:
            self._max_ts.pop(p, None)


def global_watermark(watermarks: Mapping[int, float | None], *, last_seen: Mapping[int, float], now: float,
                     idle_timeout: float, last_reported: Mapping[int, float] | None = None,
                     caught_up: Mapping[int, bool] | None = None) -> float | None:
    """Candidate global watermark: min over active partitions (None = known without a watermark yet,
    which holds everything back); the max watermark when all are idle; None when nothing is known.

    A partition is idle when it was quiet for ``idle_timeout`` (``last_seen``: last busy or behind) and an
    owner reported it caught up within ``idle_timeout`` (``last_reported``, ``caught_up``; both default to
    "reported now, caught up"). The stored global is ``max(previous global, candidate)``.
    """
    def idle(p: int) -> bool:
        reported = now if last_reported is None else last_reported.get(p, float("-inf"))
        up = True if caught_up is None else caught_up.get(p, False)
        return now - reported <= idle_timeout and up and now - last_seen.get(p, float("-inf")) > idle_timeout

    active = [p for p in watermarks if not idle(p)]
    if active:
        if any(watermarks[p] is None for p in active):
            return None
        return min(watermarks[p] for p in active)  # type: ignore[type-var]
    known = [w for w in watermarks.values() if w is not None]
    return max(known) if known else None
