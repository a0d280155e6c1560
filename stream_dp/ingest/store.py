"""The Redis side of ingest: apply bounded increments exactly once, and keep the global watermark.

Layout (:mod:`stream_dp.store.keys`; the contract the release worker reads concurrently, docs/ingest.md "Redis layout"):

- per window shard (``{w:<start>}``, or ``{w:<start>:<shard>}`` with ``windows.shards`` S > 1; a user's
  events all go to shard :func:`~stream_dp.store.keys.shard_of`): ``counts`` (ZSET key → distinct bounded users
  of the shard; a key's window count is the sum over the shards), ``users`` (the bounding log: counted
  ``user\0key\0`` pairs in apply order, stored as STRING segments of at most ``windows.log_segment_bytes``),
  ``offsets`` (HASH partition → highest applied offset), ``meta`` (HASH start, end, state, events_applied,
  events_bounded, events_full, apply_token, log_bytes, log_segment_bytes; state ``open`` → ``closed`` by
  ingest → ``released`` by the release worker);
- ``{ingest}``: ``windows`` (ZSET of window starts) and ``watermarks`` (HASH: per-partition watermarks,
  ``seen:<partition>`` activity times, ``global``, and ``closing`` while a new global is being installed).

**Exactly-once effect.** A batch is split into (window, shard, partition) chunks; each chunk's bounding log,
increments, metadata and its offset record are one Lua script over one hash tag, so a chunk is applied
completely or not at all. Events at or below the recorded offset are skipped, so replaying any prefix of
the log (after a crash, a rebalance, a failed commit) changes nothing. Kafka offsets are committed only
after every chunk of the batch was applied.

**Bounding on a cache, checked by Redis.** The store bounds each chunk itself, on its cache of the window
(:class:`~stream_dp.ingest.bounding.WindowBounding`): the keys each user already has, the applied offsets,
how much of the log it has read, and ``apply_token``, the version of the window the cache reflects. The
script records the plan only if the window's ``apply_token`` and log length are still those (every apply
sets a new, unique token); otherwise it records nothing and returns what changed (the log since the
cache's length, the offsets, the token), and the store catches up and bounds the chunk again. So a plan
is never recorded on a state it was not made for — another worker's writes, a reply lost with the
connection, a restart with an empty cache — and Redis does one append and one ZINCRBY per distinct key
per chunk instead of evaluating the rule per event.

**Capacity, never Redis's limit.** No Redis value of a window outgrows ``log_segment_bytes`` (the log is
segmented; every count is a ZSET member), and a shard holds at most ``max_shard_log_bytes`` of log. A chunk
that would pass it is refused *with its offsets recorded* (reply ``full``): its events are not counted,
come back as ``window_shard_full`` rejects (dead letters, counted by reason) and a replay does not count
them, so a full shard never stops ingest in a loop. The refused offset ranges are kept too, so a replay
(a batch retried, or replayed after a crash, before its dead letters were written) reports those events
as full again and their dead letters are not lost. Below capacity the guarantee is exact; at capacity it is not
(docs/privacy.md "Capacity"), which is why the breach is a metric and an alert.

**Bounded cache.** The caches of all windows together hold at most ``cache_max_users`` users (about
230 B each; ``ingest.bounding_cache_max_users``): after each call, least recently used windows' caches are
dropped until the rest fit (the most recently used window always stays, so one window larger than the cap
is still cached: the cap is on the sum of the others). A dropped window is caught up again from Redis the
next time it gets events, by the very path a restart takes -- its fresh cache's plan is refused as stale and
the log is read back -- so counts stay exact; the cost is one re-read of that window's log. That catch-up
read is chunked: the stale reply carries at most ``catch_up_chunk_bytes`` of the log and the rest is read
with ``GETRANGE`` in pieces of that size, each absorbed before the next is read.

**Closing windows without a race.** A global watermark is installed in three steps: (1) one script on
``{ingest}`` computes the target and records it as ``closing`` — from then on no window the target covers
can be registered; it returns the indexed windows the target closes; (2) each is marked ``closed`` in its
own hash tag, after which the apply script refuses it; (3) ``global`` is set. So when a reader sees
``global``, every window with ``end <= global`` is already closed to writers, whichever worker raced.
A crash between the steps leaves ``closing`` set; the next advance by any worker completes it.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import redis
from redis.client import Pipeline

from stream_dp.errors import StreamDPError
from stream_dp.ingest.bounding import ChunkPlan, WindowBounding, applied_prefix
from stream_dp.node_batches import is_cluster, run_batched
from stream_dp.replication import NO_REPLICATION, ReplicationPolicy, write_then_wait
from stream_dp.store import scripts
from stream_dp.store.bounding_log import LOG_SEGMENT_BYTES, log_pieces
from stream_dp.store.keys import Keys, shard_of

#: Rounds of "refused as stale → absorb → plan again" before :meth:`WindowStore.apply` gives up.
MAX_STALE_ROUNDS = 50
#: Most bounding-log bytes one catch-up read brings (the stale reply's tail, then each GETRANGE).
CATCH_UP_CHUNK_BYTES = 4 << 20
#: Default of ``windows.max_shard_log_bytes`` (``windows.log_segment_bytes``: :mod:`stream_dp.store.bounding_log`).
MAX_SHARD_LOG_BYTES = 4 << 30


class StaleBoundingState(RuntimeError, StreamDPError):
    """Other writers kept changing a window's bounding state faster than this worker could plan on it."""


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

    def encode(self) -> str:
        return json.dumps({"v": 1, "start": str(self.start), "end": str(self.end), "partition": self.partition,
                           "closed_through": self.closed_through, "known_late": self.known_late,
                           "token_before": self.token_before, "token": self.token,
                           "log_bytes_before": self.log_bytes_before, "last_offset": str(self.last_offset), "applied": self.applied, "bounded": self.bounded,
                           "most": self.most, "segment_bytes": self.segment_bytes, "capacity": self.capacity},
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
                 max_keys_per_user: int = 5, cache_max_users: int | None = None,
                 catch_up_chunk_bytes: int = CATCH_UP_CHUNK_BYTES, log_segment_bytes: int = LOG_SEGMENT_BYTES,
                 max_shard_log_bytes: int = MAX_SHARD_LOG_BYTES,
                 replication: ReplicationPolicy = NO_REPLICATION) -> None:
        self.replication = replication  # WAIT for this many replicas after each apply (redis.min_replicas_acked)
        # every range (window size, Δ, unit, cache and byte bounds) is checked by the config (stream_dp.config)
        self.log_segment_bytes = log_segment_bytes
        self.max_shard_log_bytes = max_shard_log_bytes
        self.cache_max_users = cache_max_users
        self.catch_up_chunk_bytes = catch_up_chunk_bytes
        self.evictions = 0  # window caches dropped to stay under cache_max_users
        self.catch_up_reads = 0  # GETRANGE reads of a bounding log beyond a stale reply's first chunk
        self.client = client
        self.keys = keys
        self.window_size = window_size
        self.unit = unit
        self.max_keys_per_user = max_keys_per_user
        self._apply = scripts.register(client, "apply_window")
        self._register = scripts.register(client, "register_windows")
        self._advance = scripts.register(client, "advance_watermark")
        self._close = scripts.register(client, "close_window")
        self._finalize = scripts.register(client, "finalize_watermark")
        # (window start, shard) -> cache of its bounding state, least recently used first
        self._bounding: OrderedDict[tuple[int, int], WindowBounding] = OrderedDict()
        self._id = os.urandom(6).hex()  # makes this store's apply tokens unique
        self._tokens = 0

    # --- applying events -------------------------------------------------------------------------
    def window_keys(self, start: int, shard: int = 0) -> list[str]:
        k = self.keys
        return [k.window_counts(start, shard), k.window_users(start, shard), k.window_offsets(start, shard),
                k.window_meta(start, shard)]

    def split_by_shard(self, chunks: Sequence[Chunk]) -> tuple[list[Chunk], list[int]]:
        """Each chunk split into one chunk per window shard of its users (offset order kept), and for each
        piece the index of the chunk it came from."""
        shards = self.keys.shards
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
        """Bound and apply chunks (one script each, pipelined); raises redis errors unchanged.

        ``closed_through`` is the caller's latest view of the global watermark: a chunk of a window with
        ``end <= closed_through`` is late whatever its state in Redis says. Chunks of one (window,
        partition) must come in offset order, here and across calls.

        Each chunk is bounded on this store's cache of its window (:class:`WindowBounding`) and recorded
        only if the window is still in the state the cache was made for; a chunk refused as stale is
        planned again on the absorbed changes and resent (up to :data:`MAX_STALE_ROUNDS` rounds). When the
        call raises, every plan not known to be applied is rolled back: the next call finds out from Redis.

        With S > 1 shards each chunk is split by the shard of its users and each piece applied atomically on
        its own (window, shard); the result of a chunk is the sum of its pieces'.
        """
        if self.keys.shards == 1:
            return self._apply_pieces(chunks, closed_through)
        pieces, origin = self.split_by_shard(chunks)
        out = [ChunkResult() for _ in chunks]
        for i, r in zip(origin, self._apply_pieces(pieces, closed_through)):
            out[i] = out[i] + r
        return out

    def _apply_pieces(self, chunks: Sequence[Chunk], closed_through: float | None) -> list[ChunkResult]:
        """:meth:`apply` of chunks each of one (window, shard)."""
        results: list[ChunkResult | None] = [None] * len(chunks)
        closed = "-inf" if closed_through is None else repr(float(closed_through))
        pending = list(range(len(chunks)))
        refused = [0] * len(chunks)
        for _ in range(MAX_STALE_ROUNDS):
            pending = self._apply_round(chunks, pending, results, closed_through, closed)
            if not pending:
                self._enforce_cache_cap()
                done = [replace(r, replanned=n) if n else r  # type: ignore[type-var]
                        for r, n in zip(results, refused)]
                return self._full_again(chunks, done)
            for i in pending:
                refused[i] += 1
        starts = sorted({chunks[i].start for i in pending})
        shards = sorted({chunks[i].shard for i in pending})
        raise StaleBoundingState(f"windows {starts}: the bounding state changed under this worker in "
                                 f"{MAX_STALE_ROUNDS} rounds in a row (shards {shards}; too many writers on one "
                                 "window?)")

    def _apply_round(self, chunks: Sequence[Chunk], pending: list[int], results: list[ChunkResult | None],
                     closed_through: float | None, closed: str) -> list[int]:
        """Plan and send the ``pending`` chunks once; fills ``results``; returns the chunks refused as stale."""
        sent: list[tuple[int, ChunkPlan | None]] = []
        args: list[list[object]] = []
        size = self.window_size
        for i in pending:
            ch = chunks[i]
            if ch.closed or (closed_through is not None and ch.start + size <= closed_through):
                # known late: Redis still tells replayed (duplicate) events from late ones
                sent.append((i, None))
                args.append([ApplyHeader(ch.start, ch.start + size, ch.partition, closed,
                                         known_late=ch.closed).encode(), b"", "", ""])
                continue
            cache = (ch.start, ch.shard)
            bounding = self._bounding.get(cache)
            if bounding is None:
                bounding = self._bounding[cache] = WindowBounding(self.max_keys_per_user, unit=self.unit)
            else:
                self._bounding.move_to_end(cache)
            self._tokens += 1
            plan = bounding.plan(ch.partition, ch.events, token=f"{self._id}:{self._tokens}")
            if plan.last_offset is None:  # every event already applied: nothing to send
                results[i] = ChunkResult(duplicate=plan.duplicate)
                continue
            sent.append((i, plan))
            header = ApplyHeader(ch.start, ch.start + size, ch.partition, closed, token_before=plan.token_before,
                                 token=plan.token, log_bytes_before=plan.log_bytes_before,
                                 last_offset=plan.last_offset, applied=plan.applied, bounded=plan.linf + plan.l0,
                                 most=self.catch_up_chunk_bytes, segment_bytes=self.log_segment_bytes,
                                 capacity=self.max_shard_log_bytes)
            args.append([header.encode(), plan.log, "\0".join(plan.increments),
                         ",".join(map(str, plan.increments.values()))])
        if not sent:
            return []
        try:
            replies = self._send(sent, chunks, args)
        except BaseException:
            self._rollback([((chunks[i].start, chunks[i].shard), plan) for i, plan in sent if plan is not None])
            raise
        undo: list[tuple[tuple[int, int], ChunkPlan]] = []
        stale: list[int] = []
        catch_up: dict[tuple[int, int], list] = {}  # (window, shard) -> the stale reply of its first refused chunk
        late_windows: set[tuple[int, int]] = set()
        full: list[tuple[tuple[int, int], ChunkPlan]] = []
        for (i, plan), reply in zip(sent, replies):
            ch = chunks[i]
            cache = (ch.start, ch.shard)
            status = reply[0]
            if status == b"ok":
                results[i] = ChunkResult(applied=plan.applied, duplicate=plan.duplicate, linf=plan.linf,
                                         l0=plan.l0)
                continue
            if plan is not None and status != b"full":
                undo.append((cache, plan))
            if status == b"late":
                dup = applied_prefix(ch.events, int(reply[1]))
                results[i] = ChunkResult(duplicate=dup, late=len(ch.events) - dup)
                late_windows.add(cache)
            elif status == b"stale":
                stale.append(i)
                catch_up.setdefault(cache, reply)
            elif status == b"full" and plan is not None:
                results[i] = ChunkResult(duplicate=plan.duplicate,
                                         full=tuple(off for off, _, _ in ch.events[plan.duplicate:]))
                undo.append((cache, plan))
                full.append((cache, plan))
            else:
                raise RuntimeError(f"apply_window: unexpected reply {status!r}")
        # newest first: a plan refused as full keeps its offsets and token (Redis recorded them), counts nothing
        self._rollback(undo, skipped={id(plan) for _, plan in full})
        for cache, reply in catch_up.items():
            self._catch_up(cache, reply)
        for cache in late_windows:
            self._bounding.pop(cache, None)  # closed: never planned on again
        return stale

    def _full_again(self, chunks: Sequence[Chunk], results: list[ChunkResult]) -> list[ChunkResult]:
        """Replayed events that a full shard refused before come back as ``full`` again, not as duplicates.

        A chunk refused as full has its offsets recorded (so a replay never loops on it), and its events'
        dead letters are written only after the batch's outcome is taken. When that does not happen -- the
        dead-letter topic was down and the batch is retried, or the worker crashed -- the replay would find
        the offsets applied and skip the events: their dead letters would be lost. So the script also keeps
        the refused offset ranges (meta ``full:<partition>``), and every replay (a chunk with duplicates)
        reads them here, one batched ``HGET`` per (window shard, partition), and reports the refused events
        as full: their dead letters are written again (at least once; the ``dead_letter_id`` header tells
        the copies apart). Batches without duplicates -- every batch but replays -- cost nothing more."""
        wanted = sorted({(ch.start, ch.shard, ch.partition) for ch, r in zip(chunks, results) if r.duplicate})
        if not wanted:
            return results
        items = []
        for start, shard, partition in wanted:
            meta, field = self.keys.window_meta(start, shard), f"full:{partition}"
            items.append((meta, lambda pipe, meta=meta, field=field: pipe.hget(meta, field)))
        refused = {w: parse_full_ranges(_text(raw)) for w, raw in zip(wanted, run_batched(self.client, items)) if raw}
        if not refused:
            return results
        out = []
        for ch, r in zip(chunks, results):
            ranges = refused.get((ch.start, ch.shard, ch.partition))
            again = () if not ranges else tuple(
                off for off, _, _ in ch.events[:r.duplicate] if any(lo < off <= hi for lo, hi in ranges))
            out.append(replace(r, duplicate=r.duplicate - len(again), full=tuple(sorted(r.full + again)))
                       if again else r)
        return out

    def _catch_up(self, cache: tuple[int, int], reply: list) -> None:
        """Absorb a stale reply: its first chunk of the log, then the rest up to the length it reported, read
        with GETRANGE in pieces of ``catch_up_chunk_bytes`` (the log is append-only, so bytes below that
        length do not change). If the log got shorter meanwhile (deleted), the window's cache is dropped:
        the next plan is refused as stale again and catches up from the start."""
        _, token, log_from, tail, flat, length, segment_bytes = reply
        log_from, length, segment_bytes = int(log_from), int(length), int(segment_bytes)
        name = self.keys.window_users(*cache)
        short = False

        def pieces() -> Iterator[bytes]:
            nonlocal short
            yield tail
            at = log_from + len(tail)
            while at < length:
                upto = min(length, at + self.catch_up_chunk_bytes)
                where = log_pieces(name, segment_bytes, at, upto)
                if len(where) == 1:
                    piece = self.client.getrange(*where[0])
                else:  # the read crosses segments: one round trip still
                    pipe = self.client.pipeline(transaction=False)
                    for key, first, last in where:
                        pipe.getrange(key, first, last)
                    piece = b"".join(pipe.execute())
                self.catch_up_reads += 1
                if len(piece) != upto - at:
                    short = True
                    return
                yield piece
                at = upto

        bounding = self._bounding[cache]
        try:
            bounding.absorb_pieces(token=_text(token), log_from=log_from, pieces=pieces(),
                                   applied_through={int(flat[j]): int(flat[j + 1]) for j in range(0, len(flat), 2)})
        except ValueError:
            if not short:
                raise
        if short:
            del self._bounding[cache]

    def fill_ratio(self) -> float:
        """The fullest (window, shard) this store caches: its bounding log bytes / ``max_shard_log_bytes``
        (the ``shard_fill_ratio`` gauge; 1 = at capacity)."""
        most = max((b.log_bytes for b in self._bounding.values()), default=0)
        return most / self.max_shard_log_bytes

    def cache_users(self) -> int:
        """Users held in the bounding caches of all windows (the measure ``cache_max_users`` caps)."""
        return sum(b.users for b in self._bounding.values())

    def _enforce_cache_cap(self) -> None:
        """Drop least recently used window caches until the rest hold at most ``cache_max_users`` users
        (never the most recently used one). Exactness does not depend on the cache (module docstring)."""
        if self.cache_max_users is None:
            return
        total = self.cache_users()
        while total > self.cache_max_users and len(self._bounding) > 1:
            _, dropped = self._bounding.popitem(last=False)
            total -= dropped.users
            self.evictions += 1

    def _send(self, sent: list[tuple[int, ChunkPlan | None]], chunks: Sequence[Chunk],
              args: list[list[object]]) -> list:
        script = self._apply

        def send() -> list:
            # EVALSHA directly: a pipeline of Script calls would first ask SCRIPT EXISTS (a round trip);
            # one pipeline per master on a cluster (stream_dp.node_batches)
            items = []
            for (i, _), a in zip(sent, args):
                keys = self.window_keys(chunks[i].start, chunks[i].shard)
                items.append((keys[0], lambda pipe, keys=keys, a=a: pipe.evalsha(script.sha, 4, *keys, *a)))
            if not self.replication.replicas:
                return run_batched(self.client, items)
            return self._send_replicated(items)

        try:
            return send()
        except redis.exceptions.NoScriptError:
            # Redis restarted or flushed its scripts: load and send again (a chunk that did run before the
            # flush is refused as stale and planned again)
            self.client.script_load(script.script)
            return send()

    def _send_replicated(self, items: list[tuple[str, Callable[[Pipeline], object]]]) -> list:
        """The items' scripts, one pipeline per master, each followed by ``WAIT`` on the same connection
        (:func:`stream_dp.replication.write_then_wait`): the apply returns -- and the loop commits the
        Kafka offsets it covers -- only once ``redis.min_replicas_acked`` replicas have every write. Raises
        the transient :class:`~stream_dp.replication.NotReplicated` otherwise (the batch is replayed)."""
        groups: dict[str, list[int]] = {}
        for i, (key, _) in enumerate(items):
            node = self.client.get_node_from_key(key).name if is_cluster(self.client) else ""
            groups.setdefault(node, []).append(i)
        replies: list = [None] * len(items)
        for indexes in groups.values():
            def write(pipe: Pipeline, indexes: list[int] = indexes) -> None:
                for i in indexes:
                    items[i][1](pipe)
            out = write_then_wait(self.client, items[indexes[0]][0], self.replication.replicas,
                                  self.replication.timeout_ms, write)
            for i, reply in zip(indexes, out):
                replies[i] = reply
        return replies

    def _rollback(self, plans: list[tuple[tuple[int, int], ChunkPlan]], skipped: frozenset[int] | set[int] = frozenset()) -> None:
        """Undo plans, newest first (the cache of each window shard then matches its last confirmed state);
        plans in ``skipped`` (by id) were recorded as skipped: :meth:`WindowBounding.skip`."""
        for cache, plan in reversed(plans):
            bounding = self._bounding.get(cache)
            if bounding is not None:
                (bounding.skip if id(plan) in skipped else bounding.rollback)(plan)

    def forget_windows(self, *, closed_through: float) -> None:
        """Drop the bounding cache of windows with ``end <= closed_through`` (closed: no more events)."""
        for cache in [c for c in self._bounding if c[0] + self.window_size <= closed_through]:
            del self._bounding[cache]

    # --- watermarks ------------------------------------------------------------------------------
    def advance_watermark(self, owned: dict[int, tuple[float | None, bool] | tuple[float | None, bool, bool]], *,
                          known_partitions: Iterable[int] = (), idle_timeout: float,
                          now: float | None = None, require_epoch: bool = False) -> WatermarkState:
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
            caught_up = report[2] if len(report) > 2 else True  # type: ignore[misc]
            args += [p, "" if wm is None else repr(float(wm)), 1 if busy else 0, 1 if caught_up else 0]
        keys = [self.keys.watermarks(), self.keys.windows_index()]
        out = self._advance(keys=[*keys, self.keys.ingest_epoch()] if require_epoch else keys, args=args)
        target, current, open_count = _text(out[0]), _text(out[1]), int(out[2])
        to_close = tuple(int(s) for s in out[3:])
        if target and target != current:
            if to_close:
                run_batched(self.client, [
                    (self.keys.window_meta(start, shard),
                     lambda pipe, start=start, shard=shard: self._close(
                         keys=[self.keys.window_meta(start, shard)], args=[start, start + self.window_size, target],
                         client=pipe))
                    for start in to_close for shard in range(self.keys.shards)])
            current = _text(self._finalize(keys=[self.keys.watermarks(), self.keys.window_closes()],
                                            args=[target, self.window_size]))
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
        """All counts of one window, summed over its shards (for tests and the curator only: never log or
        export these)."""
        out: dict[str, int] = {}
        for shard in range(self.keys.shards):
            for k, v in self.client.zrange(self.keys.window_counts(start, shard), 0, -1, withscores=True):
                out[k.decode()] = out.get(k.decode(), 0) + int(v)
        return out

    def windows(self) -> list[int]:
        return [int(s) for s in self.client.zrange(self.keys.windows_index(), 0, -1)]

    def meta(self, start: int, shard: int = 0) -> dict[str, str]:
        """One window shard's metadata (every shard is closed together)."""
        return {k.decode(): v.decode() for k, v in self.client.hgetall(self.keys.window_meta(start, shard)).items()}


def parse_full_ranges(raw: str) -> list[tuple[int, int]]:
    """A meta ``full:<partition>`` value, ``"lo:hi,lo:hi"``, as ``(lo, hi)`` pairs: offsets in ``(lo, hi]``
    were refused as full (``store/lua/apply_window.lua``)."""
    out = []
    for part in raw.split(","):
        lo, _, hi = part.partition(":")
        out.append((int(lo), int(hi)))
    return out


def _text(raw: object) -> str:
    if isinstance(raw, bytes):
        return raw.decode()
    return "" if raw is None else str(raw)
