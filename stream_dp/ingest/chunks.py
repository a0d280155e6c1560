"""What one apply exchanges with Redis: the chunks a batch is cut into, the apply script's header, what applying
a chunk came to, and the refused ranges a full shard records.

A *chunk* is one batch's events of one (window, partition) -- and, with ``windows.shards`` S > 1, of one
window shard (:func:`split_by_shard`): the unit ``store/lua/apply_window.lua`` applies atomically, bounding
log, increments, metadata and offset record together (:mod:`stream_dp.ingest.store` sends it;
docs/ingest.md "Redis layout"). Values only, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stream_dp.store.bounding_log import LOG_SEGMENT_BYTES
from stream_dp.store.keys import shard_of

#: Default of ``windows.max_shard_log_bytes`` (``windows.log_segment_bytes``: :mod:`stream_dp.store.bounding_log`).
MAX_SHARD_LOG_BYTES = 4 << 30


@dataclass(frozen=True)
class ApplyHeader:
    """The named arguments of ``store/lua/apply_window.lua`` (its ARGV[1], JSON, version 1); the log record and
    the increments follow as ARGV[2..4]. Numbers that Redis stores (offsets, window bounds) travel as
    strings: Lua would print a large number in exponent form."""

    start: int
    end: int
    partition: int
    closed_through: str  # the caller's global watermark ("-inf": none); the window is late when end <= it
    known_late: bool = False  # the caller already knows the window closed: record nothing, report the offsets
    token_before: str = ""
    token: str = ""
    log_bytes_before: int = 0
    last_offset: int = -1
    applied: int = 0
    bounded: int = 0
    most: int = 0  # most log bytes in a stale reply (0 = all)
    segment_bytes: int = LOG_SEGMENT_BYTES
    capacity: int = MAX_SHARD_LOG_BYTES
    pending: bool = False  # layout "key": record the increments in the user shard's pending hash (KEYS[5])

    def encode(self) -> str:
        return json.dumps({"v": 1, "start": str(self.start), "end": str(self.end), "partition": self.partition,
                           "closed_through": self.closed_through, "known_late": self.known_late,
                           "token_before": self.token_before, "token": self.token,
                           "log_bytes_before": self.log_bytes_before, "last_offset": str(self.last_offset), "applied": self.applied, "bounded": self.bounded,
                           "most": self.most, "segment_bytes": self.segment_bytes, "capacity": self.capacity,
                           "pending": self.pending},
                          separators=(",", ":"))


@dataclass(frozen=True)
class Chunk:
    """The events of one batch for one (window, partition): ``(offset, user, key)`` in increasing offset
    order."""

    start: int
    partition: int
    events: Sequence[tuple[int, str, str]]
    closed: bool = False  # known closed (registration refused): only sort duplicates from late events
    shard: int = 0  # the window shard of every user of the chunk (set by WindowStore.apply)

    @classmethod
    def of(cls, start: int, partition: int, events: Iterable[tuple[int, str, str]], *,
           closed: bool = False) -> "Chunk":
        """A chunk from ``(offset, user, key)`` tuples in offset order (users of any shard)."""
        return cls(start, partition, events if isinstance(events, list) else list(events), closed=closed)


@dataclass(frozen=True)
class ChunkResult:
    applied: int = 0
    duplicate: int = 0
    linf: int = 0
    l0: int = 0
    late: int = 0
    replanned: int = 0  # times the chunk was refused as stale (another writer got there first) and planned again
    full: tuple[int, ...] = ()  # offsets of events not counted: their (window, shard) is at capacity

    def __add__(self, other: "ChunkResult") -> "ChunkResult":
        return ChunkResult(self.applied + other.applied, self.duplicate + other.duplicate, self.linf + other.linf,
                           self.l0 + other.l0, self.late + other.late, self.replanned + other.replanned,
                           tuple(sorted(self.full + other.full)))


def split_by_shard(chunks: Sequence[Chunk], shards: int) -> tuple[list[Chunk], list[int]]:
    """Each chunk split into one chunk per window shard of its users (offset order kept), and for each
    piece the index of the chunk it came from."""
    if shards == 1:
        return list(chunks), list(range(len(chunks)))
    pieces: list[Chunk] = []
    origin: list[int] = []
    for i, ch in enumerate(chunks):
        by: dict[int, list[tuple[int, str, str]]] = {}
        for ev in ch.events:
            by.setdefault(shard_of(ev[1], shards), []).append(ev)
        for shard in sorted(by):
            pieces.append(Chunk(ch.start, ch.partition, by[shard], closed=ch.closed, shard=shard))
            origin.append(i)
    return pieces, origin


def parse_full_ranges(raw: str) -> list[tuple[int, int]]:
    """A meta ``full:<partition>`` value, ``"lo:hi,lo:hi"``, as ``(lo, hi)`` pairs: offsets in ``(lo, hi]``
    were refused as full (``store/lua/apply_window.lua``)."""
    out = []
    for part in raw.split(","):
        lo, _, hi = part.partition(":")
        out.append((int(lo), int(hi)))
    return out


def reply_text(raw: object) -> str:
    """A Redis reply value (bytes, a string or None) as text; None is ``""``."""
    if isinstance(raw, bytes):
        return raw.decode()
    return "" if raw is None else str(raw)
