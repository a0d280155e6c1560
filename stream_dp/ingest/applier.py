"""One polled batch → Redis state: decode, window, bound and apply, then advance the watermark.

This is every per-event step of the ingest loop, behind a small request/outcome interface so that it can
run beside the Kafka consumer instead of competing with it for the GIL:

- :class:`BatchApplier` does the work (``apply_one``: one :class:`BatchRequest` in, one
  :class:`BatchOutcome` out). It owns the decoder, the per-partition event-time clock, the window
  registration cache and the :class:`~stream_dp.ingest.store.WindowStore`.
- :class:`ThreadRunner` runs it on a thread of the calling process (tests, embedding with an injected
  Redis client); :class:`ProcessRunner` runs it in a child process (what ``workers.ingest`` uses). Both
  take up to :data:`MAX_IN_FLIGHT` batches and apply them strictly one after another, in order, so
  chunks of one partition reach Redis in offset order. After a failed batch, the ones queued behind it
  are not applied (their outcome says so) until the loop has rewound and calls ``resume()``: a later
  batch must never move an offset record past events of a failed one.

Exactly-once is unchanged by where it runs: each (window, partition) chunk and its offset record are one
Lua script; the loop commits Kafka offsets only after the outcome says the batch was applied, and a
failed batch is replayed (already applied offsets are skipped in Redis). Errors never cross as raw
exceptions: an outcome carries the failure (the dependency when it is retriable), which the loop turns
into backoff and replay, or into a stop for anything else.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import redis

from stream_dp.config import Config
from stream_dp.processes import die_with_parent
from stream_dp.ingest.decode import Event, EventDecoder
from stream_dp.ingest.store import Chunk, ChunkResult, StaleBoundingState, WatermarkState, WindowStore
from stream_dp.ingest.windowing import PartitionClock
from stream_dp.keys import Keys
from stream_dp.replication import ReplicationPolicy
from stream_dp.schedule import ReleaseSchedule, window_start
from stream_dp.schedule import establish as establish_schedule

log = logging.getLogger(__name__)

#: Batches a runner accepts before the loop must collect an outcome: the loop hands over the next batch
#: while the applier still works on the previous one, so neither waits for the other.
MAX_IN_FLIGHT = 2

#: Records decoded per Redis round trip: Redis applies one segment while the next is decoded.
SEGMENT_RECORDS = 1000

#: GIL switch interval of the applier process (CPython's default is 5 ms): the Redis thread, once its
#: reply is in, would wait up to that long for the decoding thread to hand over the GIL.
SWITCH_INTERVAL_SECONDS = 0.001

#: Redis errors worth retrying (the server went away, is loading its data, or a cluster is resharding).
_TRANSIENT_REDIS_REPLIES = ("LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOSCRIPT")


def redis_transient(exc: BaseException) -> bool:
    """Whether a Redis error is worth retrying with backoff (connection lost, server loading, resharding,
    or other workers changing a window's bounding state faster than this one could catch up)."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, StaleBoundingState)):
        return True
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


class ApplyFailed(Exception):
    """A batch failed in the applier; ``dependency`` is set when the failure is transient."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.error}: {failure.message}")
        self.failure = failure
        self.dependency = failure.dependency


class BatchApplier:
    """Decodes, windows and applies batches for one ingest worker (call from one thread at a time)."""

    def __init__(self, cfg: Config, redis_client: redis.Redis) -> None:
        self.window_size = cfg.windows.size_seconds
        self.idle_timeout = cfg.windows.idle_partition_timeout_seconds
        self.decoder = EventDecoder(cfg.events)
        self.store = WindowStore(redis_client, keys=Keys(cfg.redis.key_prefix, cfg.windows.shards), window_size=self.window_size,
                                 unit=cfg.contribution.unit, max_keys_per_user=cfg.contribution.max_keys_per_user,
                                 cache_max_users=cfg.ingest.bounding_cache_max_users,
                                 catch_up_chunk_bytes=cfg.ingest.catch_up_chunk_bytes,
                                 log_segment_bytes=cfg.windows.log_segment_bytes,
                                 max_shard_log_bytes=cfg.windows.max_shard_log_bytes)
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
        jobs: list[Future] = []
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
        marks = {p: (self.clock.watermark(p), p in req.busy, p in req.caught_up) for p in req.owned}
        state = self.store.advance_watermark(marks, known_partitions=req.known, idle_timeout=self.idle_timeout)
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
                if type(ev) is not Event:
                    rejects.append((p, i, ev.reason))
                    continue
                f = (ev.user, ev.key, ev.ts)
            user, key, ts = f
            if not (rt - delay <= ts <= rt + skew):
                rejects.append((p, i, "event_time_out_of_range"))
                continue
            start = window_start(ts, size)
            if start != last_start:
                chunk = chunks.get(start)  # type: ignore[assignment]
                if chunk is None:
                    chunk = chunks[start] = []
                last_start = start
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


class InOrder:
    """Applies batches one after another; after a failed one, refuses the rest until :meth:`resume`.

    Both runners serve requests through one of these, so "queued behind a failed batch" means the same
    everywhere: not applied, with a failure outcome that names the original error.
    """

    def __init__(self, applier: BatchApplier) -> None:
        self.applier = applier
        self.failed: Failure | None = None

    def outcome(self, req: BatchRequest) -> BatchOutcome:
        """``applier.apply_one(req)``, with an error turned into the outcome's failure (errors never cross
        to the loop as exceptions)."""
        if self.failed is not None:
            return BatchOutcome(failure=Failure(
                "NotApplied", f"queued behind a batch that failed ({self.failed.error}); replayed after the rewind",
                self.failed.dependency))
        try:
            return self.applier.apply_one(req)
        except Exception as exc:  # noqa: BLE001 - carried to the loop as an outcome
            self.failed = Failure(type(exc).__name__, str(exc), "redis" if redis_transient(exc) else None)
            return BatchOutcome(failure=self.failed)

    def resume(self) -> None:
        """The loop has collected every outcome and rewound: apply again."""
        self.failed = None


class ThreadRunner:
    """Runs a :class:`BatchApplier` on one thread of this process (up to :data:`MAX_IN_FLIGHT` batches,
    applied in order)."""

    def __init__(self, applier: BatchApplier) -> None:
        self.applier = applier
        self._in_order = InOrder(applier)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-apply")
        self._futures: deque[Future] = deque()

    def submit(self, req: BatchRequest) -> None:
        if len(self._futures) >= MAX_IN_FLIGHT:
            raise RuntimeError(f"{MAX_IN_FLIGHT} batches are already in flight")
        self._futures.append(self._executor.submit(self._in_order.outcome, req))

    def result(self) -> BatchOutcome:
        """The outcome of the oldest batch in flight (waits for it)."""
        if not self._futures:
            raise RuntimeError("no batch in flight")
        return self._futures.popleft().result()

    def resume(self) -> None:
        """Apply again after a failure (call with no batch in flight)."""
        if self._futures:
            raise RuntimeError("resume() with batches in flight: collect their outcomes first")
        self._in_order.resume()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.applier.close()


#: The message that tells the applier process to apply again after a failure.
RESUME = "resume"


class ApplierDied(RuntimeError):
    """The applier process ended while the loop was waiting for an outcome."""


class ProcessRunner:
    """Runs a :class:`BatchApplier` in a child process, ``python -m stream_dp.ingest.applier_process``
    (up to :data:`MAX_IN_FLIGHT` batches, applied in order; requests and outcomes are pickles over a
    socket pair).

    The child runs in its own session and ignores SIGINT/SIGTERM (the loop decides when to stop: it
    finishes the batch first); the kernel SIGKILLs it if the loop's process dies (PR_SET_PDEATHSIG), so it
    never outlives it. It ends when its socket is closed.
    """

    def __init__(self, cfg: Config) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "stream_dp.ingest.applier_process", str(theirs.fileno()), str(os.getpid()),
                 str(logging.getLogger().getEffectiveLevel())],
                pass_fds=[theirs.fileno()], start_new_session=True, env=_child_env())
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send_bytes(pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))
        self._in_flight = 0

    @property
    def pid(self) -> int:
        return self._proc.pid

    def submit(self, req: BatchRequest) -> None:
        if self._in_flight >= MAX_IN_FLIGHT:
            raise RuntimeError(f"{MAX_IN_FLIGHT} batches are already in flight")
        self._send(req)
        self._in_flight += 1

    def resume(self) -> None:
        """Apply again after a failure (call with no batch in flight)."""
        if self._in_flight:
            raise RuntimeError("resume() with batches in flight: collect their outcomes first")
        self._send(RESUME)

    def _send(self, message: object) -> None:
        try:
            self._conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:
            raise ApplierDied(f"the applier process ended (exit code {self._proc.poll()})") from exc

    def result(self) -> BatchOutcome:
        """The outcome of the oldest batch in flight (waits for it)."""
        if not self._in_flight:
            raise RuntimeError("no batch in flight")
        self._in_flight -= 1
        try:
            return pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as exc:
            try:
                code = self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
            raise ApplierDied(f"the applier process ended (exit code {code})") from exc

    def close(self) -> None:
        self._conn.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("the applier process did not end within 10 s; killing it")
            self._proc.kill()
            self._proc.wait(timeout=5)


def _child_env() -> dict[str, str]:
    """This environment, with the directory holding ``stream_dp`` first on PYTHONPATH (the child must
    import the same code as the loop, installed or not, from whatever working directory)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else os.pathsep.join([root, path])}


def serve(conn: Connection, parent_pid: int) -> None:  # pragma: no cover - runs in the applier process
    """The applier process: read the config, then apply requests until the socket closes."""
    _kill_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    from stream_dp.connections import redis_client

    try:
        cfg = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return
    from stream_dp.redact import register_config_secrets

    register_config_secrets(cfg)  # this process's log lines mask them too
    applier = BatchApplier(cfg, redis_client(cfg.redis))
    in_order = InOrder(applier)
    try:
        while True:
            try:
                raw = conn.recv_bytes()
            except (EOFError, OSError):
                return
            message = pickle.loads(raw)
            if isinstance(message, str) and message == RESUME:
                in_order.resume()
                continue
            out = in_order.outcome(message)
            try:
                conn.send_bytes(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:
                return
    finally:
        applier.close()


def _kill_with_parent(parent_pid: int) -> None:  # pragma: no cover - runs in the applier process
    """SIGKILL this process when its parent dies (nothing to finish: every chunk is atomic in Redis)."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the prctl
        os._exit(1)
