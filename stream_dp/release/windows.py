"""Which closed windows are due, on the public schedule, and the release worker's "released" mark.

**Which windows** (docs/privacy.md §1b): the release schedule (:mod:`stream_dp.schedule`) -- every window from the
recorded schedule start on, in order, once ``end <= watermarks.global`` -- *not* the windows that received
events. An empty window is released like any other (its counts are simply absent), so whether a window is
released never depends on whether one user's events exist. The worker keeps a cursor, ``released_through``,
the last window before which every scheduled window is released, so finding the next due window costs a
few reads however long the deployment has run.

A window ``[start, end)`` is *closable* when ``end <= watermarks.global``: ingest guarantees that no
further event is counted into it. What a release reads of it -- only what each release type needs -- is
:mod:`stream_dp.release.window_counts`' (:class:`WindowReader` extends its reader).

After its releases are published, :meth:`WindowReader.mark_released` deletes the window's bounding log,
sets the retention TTL on its other keys, sets ``meta.state = "released"`` and records the window in the release worker's own index
(``Keys.release_index("released")``) -- atomically, and only while the caller still holds the window's claim
(fencing, see :mod:`stream_dp.release.claim`).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from stream_dp.node_batches import Pending, Reads, run_batched
from stream_dp.release.key_drain import KeyShardDrain
from stream_dp.replication import NO_REPLICATION, ReplicationPolicy
from stream_dp.release.window_counts import (LOG_READ_BYTES, READ_CHUNK, WindowCounts, WindowCountsReader,
                                             WindowLogShort)
from stream_dp.schedule import ReleaseSchedule
from stream_dp.store import scripts, window_state
from stream_dp.store.keys import Keys

__all__ = ["LOG_READ_BYTES", "READ_CHUNK", "Window", "WindowCounts", "WindowLogShort", "WindowReader"]

GUESSED_WINDOWS = 4  # windows after the last seen cursor whose released marks closable() reads with the watermark
UNSEEN = object()  # WindowReader._cursor_seen before the first read
_RELEASED = window_state.RELEASED.encode()  # meta "state" as Redis returns it


@dataclass(frozen=True)
class Window:
    """One tumbling event-time window ``[start, end)`` (integer epoch seconds)."""

    start: int
    end: int

    @property
    def label(self) -> str:
        """``"<start>-<end>"``, the prefix of every release id of this window."""
        return f"{self.start}-{self.end}"



class WindowReader(WindowCountsReader):
    """Ingest's windows as the release worker sees them: which are due (on the public schedule), the counts
    a release reads (:class:`~stream_dp.release.window_counts.WindowCountsReader`), and the "released" mark."""

    def __init__(self, client: redis.Redis, *, keys: Keys, size_seconds: int, read_chunk: int = READ_CHUNK,
                 schedule: ReleaseSchedule | None = None) -> None:
        super().__init__(client, keys=keys, read_chunk=read_chunk)
        self.size = size_seconds
        self.schedule = schedule or ReleaseSchedule(0, size_seconds)
        if self.schedule.size != size_seconds:
            raise ValueError(f"schedule window size {self.schedule.size} != windows.size_seconds {size_seconds}")
        self._cursor_seen: int | None | object = UNSEEN  # the released_through cursor as last read or moved
        self._mark = scripts.register(client, "mark_released")
        self._mark_fence = scripts.register(client, "mark_released_fence")
        self._release_shard = scripts.register(client, "release_one_shard")
        self._cursor = scripts.register(client, "advance_released_cursor")
        self._drain = KeyShardDrain(client, keys=keys) if keys.layout == "key" else None

    @property
    def scripts(self) -> tuple:
        """The reader's Lua scripts (loaded when the worker starts, :func:`~stream_dp.node_batches.load_scripts`)."""
        drain = self._drain.scripts if self._drain is not None else ()
        return (self._mark, self._mark_fence, self._release_shard, self._cursor, *drain, *super().scripts)

    def make_final(self, window: Window, replication: ReplicationPolicy = NO_REPLICATION) -> int:
        """Before any read of a closed window's counts: in the key layout, every increment ingest left pending
        counted into its key shards (:meth:`KeyShardDrain.drain <stream_dp.release.key_drain.KeyShardDrain.drain>`,
        idempotent, confirmed on ``replication.replicas`` replicas; the number of entries it sent). Nothing
        to do in the user layout (counted in step 1)."""
        return self._drain.drain(window, replication) if self._drain is not None else 0

    # --- which windows ---------------------------------------------------------------------------
    def global_watermark(self) -> float | None:
        """Ingest's global watermark (epoch seconds), or None before ingest has set one."""
        raw = self.r.hget(self.keys.watermarks(), "global")
        return None if raw is None else float(raw)

    def window(self, start: int) -> Window:
        return Window(start, start + self.size)

    def next_guess(self) -> int | None:
        """The start of the window :meth:`closable` will most likely return first (the first scheduled window
        after the cursor this reader last saw), or None before the first read: a guess, for callers that
        want to send a window's first step with the poll (:meth:`closable`'s ``also``)."""
        guessed = self._guessed(1)
        return guessed[0] if guessed else None

    def _guessed(self, n: int) -> list[int]:
        """The next ``n`` scheduled windows after the cursor this reader last saw (none before it saw one)."""
        if self._cursor_seen is UNSEEN:
            return []
        return self.schedule.closed_windows(after=self._cursor_seen, watermark=float("inf"), limit=n)  # type: ignore[arg-type]

    def closable(self, *, limit: int = 100, also: Reads | None = None, also_result: Pending | None = None,
                 first: Reads | None = None) -> list[Window]:
        """Scheduled windows with ``end <= watermark.global`` not yet released, oldest first (at most
        ``limit``): from the ``released_through`` cursor on, skipping windows already released out of order
        (e.g. after a crash between the released mark and the cursor's move).

        One round trip when the cursor is where this reader last saw (or moved) it and the closed windows
        are among the next :data:`GUESSED_WINDOWS` after it: their released marks come with the watermark
        and the cursor. Otherwise one more ``ZMSCORE`` per batch of windows. ``also``: independent reads (or
        idempotent-enough writes) sent in that first round trip; their parsed result lands in ``also_result``.
        ``first``: reads sent ahead of everything else in that round trip -- the worker's blocking wait for a
        close notice (:mod:`stream_dp.release.wakeup`), which Redis answers before it runs what follows."""
        marks, cursor_key = self.keys.watermarks(), self.keys.release_index("released_through")
        index = self.keys.release_index("released")
        items = [(marks, lambda pipe: pipe.hget(marks, "global")), (cursor_key, lambda pipe: pipe.get(cursor_key))]
        # the released marks of the next few windows after the cursor this reader last saw, in the same round
        # trip (a guess: when the cursor or the closed windows turn out otherwise, they are read again)
        guessed = self._guessed(GUESSED_WINDOWS)
        if guessed:
            items.append((index, lambda pipe: pipe.zmscore(index, [str(s) for s in guessed])))
        extra = also.items if also is not None else []
        lead = first.items if first is not None else []
        replies = run_batched(self.r, lead + items + extra)  # one round trip
        if first is not None:
            first.parse(replies[:len(lead)])
            replies = replies[len(lead):]
        if also is not None and also_result is not None:
            also_result.value, also_result.done = also.parse(replies[len(items):]), True
        raw_wm, raw, *guessed_marks = replies[:len(items)]
        cursor = None if raw is None else int(raw)
        self._cursor_seen = cursor
        if raw_wm is None:
            return []
        wm = float(raw_wm)
        out: list[Window] = []
        while len(out) < limit:
            starts = self.schedule.closed_windows(after=cursor, watermark=wm, limit=limit + 200)
            if not starts:
                break
            if guessed_marks and starts == guessed[:len(starts)]:
                released = guessed_marks[0][:len(starts)]
            else:
                released = self.r.zmscore(index, [str(s) for s in starts])
            guessed_marks = []
            out.extend(self.window(s) for s, done in zip(starts, released) if done is None)
            cursor = starts[-1]
        return out[:limit]

    def release_state(self, window: Window) -> Reads:
        """:meth:`is_released` and :meth:`closed_at` as one batch of reads (``.now()``: one round trip on a
        single Redis, one per master on a cluster; or in a batch with others), parsing to ``(released,
        closed_at)``. Read under the window's claim: the released mark is fenced by that claim, so it cannot
        change while the caller holds it."""
        k = self.keys
        released_index, meta, marker = k.release_index("released"), k.window_meta(window.start), k.window_released(window.start)
        items = [(released_index, lambda pipe: pipe.zscore(released_index, str(window.start))),
                 (meta, lambda pipe: pipe.hmget(meta, ["state", "closed_at"]))]
        if k.shards > 1:
            items.append((marker, lambda pipe: pipe.exists(marker)))

        def parse(replies: list) -> tuple[bool, float | None]:
            in_index, (state, closed), *rest = replies
            released = in_index is not None or state == _RELEASED or bool(rest and rest[0])
            return released, None if closed is None else float(closed)

        return Reads(items, parse, client=self.r)

    def closed_at(self, window: Window) -> float | None:
        """When ingest closed the window, if it recorded it (meta ``closed_at``), else None."""
        raw = self.r.hget(self.keys.window_meta(window.start), "closed_at")
        return None if raw is None else float(raw)

    # --- after publishing ------------------------------------------------------------------------
    def mark_released(self, window: Window, *, claim_key: str, token: str, retention_seconds: int) -> bool:
        """Set retention TTLs and ``state = released`` if ``token`` still holds the claim; record it.

        Returns False (and changes nothing) when the claim was lost -- another worker owns the window now.
        """
        k = self.keys
        if k.shards == 1:
            ok = self._mark(
                keys=[claim_key, k.window_meta(window.start), k.window_counts(window.start),
                      k.window_users(window.start), k.window_offsets(window.start)],
                args=[token, int(retention_seconds)],
            )
        else:
            # the fenced step (claim and released marker share {w:<start>}), then every shard: after a crash
            # in between, is_released() sees the marker and the worker runs finish_released()
            ok = self._mark_fence(keys=[claim_key, k.window_released(window.start)],
                                  args=[token, int(retention_seconds)])
        self.forget(window)
        if not ok:
            return False
        self.finish_released(window, retention_seconds=retention_seconds)
        return True

    def finish_released(self, window: Window, *, retention_seconds: int) -> None:
        """The steps after the fenced one, all idempotent (also run for a window found released, to finish
        what a crash interrupted): release every shard (sharded windows) and, in the key layout, every key
        shard (a late step 2 then counts nothing) with its pending entries dropped; record the window in the
        worker's index, move the cursor, drop it from ingest's index."""
        k = self.keys
        if k.shards > 1:
            for shard in range(k.shards):
                self._release_shard(keys=[k.window_meta(window.start, shard), k.window_counts(window.start, shard),
                                          k.window_users(window.start, shard), k.window_offsets(window.start, shard)],
                                    args=[int(retention_seconds)])
        if self._drain is not None:
            self._drain.release(window, retention_seconds=retention_seconds)
        # The worker's own index lives in another slot; adding to it after the fenced step is idempotent
        # (the cursor script records the window, then moves the cursor: one round trip).
        # Then drop the window from ingest's index of windows: it is closed (end <= global watermark), so
        # ingest never needs it again, and the index stays as small as the windows still open or pending.
        # A crash before that leaves it listed but marked released, which closable() skips. Both steps are
        # idempotent and independent: sent as one batch (the script by its SHA; loaded first if Redis lacks it).
        cursor_keys = [k.release_index("released_through"), k.release_index("released")]
        cursor_args = [self.schedule.start, self.size, 1000, window.start]
        windows_index = k.windows_index()
        try:
            moved, _ = run_batched(self.r, [
                (cursor_keys[0], lambda pipe: pipe.evalsha(self._cursor.sha, len(cursor_keys), *cursor_keys, *cursor_args)),
                (windows_index, lambda pipe: pipe.zrem(windows_index, str(window.start)))])
        except redis.exceptions.NoScriptError:  # a restarted or flushed Redis: the script call loads it
            moved = self._cursor(keys=cursor_keys, args=cursor_args)
            self.r.zrem(windows_index, str(window.start))
        self._cursor_seen = None if moved is None else int(moved)

    def is_released(self, window: Window) -> bool:
        """Released: in the worker's index, or its meta says so (a crash between the two steps)."""
        if self.r.zscore(self.keys.release_index("released"), str(window.start)) is not None:
            return True
        if self.keys.shards > 1 and self.r.exists(self.keys.window_released(window.start)):
            return True
        return self.r.hget(self.keys.window_meta(window.start), "state") == _RELEASED
