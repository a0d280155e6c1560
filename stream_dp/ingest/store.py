"""The Redis side of ingest: apply bounded increments exactly once.

Layout (:mod:`stream_dp.store.keys`; the contract the release worker reads concurrently, docs/ingest.md "Redis layout"):

- per window shard (``{w:<start>}``, or ``{w:<start>:<shard>}`` with ``windows.shards`` S > 1; a user's
  events all go to shard :func:`~stream_dp.store.keys.shard_of`): ``counts`` (ZSET key → distinct bounded users
  of the shard; a key's window count is the sum over the shards), ``users`` (the bounding log: counted
  ``user\0key\0`` pairs in apply order, stored as STRING segments of at most ``windows.log_segment_bytes``),
  ``offsets`` (HASH partition → highest applied offset), ``meta`` (HASH start, end, state, events_applied,
  events_bounded, events_full, apply_token, log_bytes, log_segment_bytes; state ``open`` → ``closed`` by
  ingest → ``released`` by the release worker);
- ``{ingest}``: the window index and the watermarks (:mod:`stream_dp.ingest.watermarks`, which also closes
  windows without a race).

**Exactly-once effect.** A batch is split into (window, shard, partition) chunks
(:mod:`stream_dp.ingest.chunks`); each chunk's bounding log,
increments, metadata and its offset record are one Lua script over one hash tag, so a chunk is applied
completely or not at all. Events at or below the recorded offset are skipped, so replaying any prefix of
the log (after a crash, a rebalance, a failed commit) changes nothing. Kafka offsets are committed only
after every chunk of the batch was applied.

**Bounding on a cache, checked by Redis.** The store bounds each chunk itself, on its cache of the window
(:mod:`stream_dp.ingest.bounding_cache`): the keys each user already has, the applied offsets,
how much of the log it has read, and ``apply_token``, the version of the window the cache reflects. The
script records the plan only if the window's ``apply_token`` and log length are still those (every apply
sets a new, unique token); otherwise it records nothing and returns what changed (the log since the
cache's length, the offsets, the token), and the store catches up and bounds the chunk again. So a plan
is never recorded on a state it was not made for — another worker's writes, a reply lost with the
connection, a restart with an empty cache — and Redis does one append and one ZINCRBY per distinct key
per chunk instead of evaluating the rule per event. The caches are bounded (``cache_max_users``) and
caught up in chunks (``catch_up_chunk_bytes``); exactness does not depend on them.

**Capacity, never Redis's limit.** No Redis value of a window outgrows ``log_segment_bytes`` (the log is
segmented; every count is a ZSET member), and a shard holds at most ``max_shard_log_bytes`` of log. A chunk
that would pass it is refused *with its offsets recorded* (reply ``full``): its events are not counted,
come back as ``window_shard_full`` rejects (dead letters, counted by reason) and a replay does not count
them, so a full shard never stops ingest in a loop. The refused offset ranges are kept too, so a replay
(a batch retried, or replayed after a crash, before its dead letters were written) reports those events
as full again and their dead letters are not lost. Below capacity the guarantee is exact; at capacity it is not
(docs/privacy.md "Capacity"), which is why the breach is a metric and an alert.

**Layout "key"** (``windows.layout``; docs/design/key-sharded-counts.md). The script above bounds the chunk
in its user shard as always, but records its accepted increments as pending there instead of counting them
(step 1); :class:`~stream_dp.ingest.key_counter.KeyCounter` then counts them into the key shards, idempotently
by chunk offset (step 2), before :meth:`WindowStore.apply` returns -- so before the Kafka commit, and a crash
between the steps is healed by the replay.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, cast

import redis
from redis.client import Pipeline
from redis.typing import EncodableT

from stream_dp.errors import StreamDPError
from stream_dp.ingest.bounding import ChunkPlan, applied_prefix
from stream_dp.ingest.bounding_cache import CATCH_UP_CHUNK_BYTES, BoundingCaches, WindowShard
from stream_dp.ingest.chunks import (MAX_SHARD_LOG_BYTES, ApplyHeader, Chunk, ChunkResult, parse_full_ranges,
                                     reply_text, split_by_shard)
from stream_dp.ingest.crashpoints import NO_CRASHES, CrashPoints
from stream_dp.ingest.key_counter import Items, KeyCounter, Source
from stream_dp.ingest.watermarks import PartitionReport, Watermarks, WatermarkState
from stream_dp.node_batches import in_parallel, is_cluster, run_batched
from stream_dp.replication import NO_REPLICATION, ReplicationPolicy, write_then_wait
from stream_dp.store import scripts
from stream_dp.store.key_counts import Pending, parse_pending, pending_args, pending_entries
from stream_dp.store.bounding_log import LOG_SEGMENT_BYTES
from stream_dp.store.keys import Keys

__all__ = ["CATCH_UP_CHUNK_BYTES", "MAX_SHARD_LOG_BYTES", "MAX_STALE_ROUNDS", "ApplyHeader", "Chunk", "ChunkResult",
           "StaleBoundingState", "WatermarkState", "WindowStore", "parse_full_ranges"]

#: Rounds of "refused as stale → absorb → plan again" before :meth:`WindowStore.apply` gives up.
MAX_STALE_ROUNDS = 50


class StaleBoundingState(RuntimeError, StreamDPError):
    """Other writers kept changing a window's bounding state faster than this worker could plan on it."""


class WindowStore:
    """Window counts, bounding state, applied offsets and watermarks in Redis."""

    def __init__(self, client: redis.Redis, *, keys: Keys, window_size: int, unit: str = "user",
                 max_keys_per_user: int = 5, cache_max_users: int | None = None,
                 catch_up_chunk_bytes: int = CATCH_UP_CHUNK_BYTES, log_segment_bytes: int = LOG_SEGMENT_BYTES,
                 max_shard_log_bytes: int = MAX_SHARD_LOG_BYTES,
                 replication: ReplicationPolicy = NO_REPLICATION, crashpoints: CrashPoints = NO_CRASHES) -> None:
        self.replication = replication  # WAIT for this many replicas after each apply (redis.min_replicas_acked)
        # every range (window size, Δ, unit, cache and byte bounds) is checked by the config (stream_dp.config)
        self.log_segment_bytes = log_segment_bytes
        self.max_shard_log_bytes = max_shard_log_bytes
        self.client = client
        self.keys = keys
        self.window_size = window_size
        self.caches = BoundingCaches(client, keys, window_size=window_size, max_keys_per_user=max_keys_per_user,
                                     unit=unit, cache_max_users=cache_max_users,
                                     catch_up_chunk_bytes=catch_up_chunk_bytes)
        self.watermarks = Watermarks(client, keys, window_size)
        self._apply = scripts.register(client, "apply_window")
        self._id = os.urandom(6).hex()  # makes this store's apply tokens unique
        self._tokens = 0
        self.key_counter = (KeyCounter(client, keys, send=self._send_items, crashpoints=crashpoints)
                            if keys.layout == "key" else None)  # step 2 of the key layout's apply

    # --- applying events -------------------------------------------------------------------------
    def window_keys(self, start: int, shard: int = 0) -> list[str]:
        k = self.keys
        names = [k.window_counts(start, shard), k.window_users(start, shard), k.window_offsets(start, shard),
                 k.window_meta(start, shard)]
        return names + [k.window_pending(start, shard)] if k.layout == "key" else names

    def register_windows(self, starts: Iterable[int]) -> dict[int, bool]:
        """Add windows to the index unless already closed; {start: open?} (:class:`Watermarks`)."""
        return self.watermarks.register_windows(starts)

    def apply(self, chunks: Sequence[Chunk], *, closed_through: float | None) -> list[ChunkResult]:
        """Bound and apply chunks (one script each, pipelined); raises redis errors unchanged.

        ``closed_through`` is the caller's latest view of the global watermark: a chunk of a window with
        ``end <= closed_through`` is late whatever its state in Redis says. Chunks of one (window,
        partition) must come in offset order, here and across calls.

        Each chunk is bounded on this store's cache of its window (:class:`BoundingCaches`) and recorded
        only if the window is still in the state the cache was made for; a chunk refused as stale is
        planned again on the absorbed changes and resent (up to :data:`MAX_STALE_ROUNDS` rounds). When the
        call raises, every plan not known to be applied is rolled back: the next call finds out from Redis.

        With S > 1 shards each chunk is split by the shard of its users and each piece applied atomically on
        its own (window, shard); the result of a chunk is the sum of its pieces'.
        """
        if self.keys.shards == 1:
            return self._apply_pieces(chunks, closed_through)
        pieces, origin = split_by_shard(chunks, self.keys.shards)
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
        recorded: dict[Source, Pending] = {}  # layout "key": each recorded source's pending entries (step 1)
        for _ in range(MAX_STALE_ROUNDS):
            pending = self._apply_round(chunks, pending, results, closed_through, closed, recorded)
            if not pending:
                self.caches.enforce_cap()
                # no chunk pending: every one has its result
                done = [replace(r, replanned=n) if n else r for r, n in zip(cast(list[ChunkResult], results), refused)]
                if self.key_counter is not None:  # step 2; a replayed chunk's source re-sends its pending
                    self.key_counter.count(recorded, [(ch.start, ch.shard, ch.partition) for ch, r in
                                                      zip(chunks, done) if r.duplicate or r.late])
                return self._full_again(chunks, done)
            for i in pending:
                refused[i] += 1
        starts = sorted({chunks[i].start for i in pending})
        shards = sorted({chunks[i].shard for i in pending})
        raise StaleBoundingState(f"windows {starts}: the bounding state changed under this worker in "
                                 f"{MAX_STALE_ROUNDS} rounds in a row (shards {shards}; too many writers on one "
                                 "window?)")

    def _apply_round(self, chunks: Sequence[Chunk], pending: list[int], results: list[ChunkResult | None],
                     closed_through: float | None, closed: str, recorded: dict[Source, Pending]) -> list[int]:
        """Plan and send the ``pending`` chunks once; fills ``results``; returns the chunks refused as stale."""
        sent: list[tuple[int, ChunkPlan | None]] = []
        args: list[list[EncodableT]] = []
        own: dict[int, Pending] = {}  # layout "key": each sent chunk's own pending entries
        size = self.window_size
        plan: ChunkPlan | None
        for i in pending:
            ch = chunks[i]
            if ch.closed or (closed_through is not None and ch.start + size <= closed_through):
                # known late: Redis still tells replayed (duplicate) events from late ones
                sent.append((i, None))
                args.append([ApplyHeader(ch.start, ch.start + size, ch.partition, closed,
                                         known_late=ch.closed).encode(), b"", "", ""])
                continue
            bounding = self.caches.of((ch.start, ch.shard))
            self._tokens += 1
            plan = bounding.plan(ch.partition, ch.events, token=f"{self._id}:{self._tokens}")
            if plan.last_offset is None:  # every event already applied: nothing to send
                results[i] = ChunkResult(duplicate=plan.duplicate)
                continue
            sent.append((i, plan))
            header = ApplyHeader(ch.start, ch.start + size, ch.partition, closed, token_before=plan.token_before,
                                 token=plan.token, log_bytes_before=plan.log_bytes_before,
                                 last_offset=plan.last_offset, applied=plan.applied, bounded=plan.linf + plan.l0,
                                 most=self.caches.catch_up_chunk_bytes, segment_bytes=self.log_segment_bytes,
                                 capacity=self.max_shard_log_bytes, pending=self.key_counter is not None)
            if self.key_counter is None:
                args.append([header.encode(), plan.log, "\0".join(plan.increments),
                             ",".join(map(str, plan.increments.values()))])
            else:  # step 1 of the key layout: the increments go to the user shard's pending hash
                own[i] = pending_entries(ch.partition, plan.last_offset, plan.increments, self.keys.shards)
                args.append([header.encode(), plan.log, "", "", *pending_args(own[i])])
        if not sent:
            return []
        try:
            replies = self._send(sent, chunks, args)
        except BaseException:
            self.caches.rollback([((chunks[i].start, chunks[i].shard), plan) for i, plan in sent if plan is not None])
            raise
        undo: list[tuple[WindowShard, ChunkPlan]] = []
        stale: list[int] = []
        catch_up: dict[WindowShard, list] = {}  # (window, shard) -> the stale reply of its first refused chunk
        late_windows: set[WindowShard] = set()
        full: list[tuple[WindowShard, ChunkPlan]] = []
        for (i, plan), reply in zip(sent, replies):
            ch = chunks[i]
            cache = (ch.start, ch.shard)
            status = reply[0]
            if status == b"ok" and plan is not None:  # a known-late chunk (no plan) is never "ok"
                results[i] = ChunkResult(applied=plan.applied, duplicate=plan.duplicate, linf=plan.linf,
                                         l0=plan.l0)
                if self.key_counter is not None:
                    recorded[(ch.start, ch.shard, ch.partition)] = {**parse_pending(reply[1]), **own[i]}
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
        self.caches.rollback(undo, skipped={id(plan) for _, plan in full})
        for cache, reply in catch_up.items():
            self.caches.catch_up(cache, reply)
        for cache in late_windows:
            self.caches.drop(cache)  # closed: never planned on again
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
        refused = {w: parse_full_ranges(reply_text(raw)) for w, raw in zip(wanted, run_batched(self.client, items)) if raw}
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

    def _send(self, sent: list[tuple[int, ChunkPlan | None]], chunks: Sequence[Chunk],
              args: list[list[EncodableT]]) -> list:
        script = self._apply

        # the key layout's counted pending entries are deleted riding this pipeline, ahead of the chunks (on the
        # same connection: a chunk's reply then names only entries not yet known counted, not the last batch's)
        trims: Items = self.key_counter.trim_items() if self.key_counter is not None else []

        def send() -> list:
            # EVALSHA directly: a pipeline of Script calls would first ask SCRIPT EXISTS (a round trip);
            # one pipeline per master on a cluster (stream_dp.node_batches)
            def evalsha(keys: Sequence[str], argv: list[EncodableT]) -> Callable[[Pipeline], object]:
                return lambda pipe: pipe.evalsha(script.sha, len(keys), *keys, *argv)

            items: Items = []
            for (i, _), a in zip(sent, args):
                keys = self.window_keys(chunks[i].start, chunks[i].shard)
                items.append((keys[0], evalsha(keys, a)))
            return self._send_items(trims + items)[len(trims):]

        try:
            replies = send()
        except redis.exceptions.NoScriptError:
            # Redis restarted or flushed its scripts: load and send again (a chunk that did run before the
            # flush is refused as stale and planned again)
            self.client.script_load(script.script)
            replies = send()
        if self.key_counter is not None:
            self.key_counter.trimmed(trims)
        return replies

    def _send_items(self, items: Items) -> list:
        """Each item's commands, one pipeline per master; with ``redis.min_replicas_acked`` > 0 each pipeline is
        followed by ``WAIT`` (:meth:`_send_replicated`)."""
        if not self.replication.replicas:
            return run_batched(self.client, items)
        return self._send_replicated(items)

    def _send_replicated(self, items: list[tuple[str, Callable[[Pipeline], object]]]) -> list:
        """The items' scripts, one pipeline per master (at the same time), each followed by ``WAIT`` on the same connection
        (:func:`stream_dp.replication.write_then_wait`): the apply returns -- and the loop commits the
        Kafka offsets it covers -- only once ``redis.min_replicas_acked`` replicas have every write. Raises
        the transient :class:`~stream_dp.replication.NotReplicated` otherwise (the batch is replayed)."""
        groups: dict[str, list[int]] = {}
        client: Any = self.client  # redis.RedisCluster when is_cluster
        for i, (key, _) in enumerate(items):
            node = client.get_node_from_key(key).name if is_cluster(client) else ""
            groups.setdefault(node, []).append(i)
        replies: list = [None] * len(items)

        def send(indexes: list[int]) -> list:
            def write(pipe: Pipeline) -> None:
                for i in indexes:
                    items[i][1](pipe)
            return write_then_wait(self.client, items[indexes[0]][0], self.replication.replicas,
                                   self.replication.timeout_ms, write)

        outs = in_parallel([partial(send, indexes) for indexes in groups.values()])
        for indexes, out in zip(groups.values(), outs):
            for i, reply in zip(indexes, out):
                replies[i] = reply
        return replies


    def forget_windows(self, *, closed_through: float) -> None:
        """Drop the bounding cache of windows with ``end <= closed_through`` (closed: no more events)."""
        self.caches.forget_closed(closed_through=closed_through)

    def fill_ratio(self) -> float:
        """The fullest (window, shard) this store caches: its bounding log bytes / ``max_shard_log_bytes``
        (the ``shard_fill_ratio`` gauge; 1 = at capacity)."""
        return self.caches.most_log_bytes() / self.max_shard_log_bytes

    # --- watermarks (:mod:`stream_dp.ingest.watermarks`) ----------------------------------------------
    def advance_watermark(self, owned: dict[int, PartitionReport], *, known_partitions: Iterable[int] = (),
                          idle_timeout: float, now: float | None = None, require_epoch: bool = False) -> WatermarkState:
        """:meth:`Watermarks.advance`: report owned partitions and install the next global watermark."""
        return self.watermarks.advance(owned, known_partitions=known_partitions, idle_timeout=idle_timeout, now=now,
                                       require_epoch=require_epoch)

    def global_watermark(self) -> float | None:
        return self.watermarks.global_watermark()

    # --- reading (tests, tools) ------------------------------------------------------------------
    def counts(self, start: int) -> dict[str, int]:
        """All counts of one window, summed over its shards (its key shards in the key layout: disjoint, so
        no key is summed twice) -- for tests and the curator only: never log or export these."""
        out: dict[str, int] = {}
        name = self.keys.key_shard_counts if self.keys.layout == "key" else self.keys.window_counts
        for shard in range(self.keys.shards):
            counted = cast(list[tuple[bytes, float]],
                           self.client.zrange(name(start, shard), 0, -1, withscores=True))
            for k, v in counted:
                out[k.decode()] = out.get(k.decode(), 0) + int(v)
        return out

    def windows(self) -> list[int]:
        return [int(s) for s in cast(list[bytes], self.client.zrange(self.keys.windows_index(), 0, -1))]

    def meta(self, start: int, shard: int = 0) -> dict[str, str]:
        """One window shard's metadata (every shard is closed together)."""
        meta = cast(dict[bytes, bytes], self.client.hgetall(self.keys.window_meta(start, shard)))
        return {k.decode(): v.decode() for k, v in meta.items()}
