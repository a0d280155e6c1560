"""The ingest loop: Kafka consumer group → validated, windowed, contribution-bounded counts in Redis.

One iteration (a *batch*):

1. ``poll`` records of the partitions this worker owns;
2. decode and validate each record; rejects go to the dead-letter topic (original key and bytes, the
   reason and the source partition/offset in headers) and are counted by reason;
3. group valid events per (window, partition) in offset order; register new windows; drop events of
   closed windows as late;
4. apply every chunk in Redis (:class:`~stream_dp.ingest.store.WindowStore`: bounding + increments +
   offset record, atomically per chunk; already applied offsets are skipped);
5. wait for the dead-letter writes; advance the watermark (per-partition watermarks and activity → global;
   windows it closes are marked closed first);
6. commit the batch's offsets to Kafka — only now.

If Redis or the broker fails in steps 3–5, the consumer is rewound to the batch's first offsets and the
batch is retried after a capped exponential backoff: the offset records make the replay harmless. A failed
commit is retried with the next batch (a later commit covers it). On a rebalance, revoked partitions get
their last offsets committed and their local watermark state is dropped; assigned partitions resume from
their committed offsets (anything applied after that is skipped in Redis).

Stop with :meth:`IngestWorker.stop` (the wiring calls it on SIGTERM/SIGINT): the current batch finishes,
its offsets are committed, the clients are closed, and a log line says why the loop ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
from kafka import TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from stream_dp.config import Config
from stream_dp.ingest.decode import Event, EventDecoder
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.store import Chunk, WindowStore
from stream_dp.ingest.windowing import PartitionClock
from stream_dp.keys import Keys

log = logging.getLogger(__name__)

#: Redis errors worth retrying (the server went away, is loading its data, or a cluster is resharding).
_TRANSIENT_REDIS_REPLIES = ("LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOSCRIPT")


def is_transient(exc: BaseException) -> str | None:
    """The dependency a retriable error came from (``"redis"`` / ``"kafka"``), or None if not retriable."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return "redis"
    if isinstance(exc, redis.ResponseError) and str(exc).startswith(_TRANSIENT_REDIS_REPLIES):
        return "redis"
    if isinstance(exc, KafkaError):
        return "kafka"
    return None


class Backoff:
    """Capped exponential delays: initial, 2·initial, … up to ``cap``; :meth:`reset` after a success.

    >>> b = Backoff(0.1, 0.5)
    >>> [b.next_delay() for _ in range(5)]
    [0.1, 0.2, 0.4, 0.5, 0.5]
    """

    def __init__(self, initial: float, cap: float) -> None:
        self.initial, self.cap = initial, cap
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return delay

    def reset(self) -> None:
        self._next = self.initial


@dataclass
class _Owned:
    """Partitions this worker owns: (watermark, busy) each, plus every partition of the topic."""

    marks: dict[int, tuple[float | None, bool]]
    known: frozenset[int]


@dataclass
class _Batch:
    """One poll's records on their way through the loop."""

    t0: float
    n: int = 0
    chunks: dict[tuple[int, int], list[tuple[int, str, str]]] = field(default_factory=dict)
    rejects: list[tuple[Any, str]] = field(default_factory=list)
    first_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    last_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    dead_letters: list[Any] = field(default_factory=list)
    owned: _Owned | None = None
    future: Future | None = None


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, worker: "IngestWorker") -> None:
        self.worker = worker

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.worker._on_revoked({tp for tp in revoked})

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.worker._on_assigned({tp for tp in assigned})


class IngestWorker:
    """Runs the loop over injected clients (consumer not yet subscribed, producer, Redis)."""

    def __init__(self, cfg: Config, *, consumer: Any, producer: Any, redis_client: redis.Redis,
                 metrics: IngestMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.topic = cfg.kafka.events_topic
        self.consumer = consumer
        self.producer = producer
        self.metrics = metrics
        self.clock = clock
        self.decoder = EventDecoder(cfg.events)
        self.store = WindowStore(redis_client, keys=Keys(cfg.redis.key_prefix), window_size=cfg.windows.size_seconds,
                                 unit=cfg.contribution.unit, max_keys_per_user=cfg.contribution.max_keys_per_user)
        self.partition_clock = PartitionClock(cfg.windows.allowed_lateness_seconds)
        self.backoff = Backoff(cfg.ingest.backoff_initial_seconds, cfg.ingest.backoff_max_seconds)
        self._stop = threading.Event()
        self._pending_commit: dict[TopicPartition, int] = {}  # applied in Redis, not yet committed
        self._positions: dict[TopicPartition, int] = {}  # next offset per owned partition (for lag)
        self._registered: set[int] = set()  # windows this worker registered (cache)
        self._closed_through: float | None = None  # max(global, closing) as last seen
        self._known_partitions: set[int] = set()
        self._last_advance = float("-inf")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-redis")
        self._inflight: _Batch | None = None  # submitted to the Redis thread, not yet committed
        self._failed_batch: _Batch | None = None  # being drained when an error struck (to rewind)
        self.batches = 0

    # --- control ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish the current batch, commit and close (safe from a signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> str:
        """Run until :meth:`stop`; returns why the loop ended (also logged). Unexpected errors propagate."""
        self.consumer.subscribe([self.topic], listener=_Rebalance(self))
        log.info("ingest started: topic %s, group %s, windows of %ss, unit %s, max %d keys per user",
                 self.topic, self.cfg.kafka.ingest_group_id, self.cfg.windows.size_seconds,
                 self.cfg.contribution.unit, self.cfg.contribution.max_keys_per_user)
        reason = "stop requested"
        try:
            while not self._stop.is_set():
                self.step()
        except BaseException as exc:
            reason = f"unexpected error {type(exc).__name__}"
            log.exception("ingest loop ended by an unexpected error; offsets of unapplied records stay uncommitted")
            raise
        finally:
            self._shutdown(reason)
        return reason

    def _shutdown(self, reason: str) -> None:
        try:
            self._drain()
        except Exception as exc:  # noqa: BLE001 - the unfinished batch is replayed on the next start
            log.warning("last batch not applied (%s: %s); it will be replayed", type(exc).__name__, exc)
        self._commit_pending()
        self._executor.shutdown(wait=True)
        for name, close in (("consumer", lambda: self.consumer.close(autocommit=False)),
                            ("producer", lambda: self.producer.close(timeout=5))):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing must not mask why we stopped
                log.warning("closing the %s failed", name, exc_info=True)
        self.metrics.up.set(0)
        log.info("ingest stopped (%s) after %d batches", reason, self.batches)

    # --- one iteration ---------------------------------------------------------------------------
    def step(self) -> None:
        """Poll once; decode what came while the previous batch is applied in Redis; finish the previous
        batch (dead letters, commit); hand the new one to the Redis thread. When nothing came, finish the
        previous batch and keep the watermark moving."""
        try:
            records = self.consumer.poll(timeout_ms=self.cfg.ingest.poll_timeout_ms)
        except KafkaError as exc:
            self._failed("kafka", exc, [])
            return
        batch = self._prepare(records) if records else None
        try:
            self._drain()
            if batch is not None:
                self._submit(batch)
            elif self.clock() - self._last_advance >= self.cfg.ingest.watermark_interval_seconds:
                self._note_watermark(self.store_advance(self._owned_state(set())))
                self._commit_pending()
        except Exception as exc:  # noqa: BLE001 - classified below; non-transient ones re-raise
            dep = is_transient(exc)
            if dep is None:
                raise
            self._failed(dep, exc, [b for b in (self._failed_batch, batch) if b is not None])
            return
        self.backoff.reset()
        self.metrics.up.set(1)
        self._update_lag()

    def _failed(self, dependency: str, exc: BaseException, batches: list["_Batch"]) -> None:
        """Rewind to the start of the unfinished batches, mark the dependency down, wait (stop-aware)."""
        self._failed_batch = None
        self.metrics.errors.labels(dependency=dependency).inc()
        self.metrics.dependency_up.labels(dependency=dependency).set(0)
        self.metrics.up.set(0)
        self._rewind(batches)
        delay = self.backoff.next_delay()
        log.warning("%s unavailable (%s: %s); batch will be retried in %.2fs", dependency, type(exc).__name__,
                    exc, delay)
        self._stop.wait(delay)

    def _rewind(self, batches: list["_Batch"]) -> None:
        first: dict[TopicPartition, int] = {}
        for b in batches:
            for tp, off in b.first_offsets.items():
                first[tp] = min(off, first.get(tp, off))
        owned = self.consumer.assignment()
        for tp, off in first.items():
            if tp in owned:
                try:
                    self.consumer.seek(tp, off)
                except Exception:  # noqa: BLE001 - revoked meanwhile: its new owner replays it
                    log.info("could not rewind partition %d (no longer owned)", tp.partition)

    def _prepare(self, records: dict) -> "_Batch":
        """Decode and group one poll's records; send its rejects to the dead-letter topic (no Redis yet)."""
        b = _Batch(t0=time.perf_counter())
        decode, fast = self.decoder.decode, self.decoder.fields
        size = self.cfg.windows.size_seconds
        chunks = b.chunks
        for tp, recs in records.items():
            if not recs:
                continue
            p = tp.partition
            b.n += len(recs)
            max_ts = float("-inf")
            for rec in recs:
                f = fast(rec.value, rec.timestamp)
                if f is None:
                    ev = decode(rec.value, partition=p, offset=rec.offset, timestamp_ms=rec.timestamp)
                    if type(ev) is not Event:
                        b.rejects.append((rec, ev.reason))
                        continue
                    f = (ev.user, ev.key, ev.ts)
                user, key, ts = f
                if ts > max_ts:
                    max_ts = ts
                start = int(ts // size) * size
                chunk = chunks.get((start, p))
                if chunk is None:
                    chunk = chunks[(start, p)] = []
                chunk.append((rec.offset, user, key))
            if max_ts > float("-inf"):
                self.partition_clock.observe(p, max_ts)
            b.first_offsets[tp] = recs[0].offset
            b.last_offsets[tp] = recs[-1].offset
        self.metrics.consumed.inc(b.n)
        self.metrics.batch_events.observe(b.n)
        b.dead_letters = self._dead_letter(b.rejects)
        b.owned = self._owned_state({tp.partition for tp in b.last_offsets})
        return b

    def _submit(self, b: "_Batch") -> None:
        """Apply a batch in Redis on the Redis thread (one batch in flight: chunk order must be kept)."""
        closed = self._closed_through
        b.future = self._executor.submit(self._apply_and_advance, b.chunks, b.owned, closed)
        self._inflight = b

    def _apply_and_advance(self, chunks: dict, owned: "_Owned", closed: float | None) -> tuple[int, Any]:
        late = self._apply(chunks, closed)
        return late, self.store_advance(owned)

    def _drain(self) -> None:
        """Finish the batch in flight: wait for Redis, then its dead letters, then commit its offsets."""
        b = self._inflight
        if b is None:
            return
        self._inflight = None
        self._failed_batch = b
        late, wm_state = b.future.result()
        self._await_dead_letters(b.dead_letters)
        self._failed_batch = None
        self._note_watermark(wm_state)
        for tp, off in b.last_offsets.items():
            self._pending_commit[tp] = off + 1
            self._positions[tp] = off + 1
        self._commit_pending()
        m = self.metrics
        for _rec, reason in b.rejects:
            m.rejected.labels(reason=reason).inc()
        m.late.inc(late)
        self.batches += 1
        m.batch_duration.observe(time.perf_counter() - b.t0)

    def _apply(self, chunks: dict[tuple[int, int], list[tuple[int, str, str]]], closed: float | None) -> int:
        """Register new windows, apply every chunk (Redis thread); returns the number of late events."""
        size = self.cfg.windows.size_seconds
        late = 0
        new = {start for start, _ in chunks if start not in self._registered
               and (closed is None or start + size > closed)}
        refused: set[int] = set()
        if new:
            flags = self.store.register_windows(new)
            self._registered.update(s for s, ok in flags.items() if ok)
            refused = {s for s, ok in flags.items() if not ok}
        # closed windows still go to Redis: it tells replayed (duplicate) events from late ones
        todo = [Chunk.of(start, p, evs, closed=start in refused) for (start, p), evs in chunks.items()]
        results = self.store.apply(todo, closed_through=closed)
        self.metrics.dependency_up.labels(dependency="redis").set(1)
        m = self.metrics
        applied = dup = linf = l0 = 0
        for r in results:
            applied += r.applied
            dup += r.duplicate
            linf += r.linf
            l0 += r.l0
            late += r.late
        m.applied.inc(applied)
        m.duplicate.inc(dup)
        if dup:
            log.info("skipped %d events already applied (a replay after a crash or rebalance)", dup)
        m.bounded.labels(rule="linf").inc(linf)
        m.bounded.labels(rule="l0").inc(l0)
        return late

    # --- dead letters ----------------------------------------------------------------------------
    def _dead_letter(self, rejects: list[tuple[Any, str]]) -> list[Any]:
        futures = []
        for rec, reason in rejects:
            headers = [("reason", reason.encode()), ("source_topic", rec.topic.encode()),
                       ("source_partition", str(rec.partition).encode()),
                       ("source_offset", str(rec.offset).encode())]
            futures.append(self.producer.send(self.cfg.kafka.dead_letter_topic, key=rec.key, value=rec.value,
                                              headers=headers))
        return futures

    def _await_dead_letters(self, futures: list[Any]) -> None:
        if not futures:
            return
        timeout = self.cfg.ingest.dead_letter_timeout_seconds
        self.producer.flush(timeout=timeout)
        for fut in futures:
            fut.get(timeout=timeout)  # raises the KafkaError if the write failed → the batch is retried
        self.metrics.dead_lettered.inc(len(futures))
        self.metrics.dependency_up.labels(dependency="kafka").set(1)

    # --- watermark, commits, lag -----------------------------------------------------------------
    def _owned_state(self, busy: set[int]) -> "_Owned":
        """What the watermark advance needs from the consumer (read on the consumer's thread)."""
        owned = {tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic}
        if not self._known_partitions:
            self._known_partitions = set(self.consumer.partitions_for_topic(self.topic) or ())
        lagging = {tp.partition for tp, lag in self._lags().items() if lag > 0}
        marks = {p: (self.partition_clock.watermark(p), p in busy or p in lagging) for p in owned}
        return _Owned(marks, frozenset(self._known_partitions))

    def store_advance(self, owned: "_Owned") -> Any:
        return self.store.advance_watermark(owned.marks, known_partitions=owned.known,
                                            idle_timeout=self.cfg.windows.idle_partition_timeout_seconds)

    def _note_watermark(self, state: Any) -> None:
        self._last_advance = self.clock()
        self._closed_through = state.closing_through
        if state.global_watermark is not None:
            self.metrics.watermark.set(state.global_watermark)
        self.metrics.windows_open.set(state.windows_open)
        if state.windows_closed:
            log.info("global watermark %.3f closed %d window(s)", state.global_watermark or 0.0,
                     len(state.windows_closed))
        self.metrics.dependency_up.labels(dependency="redis").set(1)

    def _commit_pending(self) -> None:
        if not self._pending_commit:
            return
        owned = self.consumer.assignment()
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in self._pending_commit.items() if tp in owned}
        if not offsets:
            self._pending_commit.clear()
            return
        try:
            self.consumer.commit(offsets)
        except CommitFailedError as exc:
            # the group rebalanced under us: the new owners replay from the last commit (harmless)
            self.metrics.commits_failed.inc()
            log.warning("offset commit refused after a rebalance (%s); the new owner replays", exc)
            self._pending_commit.clear()
        except KafkaError as exc:
            self.metrics.commits_failed.inc()
            self.metrics.dependency_up.labels(dependency="kafka").set(0)
            log.warning("offset commit failed (%s: %s); retried with the next batch", type(exc).__name__, exc)
        else:
            for tp in offsets:
                if self._pending_commit.get(tp) == offsets[tp].offset:
                    del self._pending_commit[tp]
            self.metrics.dependency_up.labels(dependency="kafka").set(1)

    def _lags(self) -> dict[TopicPartition, int]:
        """Records behind the fetched high-water mark per owned partition (Tansu under-reports end_offsets)."""
        lags = {}
        for tp, pos in self._positions.items():
            hw = self.consumer.highwater(tp)
            if hw is not None:
                lags[tp] = max(0, hw - pos)
        return lags

    def _update_lag(self) -> None:
        self.metrics.lag.set(sum(self._lags().values()))

    # --- rebalance callbacks (run inside poll, between batches) -----------------------------------
    def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        self.metrics.rebalances.labels(change="revoked").inc()
        log.info("partitions revoked: %s", sorted(tp.partition for tp in revoked))
        try:
            self._drain()  # finish the batch in flight so its offsets can be committed before handing over
        except Exception as exc:  # noqa: BLE001 - the new owner replays it (the offset records skip duplicates)
            self._failed_batch = None
            log.warning("batch in flight not applied before the rebalance (%s: %s); the new owner replays it",
                        type(exc).__name__, exc)
        self._commit_pending()
        for tp in revoked:
            self._pending_commit.pop(tp, None)
            self._positions.pop(tp, None)
        self.partition_clock.forget({tp.partition for tp in revoked})

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.metrics.rebalances.labels(change="assigned").inc()
        self.metrics.partitions.set(len(assigned))
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))
