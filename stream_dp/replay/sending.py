"""Sending events to the topic: keyed by user, stamped with the event time, paced, counted.

An event stamped further ahead of the broker's clock than the topic accepts is counted as failed and not
sent (Apache Kafka 4 refuses the whole batch of such a record, and kafka-python's idempotent producer then
fails every pending send).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stream_dp.config import EventsConfig
from stream_dp.replay.events import Event, ReplayError
from stream_dp.replay.pacing import Pacer
from stream_dp.replay.progress import Progress
from stream_dp.schedule import record_timestamp_ms


CLOCK_MARGIN_S = 60.0  # how far this machine's clock may run behind the broker's, for the timestamp limit


@dataclass
class ReplayStats:
    """What a replay did."""

    sent: int = 0
    skipped: int = 0
    failed: int = 0  # sends the broker refused (or that never got an answer): not in the topic
    first_error: str = ""  # the first failed send's error, e.g. a timestamp a Kafka 4 broker refuses
    first_ts: float | None = None
    last_ts: float | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        span = ""
        if self.first_ts is not None and self.last_ts is not None:
            fmt = "%Y-%m-%d %H:%M"
            a = datetime.fromtimestamp(self.first_ts, tz=timezone.utc).strftime(fmt)
            b = datetime.fromtimestamp(self.last_ts, tz=timezone.utc).strftime(fmt)
            span = f", event time {a} .. {b} UTC"
        rate = self.sent / self.seconds if self.seconds > 0 else 0.0
        failed = f" (first: {self.first_error})" if self.failed else ""
        return (f"replayed {self.sent:,} events in {self.seconds:.1f}s ({rate:,.0f}/s){span}; "
                f"skipped {self.skipped:,} rows without user/key/time; {self.failed:,} failed to send{failed}")


def replay(events: Iterable[Event | None], producer: Any, topic: str, fields: EventsConfig, *,
           pacer: Pacer | None = None, progress: Progress | None = None,
           fraction: Callable[[], float | None] | None = None, limit: int | None = None,
           should_stop: Callable[[], bool] | None = None, max_ahead_s: float | None = None,
           clock: Callable[[], float] = time.time) -> ReplayStats:
    """Send ``events`` to ``topic`` through a kafka-python-like ``producer`` and flush.

    ``None`` items are rows that did not map to an event; they are counted as skipped. The record key is
    the user (UTF-8) and the record timestamp the event time (ms), when known. ``limit`` stops after that
    many sent events; ``should_stop`` is polled between events (e.g. a SIGINT flag).

    ``max_ahead_s`` is how far ahead of the broker's clock the topic accepts a timestamp (Apache Kafka 4's
    ``message.timestamp.after.max.ms``, one hour by default): an event stamped later than that (less
    :data:`CLOCK_MARGIN_S`) is not sent but counted as failed. Sent, the broker would refuse its whole
    batch -- and kafka-python's idempotent producer takes that refusal as fatal and fails every pending send.
    """
    pacer = pacer or Pacer()
    stats = ReplayStats()
    t0 = time.monotonic()

    def failed(exc: BaseException) -> None:
        stats.failed += 1
        if not stats.first_error:
            stats.first_error = f"{type(exc).__name__}: {exc}"

    try:
        for item in events:
            if should_stop is not None and should_stop():
                break
            if limit is not None and stats.sent >= limit:
                break
            if item is None:
                stats.skipped += 1
                continue
            pacer.wait(item.ts)
            if max_ahead_s is not None and item.ts is not None and item.ts > clock() + max_ahead_s - CLOCK_MARGIN_S:
                failed(ReplayError(f"event time {item.ts:.0f} is more than {max_ahead_s:.0f} s ahead of now, "
                                   f"which the topic refuses (message.timestamp.after.max.ms); not sent"))
                continue
            ts_ms = record_timestamp_ms(item.ts) if item.ts is not None and item.ts >= 0 else None
            future = producer.send(topic, key=item.user.encode(), value=item.to_json(fields), timestamp_ms=ts_ms)
            if hasattr(future, "add_errback"):
                future.add_errback(failed)
            stats.sent += 1
            if item.ts is not None:
                stats.first_ts = item.ts if stats.first_ts is None else stats.first_ts
                stats.last_ts = item.ts
            if progress is not None:
                progress.update(stats.sent, fraction=fraction() if fraction else None, event_time=item.ts)
        producer.flush()
        stats.seconds = time.monotonic() - t0
        if progress is not None:
            progress.finish(stats.sent, fraction=fraction() if fraction else None, event_time=stats.last_ts)
    finally:
        if progress is not None:
            progress.close()  # an error mid-replay must not leave the terminal's cursor hidden
    return stats
