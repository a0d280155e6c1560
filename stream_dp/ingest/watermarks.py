"""The shared global watermark in Redis: windows registered, per-partition watermarks reported, windows closed.

Keys (:mod:`stream_dp.store.keys`): ``{ingest}`` ``windows`` (ZSET of window starts) and ``watermarks`` (HASH:
per-partition watermarks, ``seen:<partition>`` activity times, ``global``, and ``closing`` while a new
global is being installed); each window shard's ``meta`` ``state`` goes ``open`` → ``closed`` here (→
``released`` by the release worker). The rule the target follows is :func:`stream_dp.ingest.windowing.global_watermark`'s.

**Closing windows without a race.** A global watermark is installed in three steps: (1) one script on
``{ingest}`` (``store/lua/advance_watermark.lua``) computes the target and records it as ``closing`` -- from
then on no window the target covers can be registered; it returns the indexed windows the target closes;
(2) each is marked ``closed`` in its own hash tag (``close_window.lua``), after which the apply script
refuses it; (3) ``global`` is set and a close notice appended to the window-closes stream
(``finalize_watermark.lua``). So when a reader sees ``global``, every window with ``end <= global`` is
already closed to writers, whichever worker raced. A crash between the steps leaves ``closing`` set; the
next advance by any worker completes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

import redis
from redis.client import Pipeline

from stream_dp.ingest.chunks import reply_text
from stream_dp.node_batches import run_batched
from stream_dp.store import scripts
from stream_dp.store.keys import Keys


@dataclass(frozen=True)
class WatermarkState:
    """After an advance: the global watermark (None before the first), the windows still open."""

    global_watermark: float | None
    closing_through: float | None
    windows_open: int
    windows_closed: tuple[int, ...] = ()


#: One owned partition's report: (watermark, busy) or (watermark, busy, caught up).
PartitionReport = tuple[float | None, bool] | tuple[float | None, bool, bool]


class Watermarks:
    """The window index and the global watermark of one deployment (``keys``), windows of ``window_size``."""

    def __init__(self, client: redis.Redis, keys: Keys, window_size: int) -> None:
        self.client = client
        self.keys = keys
        self.window_size = window_size
        self._register = scripts.register(client, "register_windows")
        self._advance = scripts.register(client, "advance_watermark")
        self._close = scripts.register(client, "close_window")
        self._finalize = scripts.register(client, "finalize_watermark")

    def register_windows(self, starts: Iterable[int]) -> dict[int, bool]:
        """Add windows to the index unless already closed; {start: open?}."""
        starts = sorted(set(starts))
        if not starts:
            return {}
        args: list[int] = []
        for s in starts:
            args += [s, s + self.window_size]
        flags = self._register(keys=[self.keys.watermarks(), self.keys.windows_index()], args=args)
        return {s: bool(f) for s, f in zip(starts, flags)}

    def advance(self, owned: dict[int, PartitionReport], *, known_partitions: Iterable[int] = (),
                idle_timeout: float, now: float | None = None, require_epoch: bool = False) -> WatermarkState:
        """Record owned partitions' (watermark, busy[, caught_up]) and install the next global watermark
        (all phases). ``caught_up`` (default True): the owner's position has reached the high-water mark.

        ``known_partitions``: every partition of the topic (a partition no owner reports caught up holds
        the global back). ``now`` overrides the Redis clock (tests). ``require_epoch``: refuse (a
        ``ResponseError`` starting ``INGEST_STATE_LOST``) when ingest's epoch marker is gone
        (:mod:`stream_dp.ingest.state_check`).
        """
        known = sorted(set(known_partitions))
        args: list[object] = ["" if now is None else repr(float(now)), repr(float(idle_timeout)),
                              self.window_size, len(known), *known]
        for p, report in sorted(owned.items()):
            wm, busy = report[0], report[1]
            caught_up = report[2] if len(report) > 2 else True
            args += [p, "" if wm is None else repr(float(wm)), 1 if busy else 0, 1 if caught_up else 0]
        keys = [self.keys.watermarks(), self.keys.windows_index()]
        out = self._advance(keys=[*keys, self.keys.ingest_epoch()] if require_epoch else keys, args=args)
        target, current, open_count = reply_text(out[0]), reply_text(out[1]), int(out[2])
        to_close = tuple(int(s) for s in out[3:])
        if target and target != current:
            self._close_windows(to_close, target)
            current = reply_text(self._finalize(keys=[self.keys.watermarks(), self.keys.window_closes()],
                                                args=[target, self.window_size]))
            open_count = int(self.client.zcount(self.keys.windows_index(),
                                                f"({float(current) - self.window_size!r}", "+inf"))
        return WatermarkState(
            global_watermark=float(current) if current else None,
            closing_through=float(target) if target else None,
            windows_open=open_count,
            windows_closed=to_close,
        )

    def _close_windows(self, starts: tuple[int, ...], target: str) -> None:
        """Step (2): every shard of each window the target covers marked ``closed``, batched per master."""
        if not starts:
            return

        def close(pipe: Pipeline, start: int, shard: int) -> object:
            return self._close(keys=[self.keys.window_meta(start, shard)],
                               args=[start, start + self.window_size, target], client=pipe)

        run_batched(self.client, [(self.keys.window_meta(start, shard), partial(close, start=start, shard=shard))
                                  for start in starts for shard in range(self.keys.shards)])

    def global_watermark(self) -> float | None:
        raw = self.client.hget(self.keys.watermarks(), "global")
        return float(raw) if raw is not None else None
