"""The Redis side of ingest: apply bounded increments exactly once, and keep the global watermark.

Layout (``stream_dp.keys``; the contract in INTERFACES.md, read concurrently by the release worker):

- per window ``{w:<start>}``: ``counts`` (ZSET key → distinct bounded users), ``users`` (bounding state),
  ``offsets`` (HASH partition → highest applied offset), ``meta`` (HASH start, end, state, events_applied,
  events_bounded; state ``open`` → ``closed`` by ingest → ``released`` by the release worker);
- ``{ingest}``: ``windows`` (ZSET of window starts) and ``watermarks`` (HASH: per-partition watermarks,
  ``seen:<partition>`` activity times, ``global``, and ``closing`` while a new global is being installed).

**Exactly-once effect.** A batch is split into (window, partition) chunks; each chunk's bounding,
increments, metadata and its offset record are one Lua script over one hash tag, so a chunk is applied
completely or not at all. Events at or below the recorded offset are skipped, so replaying any prefix of
the log (after a crash, a rebalance, a failed commit) changes nothing. Kafka offsets are committed only
after every chunk of the batch was applied.

**Closing windows without a race.** A global watermark is installed in three steps: (1) one script on
``{ingest}`` computes the target and records it as ``closing`` — from then on no window the target covers
can be registered; it returns the indexed windows the target closes; (2) each is marked ``closed`` in its
own hash tag, after which the apply script refuses it; (3) ``global`` is set. So when a reader sees
``global``, every window with ``end <= global`` is already closed to writers, whichever worker raced.
A crash between the steps leaves ``closing`` set; the next advance by any worker completes it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis

from stream_dp.keys import Keys


def _script(name: str) -> str:
    return importlib.resources.files("stream_dp.ingest").joinpath("lua", name).read_text()


@dataclass(frozen=True)
class Chunk:
    """The events of one batch for one (window, partition) as three columns in increasing offset order
    (``offsets[i]``, ``users[i]``, ``keys[i]`` are one event). :meth:`of` builds one from event tuples."""

    start: int
    partition: int
    offsets: Sequence[int]
    users: Sequence[str]
    keys: Sequence[str]
    closed: bool = False  # known closed (registration refused): only sort duplicates from late events

    @classmethod
    def of(cls, start: int, partition: int, events: Iterable[tuple[int, str, str]], *,
           closed: bool = False) -> "Chunk":
        """A chunk from ``(offset, user, key)`` tuples in offset order."""
        cols = tuple(zip(*events)) or ((), (), ())
        return cls(start, partition, cols[0], cols[1], cols[2], closed=closed)


@dataclass(frozen=True)
class ChunkResult:
    applied: int = 0
    duplicate: int = 0
    linf: int = 0
    l0: int = 0
    late: int = 0


@dataclass(frozen=True)
class WatermarkState:
    """After an advance: the global watermark (None before the first), the windows still open."""

    global_watermark: float | None
    closing_through: float | None
    windows_open: int
    windows_closed: tuple[int, ...] = ()


class WindowStore:
    """Window counts, bounding state, applied offsets and watermarks in Redis."""

    def __init__(self, client: redis.Redis, *, keys: Keys, window_size: int, unit: str = "user",
                 max_keys_per_user: int = 5) -> None:
        if window_size < 1:
            raise ValueError(f"windows.size_seconds must be >= 1, got {window_size}")
        if unit not in ("user", "event"):
            raise ValueError(f"contribution.unit must be 'user' or 'event', got {unit!r}")
        if max_keys_per_user < 1:
            raise ValueError(f"contribution.max_keys_per_user must be >= 1, got {max_keys_per_user}")
        self.client = client
        self.keys = keys
        self.window_size = window_size
        self.unit = unit
        self.max_keys_per_user = max_keys_per_user
        self._apply = client.register_script(_script("apply_window.lua"))
        self._register = client.register_script(_script("register_windows.lua"))
        self._advance = client.register_script(_script("advance_watermark.lua"))
        self._close = client.register_script(_script("close_window.lua"))
        self._finalize = client.register_script(_script("finalize_watermark.lua"))

    # --- applying events -------------------------------------------------------------------------
    def window_keys(self, start: int) -> list[str]:
        k = self.keys
        return [k.window_counts(start), k.window_users(start), k.window_offsets(start), k.window_meta(start)]

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

    def apply(self, chunks: Sequence[Chunk], *, closed_through: float | None) -> list[ChunkResult]:
        """Apply chunks (one script each, one pipelined round trip); raises redis errors unchanged.

        ``closed_through`` is the caller's latest view of the global watermark: a chunk of a window with
        ``end <= closed_through`` is late whatever its state in Redis says.
        """
        if not chunks:
            return []
        closed = "-inf" if closed_through is None else repr(float(closed_through))
        script = self._apply

        def pipeline() -> redis.client.Pipeline:
            # EVALSHA directly: a pipeline of Script calls would first ask SCRIPT EXISTS (a round trip)
            pipe = self.client.pipeline(transaction=False)
            for ch in chunks:
                pipe.evalsha(script.sha, 4, *self.window_keys(ch.start), ch.start, ch.start + self.window_size,
                             ch.partition, self.unit, self.max_keys_per_user, "1e308" if ch.closed else closed,
                             ",".join(map(str, ch.offsets)), "\0".join(ch.users), "\0".join(ch.keys))
            return pipe

        try:
            replies = pipeline().execute()
        except redis.exceptions.NoScriptError:
            # Redis restarted or flushed its scripts: load and send again (a chunk that did run before the
            # flush is skipped by its offset record)
            self.client.script_load(script.script)
            replies = pipeline().execute()
        return [ChunkResult(*map(int, r)) for r in replies]

    # --- watermarks ------------------------------------------------------------------------------
    def advance_watermark(self, owned: dict[int, tuple[float | None, bool]], *, known_partitions: Iterable[int] = (),
                          idle_timeout: float, now: float | None = None) -> WatermarkState:
        """Record owned partitions' (watermark, busy) and install the next global watermark (all phases).

        ``known_partitions``: every partition of the topic (a partition never heard of starts its idle
        clock, holding the global back meanwhile). ``now`` overrides the Redis clock (tests).
        """
        known = sorted(set(known_partitions))
        args: list[object] = ["" if now is None else repr(float(now)), repr(float(idle_timeout)),
                              self.window_size, len(known), *known]
        for p, (wm, busy) in sorted(owned.items()):
            args += [p, "" if wm is None else repr(float(wm)), 1 if busy else 0]
        out = self._advance(keys=[self.keys.watermarks(), self.keys.windows_index()], args=args)
        target, current, open_count = _text(out[0]), _text(out[1]), int(out[2])
        to_close = tuple(int(s) for s in out[3:])
        if target and target != current:
            if to_close:
                pipe = self.client.pipeline(transaction=False)
                for start in to_close:
                    self._close(keys=[self.keys.window_meta(start)],
                                args=[start, start + self.window_size, target], client=pipe)
                pipe.execute()
            current = _text(self._finalize(keys=[self.keys.watermarks()], args=[target]))
            open_count = int(self.client.zcount(self.keys.windows_index(),
                                                f"({float(current) - self.window_size!r}", "+inf"))
        return WatermarkState(
            global_watermark=float(current) if current else None,
            closing_through=float(target) if target else None,
            windows_open=open_count,
            windows_closed=to_close,
        )

    def global_watermark(self) -> float | None:
        raw = self.client.hget(self.keys.watermarks(), "global")
        return float(raw) if raw is not None else None

    # --- reading (tests, tools) ------------------------------------------------------------------
    def counts(self, start: int) -> dict[str, int]:
        """All counts of one window (for tests and the curator only: never log or export these)."""
        return {k.decode(): int(v) for k, v in self.client.zrange(self.keys.window_counts(start), 0, -1,
                                                                  withscores=True)}

    def windows(self) -> list[int]:
        return [int(s) for s in self.client.zrange(self.keys.windows_index(), 0, -1)]

    def meta(self, start: int) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.client.hgetall(self.keys.window_meta(start)).items()}


def _text(raw: object) -> str:
    if isinstance(raw, bytes):
        return raw.decode()
    return "" if raw is None else str(raw)
