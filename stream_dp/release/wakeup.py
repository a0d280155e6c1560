"""Wake the release worker when a window closes, instead of at its next poll.

Ingest adds an entry to a Redis stream (:meth:`~stream_dp.keys.Keys.window_closes`) in the same script that
installs a global watermark past the end of a scheduled window (``ingest/lua/finalize_watermark.lua``). A
worker whose last pass found nothing to do starts its next pass with a blocking read of that stream
(``XREAD BLOCK``, at most ``release.poll_interval_seconds``) *in the pass's first round trip*: Redis holds
the reply until an entry arrives or the time is up, then runs the pass's reads right behind it on the same
connection (the watermark is in the stream's slot, so it is always read after the entry). A window is thus
claimed milliseconds after the watermark passes its end, with no round trip added; the poll interval stays
the fallback (an entry trimmed or never written) and the longest a stop request waits.

No entry is ever missed between passes: the worker remembers the newest entry it has read (at start: the
newest in the stream) and reads every entry after it, so a window closed while a pass ran makes the next
read return at once. Entries carry only the watermark, which is inside the trusted boundary (docs/privacy.md
§7), and waking earlier changes no record: which windows are released and what they hold is decided by the
pass, exactly as after a poll.
"""

from __future__ import annotations

from typing import Any

import redis

from stream_dp.keys import Keys
from stream_dp.node_batches import Reads

#: Longest blocking read, as a share of the Redis client's socket timeout (a longer one would time out).
SOCKET_TIMEOUT_SHARE = 0.8


class WindowCloses:
    """The worker's view of ingest's close notices: where it has read up to, and the blocking read to start
    a pass with."""

    def __init__(self, client: redis.Redis, keys: Keys, *, max_block_seconds: float) -> None:
        self._client = client
        self._key = keys.window_closes()
        self._max_block = max_block_seconds
        self._last: str | None = None  # id of the newest entry read; None until start()

    def start(self) -> None:
        """Remember the newest entry now: entries before it are windows the first pass will see anyway."""
        newest = self._client.xrevrange(self._key, count=1)
        self._last = _text(newest[0][0]) if newest else "0-0"

    def wait_reads(self, seconds: float) -> Reads:
        """A blocking read of the entries after the newest one read (at most ``seconds``, capped so the
        connection's socket timeout is not reached), to go *first* in a pass's first round trip; parses to
        whether an entry came (and remembers the newest)."""
        if self._last is None:
            self.start()
        key, after = self._key, self._last or "0-0"  # start() set it
        block_ms = max(1, int(min(seconds, self._max_block) * 1000))  # BLOCK 0 would wait for ever
        return Reads([(key, lambda pipe: pipe.xread({key: after}, count=64, block=block_ms))], self._consume)

    def _consume(self, replies: list[Any]) -> bool:
        entries = _entries(replies[0])
        if entries:
            self._last = _text(entries[-1][0])
        return bool(entries)


def _entries(reply: object) -> list:
    """The entries of an ``XREAD`` reply for one stream (RESP2 list or RESP3 map), oldest first."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return next(iter(reply.values()))[0]
    return reply[0][1]  # type: ignore[index]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
