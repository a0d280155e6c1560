"""Reading closed windows from Redis (the window contract written by ingest), on the public schedule.

**Which windows** (DESIGN §2b): the release schedule (:mod:`stream_dp.schedule`) -- every window from the
recorded schedule start on, in order, once ``end <= watermarks.global`` -- *not* the windows that received
events. An empty window is released like any other (its counts are simply absent), so whether a window is
released never depends on whether one user's events exist. The worker keeps a cursor, ``released_through``,
the last window before which every scheduled window is released, so finding the next due window costs a
few reads however long the deployment has run.

A window ``[start, end)`` is *closable* when ``end <= watermarks.global``: ingest guarantees that no
further event is counted into it. The reader returns only what each release type needs:

- :meth:`WindowReader.top_counts` -- the top ``n`` counts (``ZREVRANGE``), for limited-domain top-k, which
  reads only the top k̄+1 (DR19 Algorithm 1);
- :meth:`WindowReader.counts_of` -- the counts of given (public, watched) keys (``ZMSCORE``), missing = 0;
- :meth:`WindowReader.count_histogram` -- how many keys have each count (a walk over the distinct counts,
  O(#distinct counts · log n) in Redis), and :meth:`WindowReader.members_at` -- the keys at given ranks,
  for weighted sampling, which reads only the keys it reports
  (:func:`stream_dp.release.sampling.sample_count_classes`);
- :meth:`WindowReader.all_counts` -- the whole window as numpy arrays, read in ``ZRANGE`` chunks, for
  the large-margin mechanism.

Counts are raw, per-key, and private: they stay in this process and go only into mechanisms.

After its releases are published, :meth:`WindowReader.mark_released` sets the retention TTL on every key of
the window, sets ``meta.state = "released"`` and records the window in the release worker's own index
(``Keys.release_index("released")``) -- atomically, and only while the caller still holds the window's claim
(fencing, see :mod:`stream_dp.release.claim`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import redis

from stream_dp.keys import Keys
from stream_dp.schedule import ReleaseSchedule

READ_CHUNK = 50_000  # members per ZRANGE round trip when reading a whole window
HISTOGRAM_CHUNK = 20_000  # distinct counts per Lua call when walking a window's count histogram
RANKS_CHUNK = 20_000  # ranks per Lua call when reading the members at given ranks


@dataclass(frozen=True)
class Window:
    """One tumbling event-time window ``[start, end)`` (integer epoch seconds)."""

    start: int
    end: int

    @property
    def label(self) -> str:
        """``"<start>-<end>"``, the prefix of every release id of this window."""
        return f"{self.start}-{self.end}"


@dataclass(frozen=True)
class WindowCounts:
    """A whole window: parallel arrays of keys (str) and counts (float64, distinct bounded users)."""

    keys: list[str]
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.keys, self.counts.tolist()))


_READ_CHUNK = """
-- KEYS[1]: window counts ; ARGV: first, last rank. Returns [member, score, member, score, ...] as JSON.
local flat = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
if #flat == 0 then return '[]' end
return cjson.encode(flat)
"""

_TOP = """
-- KEYS[1]: window counts ; ARGV[1]: last rank. The top members with scores, best first, as JSON.
local flat = redis.call('ZREVRANGE', KEYS[1], 0, ARGV[1], 'WITHSCORES')
if #flat == 0 then return '[]' end
return cjson.encode(flat)
"""

_COUNT_HISTOGRAM = """
-- KEYS[1]: window counts ; ARGV[1]: exclusive lower bound ('-inf' to start, else '(' .. score),
-- ARGV[2]: most distinct scores to return. Returns JSON [score, n, score, n, ...], ascending score:
-- each step finds the next distinct score (ZRANGEBYSCORE ... LIMIT 0 1) and counts its members (ZCOUNT),
-- both O(log n), so the walk never touches the members themselves.
local out = {}
local lo = ARGV[1]
for i = 1, tonumber(ARGV[2]) do
  local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #nxt == 0 then break end
  local s = nxt[2]
  out[#out + 1] = s
  out[#out + 1] = redis.call('ZCOUNT', KEYS[1], s, s)
  lo = '(' .. s
end
if #out == 0 then return '[]' end
return cjson.encode(out)
"""

_MEMBERS_AT = """
-- KEYS[1]: window counts ; ARGV: ranks (ZRANGE order). Returns JSON [member, score, ...], one pair per
-- rank ('' and '-1' for a rank past the end, which the caller reports as a changed window).
local out = {}
for i = 1, #ARGV do
  local r = redis.call('ZRANGE', KEYS[1], ARGV[i], ARGV[i], 'WITHSCORES')
  if #r == 0 then
    out[#out + 1] = ''
    out[#out + 1] = '-1'
  else
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
  end
end
if #out == 0 then return '[]' end
return cjson.encode(out)
"""

_MARK_RELEASED = """
-- KEYS: claim, meta, counts, users, offsets ; ARGV: token, retention_seconds
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'state', 'released')
local ttl = tonumber(ARGV[2])
for i = 2, #KEYS do
  if ttl > 0 then
    redis.call('EXPIRE', KEYS[i], ttl)
  else
    redis.call('DEL', KEYS[i])
  end
end
return 1
"""

_ADVANCE_CURSOR = """
-- KEYS[1]: released_through cursor ; KEYS[2]: released index ; ARGV: schedule start, window size, max steps
-- Moves the cursor over every consecutive released window after it. Returns the cursor (or false).
local size = tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '')
local nxt = cur and (cur + size) or tonumber(ARGV[1])
local moved = false
for _ = 1, tonumber(ARGV[3]) do
  if not redis.call('ZSCORE', KEYS[2], string.format('%d', nxt)) then break end
  cur, nxt, moved = nxt, nxt + size, true
end
if moved then redis.call('SET', KEYS[1], string.format('%d', cur)) end
return cur and string.format('%d', cur) or false
"""


class WindowReader:
    """Read-only view of ingest's windows, plus the release worker's "released" mark."""

    def __init__(self, client: redis.Redis, *, keys: Keys, size_seconds: int, read_chunk: int = READ_CHUNK,
                 schedule: ReleaseSchedule | None = None) -> None:
        if size_seconds < 1:
            raise ValueError(f"windows.size_seconds must be >= 1, got {size_seconds!r}")
        self.read_chunk = read_chunk
        self.r = client
        self.keys = keys
        self.size = size_seconds
        self.schedule = schedule or ReleaseSchedule(0, size_seconds)
        if self.schedule.size != size_seconds:
            raise ValueError(f"schedule window size {self.schedule.size} != windows.size_seconds {size_seconds}")
        self._mark = client.register_script(_MARK_RELEASED)
        self._chunk = client.register_script(_READ_CHUNK)
        self._cursor = client.register_script(_ADVANCE_CURSOR)
        self._histogram = client.register_script(_COUNT_HISTOGRAM)
        self._top = client.register_script(_TOP)
        self._members_at = client.register_script(_MEMBERS_AT)

    # --- which windows ---------------------------------------------------------------------------
    def global_watermark(self) -> float | None:
        """Ingest's global watermark (epoch seconds), or None before ingest has set one."""
        raw = self.r.hget(self.keys.watermarks(), "global")
        return None if raw is None else float(raw)

    def window(self, start: int) -> Window:
        return Window(start, start + self.size)

    def closable(self, *, limit: int = 100) -> list[Window]:
        """Scheduled windows with ``end <= watermark.global`` not yet released, oldest first (at most
        ``limit``): from the ``released_through`` cursor on, skipping windows already released out of order
        (e.g. after a crash between the released mark and the cursor's move)."""
        wm = self.global_watermark()
        if wm is None:
            return []
        raw = self.r.get(self.keys.release_index("released_through"))
        cursor = None if raw is None else int(raw)
        out: list[Window] = []
        while len(out) < limit:
            starts = self.schedule.closed_windows(after=cursor, watermark=wm, limit=limit + 200)
            if not starts:
                break
            released = self.r.zmscore(self.keys.release_index("released"), [str(s) for s in starts])
            out.extend(self.window(s) for s, done in zip(starts, released) if done is None)
            cursor = starts[-1]
        return out[:limit]

    def pending_count(self) -> int:
        """How many closable windows are not yet released (for the windows-pending gauge)."""
        return len(self.closable(limit=10_000))

    def closed_at(self, window: Window) -> float | None:
        """When ingest closed the window, if it recorded it (meta ``closed_at``), else None."""
        raw = self.r.hget(self.keys.window_meta(window.start), "closed_at")
        return None if raw is None else float(raw)

    # --- what a release reads --------------------------------------------------------------------
    def top_counts(self, window: Window, n: int) -> dict[str, float]:
        """The ``n`` largest counts, key → count, best first (ties: Redis' reverse lexicographic order).

        Read as one JSON reply (a read-only Lua ``ZREVRANGE``): redis-py's pure-Python parse of k̄+1 = 1001
        members with scores took ~5-10 ms, the JSON parse well under 1 ms.
        """
        flat = json.loads(self._top(keys=[self.keys.window_counts(window.start)], args=[n - 1]))
        return dict(zip(flat[0::2], map(float, flat[1::2])))

    def counts_of(self, window: Window, watched: list[str]) -> dict[str, float]:
        """Counts of the given public keys (0 for a key with no events)."""
        if not watched:
            return {}
        scores = self.r.zmscore(self.keys.window_counts(window.start), watched)
        return {k: (0.0 if s is None else float(s)) for k, s in zip(watched, scores)}

    def all_counts(self, window: Window, *, chunk: int | None = None) -> WindowCounts:
        """Every key of the window, read in ``ZRANGE`` chunks (bounded replies, bounded server time).

        Each chunk comes back as one JSON string built by a read-only Lua script (``cjson``), which the
        client parses in C: a pure-Python RESP parse of 10⁶ members and scores takes seconds. Members are
        in ``ZRANGE`` order (score, then member bytes), which is deterministic.
        """
        chunk = chunk or self.read_chunk
        name = self.keys.window_counts(window.start)
        keys: list[str] = []
        parts: list[np.ndarray] = []
        offset = 0
        while True:
            flat = json.loads(self._chunk(keys=[name], args=[offset, offset + chunk - 1]))
            if not flat:
                break
            keys.extend(flat[0::2])
            parts.append(np.array(flat[1::2], dtype=np.float64))
            if len(flat) < 2 * chunk:
                break
            offset += chunk
        counts = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
        return WindowCounts(keys, counts)

    def count_histogram(self, window: Window, *, chunk: int = HISTOGRAM_CHUNK) -> list[tuple[float, int]]:
        """``(count, number of keys with that count)`` for every distinct count of the window, ascending.

        Cost: O(#distinct counts · log n) in Redis, never proportional to the number of keys (a window of
        users' distinct counts has at most ~√(2·total) distinct counts). Walked in chunks of ``chunk``
        distinct counts per Lua call. An empty (or absent) window gives ``[]``.
        """
        name = self.keys.window_counts(window.start)
        out: list[tuple[float, int]] = []
        lower = "-inf"
        while True:
            flat = json.loads(self._histogram(keys=[name], args=[lower, chunk]))
            out.extend((float(s), int(n)) for s, n in zip(flat[0::2], flat[1::2]))
            if len(flat) < 2 * chunk:
                return out
            lower = "(" + flat[-2]

    def members_at(self, window: Window, ranks: np.ndarray, counts: np.ndarray, *,
                   chunk: int = RANKS_CHUNK) -> list[str]:
        """The keys at ``ranks`` (``ZRANGE`` order), checked to have ``counts``; O(log n) per rank.

        Raises ``RuntimeError`` when a rank is past the end or holds another count: the window changed
        after its histogram was read (a closed window never does -- ingest's contract).
        """
        name = self.keys.window_counts(window.start)
        keys: list[str] = []
        rank_list = [int(r) for r in ranks]
        want = np.asarray(counts, dtype=np.float64)
        for s in range(0, len(rank_list), chunk):
            flat = json.loads(self._members_at(keys=[name], args=rank_list[s:s + chunk]))
            got = np.array(flat[1::2], dtype=np.float64)
            if len(got) != len(rank_list[s:s + chunk]) or np.any(got != want[s:s + chunk]):
                raise RuntimeError(f"window {window.label} changed while it was being sampled "
                                   "(a closed window must not change)")
            keys.extend(flat[0::2])
        return keys

    def size_of(self, window: Window) -> int:
        """Number of distinct keys in the window."""
        return int(self.r.zcard(self.keys.window_counts(window.start)))

    # --- after publishing ------------------------------------------------------------------------
    def mark_released(self, window: Window, *, claim_key: str, token: str, retention_seconds: int) -> bool:
        """Set retention TTLs and ``state = released`` if ``token`` still holds the claim; record it.

        Returns False (and changes nothing) when the claim was lost -- another worker owns the window now.
        """
        k = self.keys
        ok = self._mark(
            keys=[claim_key, k.window_meta(window.start), k.window_counts(window.start),
                  k.window_users(window.start), k.window_offsets(window.start)],
            args=[token, int(retention_seconds)],
        )
        if not ok:
            return False
        # The worker's own index lives in another slot; adding to it after the fenced step is idempotent.
        self.r.zadd(k.release_index("released"), {str(window.start): window.start})
        self._cursor(keys=[k.release_index("released_through"), k.release_index("released")],
                     args=[self.schedule.start, self.size, 1000])
        # Then drop the window from ingest's index of windows: it is closed (end <= global watermark), so
        # ingest never needs it again, and the index stays as small as the windows still open or pending.
        # A crash before this line leaves it listed but marked released, which closable() skips.
        self.r.zrem(k.windows_index(), str(window.start))
        return True

    def is_released(self, window: Window) -> bool:
        """Released: in the worker's index, or its meta says so (a crash between the two steps)."""
        if self.r.zscore(self.keys.release_index("released"), str(window.start)) is not None:
            return True
        return self.r.hget(self.keys.window_meta(window.start), "state") == b"released"
