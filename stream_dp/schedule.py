"""The public release schedule: which windows get released, decided from public inputs only.

docs/privacy.md §1b: what a subscriber sees must not depend on whether one user's events exist. The *set of
windows* released is therefore not "the windows that received events" (a lone user's window would exist
only with that user: ε = ∞) but a schedule fixed by public inputs:

- the window size (``windows.size_seconds``) and the schedule **start** (``windows.start``; ``"first-start"``
  means the window of the wall clock when the deployment first starts) — both recorded once in Redis, so every
  worker, restart and later config agrees on them;
- the **global watermark**, which advances only with the Kafka record timestamps (the trusted clock, see
  :mod:`stream_dp.ingest.windowing`), never with a body field.

Every window ``[s, s + size)`` with ``s = start + i·size`` (i ≥ 0) and ``s + size <= watermark`` is released
exactly once, empty or not, with every enabled release type. Events whose window starts before ``start``
are late (dropped and counted): the schedule never reaches back before its start.

>>> sched = ReleaseSchedule(start=7200, size=3600)
>>> sched.closed_windows(after=None, watermark=17999.0)
[7200, 10800]
>>> sched.closed_windows(after=7200, watermark=17999.0)
[10800]
>>> sched.covers(3600), sched.covers(7200)
(False, True)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from stream_dp.config import ConfigError, WindowsConfig, parse_window_start
from stream_dp.store.keys import KEY_HASH, SHARD_HASH, Keys


def window_start(ts: float, size: int) -> int:
    """Start (epoch seconds) of the tumbling window of ``size`` seconds holding time ``ts``: windows are
    ``[start, start + size)`` with ``start`` a multiple of ``size``. The one place this is written (ingest,
    the bounding oracle, the schedule's first start and the demo all call it).

    >>> window_start(7199.9, 3600), window_start(7200, 3600), window_start(-1, 60)
    (3600, 7200, -60)
    """
    return int(ts // size) * size


def record_timestamp_ms(ts: float) -> int:
    """The Kafka record timestamp (integer ms) a trusted producer stamps on an event of time ``ts``: the
    latest millisecond not after ``ts``, i.e. ``ms / 1000 <= ts < (ms + 1) / 1000`` in floating point.

    The ingest accepts a body time only within ``[record time − max_event_delay, record time + max_clock_skew]``
    (:mod:`stream_dp.ingest.windowing`), so with ``max_event_delay_seconds = 0`` a record time even a fraction of
    a millisecond after the body time is out of range (dead letter ``event_time_out_of_range``). Rounding to the
    nearest millisecond stamps half of all sub-millisecond times after themselves, and ``int(ts * 1000)`` does so
    for about 5 in 10⁶ random times near 2027 (``ts * 1000`` rounds up to a whole number in binary floating
    point), while it stamps 1.001 as 1000 ms. Here ``record_timestamp_ms(ts) / 1000 <= ts`` always holds (the
    ingest divides the same way), and a time given in whole milliseconds keeps its millisecond.

    >>> record_timestamp_ms(1800000014.6759999), int(1800000014.6759999 * 1000)
    (1800000014675, 1800000014676)
    >>> record_timestamp_ms(1.001), int(1.001 * 1000)
    (1001, 1000)
    """
    if not ts >= 0:
        raise ValueError(f"an event time must be a number of seconds >= 0, got {ts!r}")
    ms = round(ts * 1000)  # within one of the answer; the loops settle it in the ingest's own arithmetic
    while ms / 1000 > ts:
        ms -= 1
    while (ms + 1) / 1000 <= ts:
        ms += 1
    return ms


@dataclass(frozen=True)
class ReleaseSchedule:
    """Windows ``start + i·size`` (i ≥ 0); a window is due once ``end <= watermark``."""

    start: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"windows.size_seconds must be >= 1, got {self.size!r}")
        if self.start % self.size:
            raise ValueError(f"schedule start {self.start} is not a multiple of the window size {self.size}")

    def covers(self, window_start: int) -> bool:
        """Whether the window starting at ``window_start`` is on the schedule (not before its start)."""
        return window_start >= self.start

    def closed_windows(self, *, after: int | None, watermark: float | None, limit: int = 1000) -> list[int]:
        """Starts of the scheduled windows after ``after`` (None: from the schedule start) whose end is at
        or below ``watermark``, oldest first, at most ``limit``."""
        if watermark is None:
            return []
        first = self.start if after is None else max(self.start, after + self.size)
        out: list[int] = []
        s = first
        while s + self.size <= watermark and len(out) < limit:
            out.append(s)
            s += self.size
        return out


class ScheduleMismatch(ConfigError):
    """The config names a schedule other than the one this deployment recorded."""


def layout_record(shards: int, layout: str) -> dict[str, object]:
    """How a deployment's windows are laid out, as recorded in its schedule: the shard count and user hash,
    and for the ``"key"`` layout the layout and key hash (a ``"user"`` deployment records no layout field, so
    its record is the one written before layouts existed, and a record without one reads as ``"user"``)."""
    out: dict[str, object] = {"shards": shards, "shard_hash": SHARD_HASH}
    if layout != "user":
        out.update(layout=layout, key_hash=KEY_HASH)
    return out


def establish(client, keys: Keys, windows: WindowsConfig, *,  # a redis client
              wall_clock: Callable[[], float] = time.time) -> ReleaseSchedule:
    """The deployment's schedule: recorded once (the first process to start writes it), then read back.

    ``windows.start`` = 0 takes the recorded start, or on the very first start the window of the wall
    clock. A configured start or a window size that differs from the recorded one raises
    :class:`ScheduleMismatch` naming the setting: changing either would skip or re-release windows. So does
    a ``windows.shards`` (or user → shard hash) other than the recorded one: it would split a user's bounding
    state over two shards (L0 > Δ); and so does a window layout (``keys.layout``, set by
    ``windows.layout``: docs/design/key-sharded-counts.md) or key → key shard hash other than the recorded
    one: the counts would be read from shards that were never written, and empty windows released.
    """
    size = windows.size_seconds
    configured = parse_window_start(windows.start)
    wanted = configured if configured is not None else window_start(wall_clock(), size)
    client.set(keys.schedule(), json.dumps({"start": wanted, "size": size,
                                            **layout_record(windows.shards, keys.layout)}), nx=True)
    raw = client.get(keys.schedule())
    recorded = json.loads(raw)
    recorded_layout = (recorded.get("layout", "user"), recorded.get("key_hash", KEY_HASH))
    if recorded_layout != (keys.layout, KEY_HASH):
        raise ScheduleMismatch(
            f"windows.layout is {keys.layout!r} (key hash {KEY_HASH}) but this deployment's windows (redis key "
            f"{keys.schedule()}) were written in layout {recorded_layout[0]!r} (key hash {recorded_layout[1]}): "
            "its counts would be read from shards that were never written; keep "
            f"windows.layout = {recorded_layout[0]!r}")
    # a schedule recorded before windows were sharded had one shard per window
    recorded_shards = (int(recorded.get("shards", 1)), recorded.get("shard_hash", SHARD_HASH))
    if recorded_shards != (windows.shards, SHARD_HASH):
        raise ScheduleMismatch(
            f"windows.shards is {windows.shards} (user hash {SHARD_HASH}) but this deployment's windows (redis key "
            f"{keys.schedule()}) are split into {recorded_shards[0]} shards (user hash {recorded_shards[1]}): "
            "another value would put a user's bounding state in two shards; keep "
            f"windows.shards = {recorded_shards[0]}, or use a new redis.key_prefix")
    if int(recorded["size"]) != size:
        raise ScheduleMismatch(
            f"windows.size_seconds is {size} but this deployment's release schedule (redis key "
            f"{keys.schedule()}) was recorded with {recorded['size']}; use a new redis.key_prefix for a new schedule")
    if configured is not None and int(recorded["start"]) != configured:
        raise ScheduleMismatch(
            f"windows.start is {windows.start!r} but this deployment's release schedule (redis key "
            f"{keys.schedule()}) starts at {recorded['start']}; set windows.start = \"first-start\" (or "
            f"\"{recorded['start']}\"), or use a new redis.key_prefix for a new schedule")
    return ReleaseSchedule(int(recorded["start"]), size)
