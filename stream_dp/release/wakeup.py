"""Wake the release worker when a window closes, instead of at its next poll.

Ingest adds an entry to a Redis stream (:meth:`~stream_dp.keys.Keys.window_closes`) in the same script that
installs a global watermark past the end of a scheduled window (``ingest/lua/finalize_watermark.lua``). The
worker, with nothing to release, blocks on that stream for at most ``release.poll_interval_seconds``: a
window is then claimed milliseconds after the watermark passes its end, not up to a poll interval later;
the poll interval stays the fallback (a lost or missed entry, an older ingest) and the cap on how long a
worker waits.

No entry is ever missed between a pass and the wait: the worker remembers the newest entry it has seen (at
start: the newest in the stream) and reads every entry after it, so a window closed while a pass ran wakes
the next wait at once (a pass that finds nothing costs one round trip). Entries carry only the watermark,
which is inside the trusted boundary (docs/privacy.md §7), and waking earlier changes no record: which
windows are released and what they hold is decided by the pass, exactly as after a poll.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from stream_dp.keys import Keys

log = logging.getLogger(__name__)

#: Longest single blocking read: a stop request is noticed within this long even with a long poll interval.
MAX_BLOCK_SECONDS = 0.25


class WindowCloses:
    """The worker's wait between passes: returns early when ingest reports a window closed."""

    def __init__(self, client: redis.Redis, keys: Keys, *, max_block_seconds: float = MAX_BLOCK_SECONDS) -> None:
        self._client = client
        self._key = keys.window_closes()
        self._max_block = max_block_seconds
        self._last: str | None = None  # id of the newest entry seen; None until start()
        #: set while the worker waits for a close (between passes); for tests and the benchmark
        self.waiting = threading.Event()

    def start(self) -> None:
        """Remember the newest entry now: entries before it are windows the first pass will see anyway."""
        newest = self._client.xrevrange(self._key, count=1)
        self._last = _text(newest[0][0]) if newest else "0-0"

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Block until a window closes after the newest entry seen (True), ``seconds`` pass or ``stop`` is set
        (False). Redis unreachable: waits out the rest like a poll (the next pass reports the error)."""
        if self._last is None:
            self.start()
        deadline = time.monotonic() + seconds
        self.waiting.set()
        try:
            while not stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                block_ms = max(1, int(min(left, self._max_block) * 1000))
                try:
                    reply = self._client.xread({self._key: self._last}, count=64, block=block_ms)
                except (redis.RedisError, OSError) as exc:
                    log.debug("waiting for a window close failed (%s); waiting out the poll interval",
                              type(exc).__name__)
                    stop.wait(max(0.0, deadline - time.monotonic()))
                    return False
                entries = _entries(reply)
                if entries:
                    self._last = _text(entries[-1][0])
                    return True
            return False
        finally:
            self.waiting.clear()


def _entries(reply: object) -> list:
    """The entries of an ``XREAD`` reply for one stream (RESP2 list or RESP3 map), oldest first."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return next(iter(reply.values()), [[]])[0] if reply else []
    return reply[0][1]  # type: ignore[index]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
