"""One polled batch → Redis state: decode, window, bound and apply, then advance the watermark.

This is every per-event step of the ingest loop, behind a small request/outcome interface so that it can
run beside the Kafka consumer instead of competing with it for the GIL: :class:`BatchApplier` does the
work (``apply_one``: one :class:`BatchRequest` in, one :class:`BatchOutcome` out). It owns the decoder,
the per-partition event-time clock, the window registration cache and the
:class:`~stream_dp.ingest.store.WindowStore`, which splits each (window, partition) chunk by window shard
and applies one Lua script per (window, shard, partition). Where it runs -- a thread, or a child process
with its IPC -- is :mod:`stream_dp.ingest.runners` and :mod:`stream_dp.ingest.applier_process`.

Exactly-once is unchanged by where it runs: each (window, partition) chunk and its offset record are one
Lua script; the loop commits Kafka offsets only after the outcome says the batch was applied, and a
failed batch is replayed (already applied offsets are skipped in Redis). Errors never cross as raw
exceptions: an outcome carries the failure (the dependency when it is retriable), which the loop turns
into backoff and replay, or into a stop for anything else.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import redis

from stream_dp.config import Config
from stream_dp.errors import StreamDPError
from stream_dp.ingest.decode import Event, EventDecoder
from stream_dp.ingest.chunks import Chunk, ChunkResult
from stream_dp.ingest.crashpoints import NO_CRASHES, CrashPoints
from stream_dp.ingest.store import StaleBoundingState, WindowStore
from stream_dp.ingest.watermarks import PartitionReport, WatermarkState
from stream_dp.ingest.windowing import PartitionClock
from stream_dp.store.keys import Keys
from stream_dp.node_batches import FAILOVER_ERRORS
from stream_dp.replication import ReplicationPolicy
from stream_dp.schedule import ReleaseSchedule, window_start
from stream_dp.schedule import establish as establish_schedule

log = logging.getLogger(__name__)

#: Records of one partition decoded per Redis round trip: Redis applies one segment while the next is
#: decoded. Each (window, partition) chunk of a segment is one Lua script with one ZINCRBY per distinct key,
#: so larger segments aggregate more: with the benchmark's Zipf keys, segments of 5000 instead of 1000
#: records took the applier from 3.3 to 2.6 CPU s per 10⁶ events and redis-server from 1.0 to 0.65 (fewer,
#: larger chunks), and were faster in wall time too, though a batch of one partition is then one segment.
SEGMENT_RECORDS = 5000

#: Redis errors worth retrying (the server went away, is loading its data, or a cluster is resharding).
_TRANSIENT_REDIS_REPLIES = ("LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOSCRIPT")


def redis_transient(exc: BaseException) -> bool:
    """Whether a Redis error is worth retrying with backoff (connection lost, server loading, resharding,
    or other workers changing a window's bounding state faster than this one could catch up)."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, StaleBoundingState, *FAILOVER_ERRORS,
                        redis.exceptions.NoScriptError)):
        return True  # redis-py turns CLUSTERDOWN, READONLY, TRYAGAIN… into classes and strips the prefix
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(_TRANSIENT_REDIS_REPLIES)


@dataclass(frozen=True)
class PartitionRecords:
    """One partition's records of a poll, as columns in offset order (values as the broker sent them)."""

    partition: int
    offsets: list[int]
    timestamps: list[int | None]
    values: list[bytes | None]


@dataclass(frozen=True)
class BatchRequest:
    """What the applier needs for one batch. ``records`` may be empty (only advance the watermark).

    ``owned``/``busy``/``known``: the partitions this worker owns, those of them that delivered records
    or still lag, and every partition of the topic (the watermark rule, :mod:`~stream_dp.ingest.windowing`).
    ``caught_up``: owned partitions whose position has reached the broker's high-water mark (only those
    may turn idle). ``forget``: partitions revoked since the previous request (their clocks are dropped).
    """

    records: list[PartitionRecords]
    owned: frozenset[int]
    busy: frozenset[int]
    known: frozenset[int]
    forget: frozenset[int] = frozenset()
    caught_up: frozenset[int] = frozenset()
    epoch_required: bool = False  # the worker checked ingest's epoch at start: a marker gone since is a loss


@dataclass(frozen=True)
class Failure:
    """Why a batch was not applied: the error, and the dependency when retrying can help."""

    error: str
    message: str
    dependency: str | None  # "redis" when transient, None otherwise


@dataclass
class BatchOutcome:
    """What became of a batch: rejects (partition, index in that partition's records, reason), the
    counters of the bounding and de-duplication, and the watermark after the batch; or the failure."""

    rejects: list[tuple[int, int, str]] = field(default_factory=list)
    applied: int = 0
    duplicate: int = 0
    linf: int = 0
    l0: int = 0
    late: int = 0
    replanned: int = 0
    full: int = 0  # events not counted: their (window, shard) is at capacity (also in rejects)
    fill: float = 0.0  # the fullest cached (window, shard) log / windows.max_shard_log_bytes
    ticks: int = 0
    watermark: WatermarkState | None = None
    failure: Failure | None = None


class ApplyFailed(StreamDPError):
    """A batch failed in the applier; ``dependency`` is set when the failure is transient."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.error}: {failure.message}")
        self.failure = failure
        self.dependency = failure.dependency


class BatchApplier:
    """Decodes, windows and applies batches for one ingest worker (call from one thread at a time)."""

    def __init__(self, cfg: Config, redis_client: redis.Redis, *, crashpoints: CrashPoints = NO_CRASHES) -> None:
        self.window_size = cfg.windows.size_seconds
        self.idle_timeout = cfg.windows.idle_partition_timeout_seconds
        self.decoder = EventDecoder(cfg.events, cfg.keys)
        self.store = WindowStore(redis_client, keys=Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout), window_size=self.window_size,
                                 unit=cfg.contribution.unit, max_keys_per_user=cfg.contribution.max_keys_per_user,
                                 cache_max_users=cfg.ingest.bounding_cache_max_users,
                                 catch_up_chunk_bytes=cfg.ingest.catch_up_chunk_bytes,
                                 log_segment_bytes=cfg.windows.log_segment_bytes,
                                 max_shard_log_bytes=cfg.windows.max_shard_log_bytes, crashpoints=crashpoints)
        self.clock = PartitionClock(cfg.windows.allowed_lateness_seconds)
        self._windows_cfg = cfg.windows
        self._redis_cfg = cfg.redis
        self._replication_known = False  # redis.min_replicas_acked resolved on first use (Redis thread)
        self._schedule: ReleaseSchedule | None = None  # recorded/read on first use (Redis thread)
        self.max_event_delay = float(cfg.windows.max_event_delay_seconds)
        self.max_clock_skew = float(cfg.windows.max_clock_skew_seconds)
        self._registered: set[int] = set()  # windows this worker registered (cache; Redis thread only)
        self.ticks = 0  # clock ticks (null-value records) seen in the current batch
        self._closed_through: float | None = None  # the global watermark (or closing target) last seen
        self._redis = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-redis")

    def apply_one(self, req: BatchRequest) -> BatchOutcome:
        """Apply one batch and advance the watermark. Raises the Redis error if Redis fails (the batch is
        then replayed whole: applied chunks are skipped by their offset records).

        Records are decoded in segments of :data:`SEGMENT_RECORDS`; each segment's chunks go to Redis on
        the applier's Redis thread while the next segment is decoded. Segments reach Redis in order, and
        after a failed segment no later segment of the batch is sent: a (window, partition) offset record
        never moves past events that were not applied.
        """
        self.clock.forget(set(req.forget))
        self.ticks = 0
        out = BatchOutcome()
        closed = self._closed_through
        failed = threading.Event()
        jobs: list[tuple[PartitionRecords, Future[list[ChunkResult]]]] = []
        try:
            for pr in req.records:
                for lo in range(0, len(pr.offsets), SEGMENT_RECORDS):
                    chunks = self._group(pr, lo, lo + SEGMENT_RECORDS, out.rejects)
                    if chunks:
                        jobs.append((pr, self._redis.submit(self._apply, pr.partition, chunks, closed, failed)))
        finally:
            wait([job for _, job in jobs])
        out.ticks = self.ticks
        errors = [job.exception() for _, job in jobs if job.exception() is not None]
        first = next((e for e in errors if not isinstance(e, _NotSent)), None)
        if first is not None:
            raise first
        for pr, job in jobs:
            for r in job.result():
                out.rejects.extend((pr.partition, bisect_left(pr.offsets, off), "window_shard_full") for off in r.full)
                out.full += len(r.full)
                out.applied += r.applied
                out.duplicate += r.duplicate
                out.linf += r.linf
                out.l0 += r.l0
                out.late += r.late
                out.replanned += r.replanned
        marks: dict[int, PartitionReport] = {
            p: (self.clock.watermark(p), p in req.busy, p in req.caught_up) for p in req.owned}
        state = self.store.advance_watermark(marks, known_partitions=req.known, idle_timeout=self.idle_timeout,
                                             require_epoch=req.epoch_required)
        self._closed_through = state.closing_through
        if state.closing_through is not None:
            self.store.forget_windows(closed_through=state.closing_through)
        out.watermark = state
        out.fill = self.store.fill_ratio()
        return out

    def close(self) -> None:
        self._redis.shutdown(wait=True)

    def _group(self, pr: PartitionRecords, lo: int, hi: int, rejects: list[tuple[int, int, str]]
               ) -> dict[int, list[tuple[int, str, str]]]:
        """Decode records ``lo:hi`` of one partition; valid events grouped per window start in offset
        order; rejects appended as (partition, index, reason).

        The partition's clock follows the Kafka **record timestamp** of every record (the trusted clock,
        :mod:`~stream_dp.ingest.windowing`), never a body field. A body's event time only chooses the window,
        and only within ``[record time − max_event_delay, record time + max_clock_skew]``; outside, the
        event is rejected (``event_time_out_of_range``), so no user can move the watermark or place events
        in windows far from now. A record with a null value is a clock tick: it advances the clock only.
        """
        decode, fast = self.decoder.decode, self.decoder.fields
        size = self.window_size
        delay, skew = self.max_event_delay, self.max_clock_skew
        p = pr.partition
        chunks: dict[int, list[tuple[int, str, str]]] = {}
        max_rt = float("-inf")
        last_start: int | None = None
        last_lo, last_hi = 0.0, float("-inf")  # [last_start, last_start + size) as floats: empty until the first
        chunk: list[tuple[int, str, str]] = []
        for i, off, ts_ms, value in zip(range(lo, hi), pr.offsets[lo:hi], pr.timestamps[lo:hi], pr.values[lo:hi]):
            if type(ts_ms) is not int or ts_ms < 0:
                rejects.append((p, i, "bad_record_time"))
                continue
            rt = ts_ms / 1000.0
            if rt > max_rt:
                max_rt = rt
            if value is None:
                self.ticks += 1
                continue
            f = fast(value, ts_ms)
            if f is None:
                ev = decode(value, partition=p, offset=off, timestamp_ms=ts_ms)
                if not isinstance(ev, Event):
                    rejects.append((p, i, ev.reason))
                    continue
                f = (ev.user, ev.key, ev.ts)
            user, key, ts = f
            if not (rt - delay <= ts <= rt + skew):
                rejects.append((p, i, "event_time_out_of_range"))
                continue
            if not (last_lo <= ts < last_hi):  # events mostly come in time order: most stay in the last window
                start = window_start(ts, size)
                if start != last_start:
                    chunk = chunks.get(start)  # type: ignore[assignment]
                    if chunk is None:
                        chunk = chunks[start] = []
                    last_start = start
                    last_lo, last_hi = float(start), float(start + size)
            chunk.append((off, user, key))
        if max_rt > float("-inf"):
            self.clock.observe(p, max_rt)
        return chunks

    def _apply(self, partition: int, chunks: dict[int, list[tuple[int, str, str]]], closed: float | None,
               failed: threading.Event) -> list[ChunkResult]:
        """(Redis thread) Register new windows, then apply one partition's chunks (per window start) in
        one pipelined round trip — unless an earlier segment of the batch failed."""
        if failed.is_set():
            raise _NotSent()
        try:
            size = self.window_size
            # windows before the schedule start are never released: their events are late
            if self._schedule is None:
                self._schedule = establish_schedule(self.store.client, self.store.keys, self._windows_cfg)
            if not self._replication_known:
                self.store.replication = ReplicationPolicy.from_config(self._redis_cfg, self.store.client)
                self._replication_known = True
            before = {start for start in chunks if not self._schedule.covers(start)}
            new = {start for start in chunks if start not in self._registered and start not in before
                   and (closed is None or start + size > closed)}
            refused: set[int] = set()
            if new:
                flags = self.store.register_windows(new)
                self._registered.update(s for s, ok in flags.items() if ok)
                refused = {s for s, ok in flags.items() if not ok}
            # closed windows still go to Redis: it tells replayed (duplicate) events from late ones
            todo = [Chunk.of(start, partition, evs, closed=start in refused or start in before)
                    for start, evs in chunks.items()]
            return self.store.apply(todo, closed_through=closed)
        except BaseException:
            failed.set()
            raise


class _NotSent(Exception):
    """A segment not sent to Redis because an earlier segment of its batch failed."""
