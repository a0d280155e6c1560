"""The ingest loop: Kafka consumer group → validated, windowed, contribution-bounded counts in Redis.

One iteration (a *batch*):

1. ``poll`` records of the partitions this worker owns;
2. hand them, as columns (:mod:`~stream_dp.ingest.batches`), to the applier (:mod:`~stream_dp.ingest.applier`: decode and validate, group
   valid events per (window, partition), register new windows, apply every chunk in Redis — bounding,
   increments and offset record atomically per chunk, already applied offsets skipped — then advance the
   watermark), queued behind the previous batch: the applier takes two and applies them in order, and
   one queued behind a failed batch is not applied until the loop has rewound;
3. take the previous batch's outcome; send its rejects to the dead-letter topic (original key and bytes,
   the reason and the source partition/offset in headers; a bounded form when that does not fit, see
   :mod:`~stream_dp.ingest.dead_letters`) and wait for them; count everything by reason;
4. commit the batch's offsets to Kafka — only now (:mod:`~stream_dp.ingest.commits`: asynchronously, the
   outcome collected in a later poll; synchronously on shutdown and when idle; awaited before a rebalance
   hands partitions over).

If Redis or the broker fails in steps 2–3, the consumer is rewound to the batch's first offsets and the
batch is retried after a capped exponential backoff with jitter (:mod:`stream_dp.backoff`; it restarts
only once a batch went through): the offset records make the replay harmless, and dead letters already
written are not written again. A failed
commit is retried with the next batch (a later commit covers it). On a rebalance, revoked partitions get
their last offsets committed and their local watermark state is dropped; assigned partitions resume from
their committed offsets (anything applied after that is skipped in Redis). The lag per partition is
computed once per step, right after the poll: the request's watermark inputs and the lag metric use it.

Stop with :meth:`IngestWorker.stop` (the wiring calls it on SIGTERM/SIGINT): the current batch finishes,
its offsets are committed, the clients are closed, and a log line says why the loop ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import redis
from kafka import TopicPartition
from kafka.errors import KafkaError

from stream_dp.backoff import Backoff
from stream_dp.config import Config
from stream_dp.ingest.applier import ApplyFailed, BatchApplier, BatchOutcome, BatchRequest
from stream_dp.ingest.batches import Batch, BatchCutter
from stream_dp.ingest.caught_up import CaughtUpCheck, EndOffsetAsker, valid_for
from stream_dp.ingest.commits import OffsetCommits, Offsets, RebalanceListener
from stream_dp.ingest.consumers import BrokersUnreachable, records_of
from stream_dp.ingest.runners import ThreadRunner
from stream_dp.ingest.dead_letters import DeadLetterWriter
from stream_dp.ingest.failures import describe_failure, is_transient
from stream_dp.ingest.late_notice import LateNotice
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.state_check import lost_while_running, until_done
from stream_dp.ingest.watermarks import WatermarkState
from stream_dp.ingest.topic_identity import TopicRecreated, TopicWatch
from stream_dp.refusals import Refusal

log = logging.getLogger(__name__)


class Runner(Protocol):
    """Where batches are applied (:class:`~stream_dp.ingest.runners.ThreadRunner` or ``ProcessRunner``)."""

    def submit(self, req: BatchRequest) -> None: ...

    def result(self) -> BatchOutcome: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


class IngestWorker:
    """Runs the loop over injected clients: the consumer (not yet subscribed), the dead-letter producer, what
    asks the partition leaders for their end offsets (``end_offsets``: :mod:`~stream_dp.ingest.caught_up`), and
    either a ``runner`` for the applier or a ``redis_client`` (then the applier runs on a thread)."""

    def __init__(self, cfg: Config, *, consumer: Any, producer: Any, metrics: IngestMetrics,
                 end_offsets: EndOffsetAsker, redis_client: redis.Redis | None = None, runner: Runner | None = None,
                 clock: Callable[[], float] = time.monotonic, topic_guard: Callable[[], object] | None = None,
                 before_start: Callable[[], object] | None = None) -> None:
        if runner is None:
            if redis_client is None:
                raise ValueError("IngestWorker needs a runner or a redis_client")
            runner = ThreadRunner(BatchApplier(cfg, redis_client))
        self.cfg = cfg
        self.topic = cfg.kafka.events_topic
        self.consumer = consumer
        self.records = records_of(consumer)  # how to read what its poll returns (kafka-python or confluent)
        self.producer = producer
        self.metrics = metrics
        self.runner = runner
        self.clock = clock
        self.backoff = Backoff(cfg.ingest.backoff_initial_seconds, cfg.ingest.backoff_max_seconds)
        self.dead_letters = DeadLetterWriter(producer, cfg.kafka.dead_letter_topic, metrics,
                                             max_request_bytes=cfg.ingest.dead_letter_max_request_bytes,
                                             timeout_seconds=cfg.ingest.dead_letter_timeout_seconds)
        caught_up = CaughtUpCheck(end_offsets,
                                  valid_for=valid_for(cfg.windows.idle_partition_timeout_seconds,
                                                      cfg.ingest.poll_timeout_ms / 1000))
        self.commits = OffsetCommits(consumer, self.topic, metrics, self.dead_letters, caught_up=caught_up)
        self.late = LateNotice(cfg.windows)  # a rate-limited line for events dropped as late
        self._progressed = False  # a batch outcome came back applied since the last failure
        self._kafka_down = False  # the consumer reported the brokers unreachable (:meth:`_brokers_unreachable`)
        self._stop = threading.Event()
        self._last_advance = float("-inf")
        self._inflight: deque[Batch] = deque()  # submitted to the applier, oldest first (at most 2)
        self._failed_batch: Batch | None = None  # being drained when an error struck (to rewind)
        self.batches = 0
        self.topic_watch = TopicWatch(topic_guard, clock)  # is the events topic the one the offsets belong to?
        self.cutter = BatchCutter(consumer, self.topic, self.records, metrics, self.topic_watch)  # polls → batches
        # start steps that need Redis and the broker (the ingest epoch check, stream_dp.ingest.state_check):
        # retried with backoff until both answer; once done, every watermark advance checks the epoch too
        self.before_start = before_start
        self._epoch_checked = False

    # --- control ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish the current batch, commit and close (safe from a signal handler)."""
        self._stop.set()

    def run(self) -> str:
        """Run until :meth:`stop`; returns why the loop ended (also logged). Unexpected errors propagate."""
        self.consumer.subscribe([self.topic], listener=RebalanceListener(self))
        log.info("ingest started: topic %s, group %s, windows of %ss, unit %s, max %d keys per user",
                 self.topic, self.cfg.kafka.ingest_group_id, self.cfg.windows.size_seconds,
                 self.cfg.contribution.unit, self.cfg.contribution.max_keys_per_user)
        reason = "stop requested"
        try:
            self._start()
            while not self._stop.is_set():
                self.step()
        except TopicRecreated as exc:  # an operator's matter: one line, no traceback, nothing committed
            reason = "events topic recreated"
            log.error("%s", exc)
            raise
        except Refusal as exc:  # lost state, refused credentials: logged in one line by the runtime (exit 2)
            reason = f"refused: {type(exc).__name__}"
            raise
        except BaseException as exc:
            reason = f"unexpected error {type(exc).__name__}"
            log.exception("ingest loop ended by an unexpected error; offsets of unapplied records stay uncommitted")
            raise
        finally:
            self._shutdown(reason)
        return reason

    def _start(self) -> None:
        """``before_start`` until it is done or a stop is requested (:func:`~stream_dp.ingest.state_check.until_done`)."""
        if self.before_start is not None and not self._epoch_checked:
            self._epoch_checked = until_done(self.before_start, self.cfg, self.backoff, self._stop)

    def _shutdown(self, reason: str) -> None:
        try:
            self._drain_all()
        except Exception as exc:  # noqa: BLE001 - the unfinished batch is replayed on the next start
            log.warning("last batch not applied (%s: %s); it will be replayed", type(exc).__name__, exc)
        if self.topic_watch.recreated is None:  # never commit the old topic's offsets onto the new topic's
            self.commits.commit_pending()
        for name, close in (("applier", self.runner.close),
                            ("consumer", lambda: self.consumer.close(autocommit=False)),
                            ("producer", lambda: self.producer.close(timeout=5))):
            try:
                close()
            except Exception:  # closing must not mask why we stopped
                log.warning("closing the %s failed", name, exc_info=True)
        self.metrics.up.set(0)
        log.info("ingest stopped (%s) after %d batches", reason, self.batches)

    # --- one iteration ---------------------------------------------------------------------------
    def step(self) -> None:
        """Poll once and hand the new batch to the applier at once (it queues behind the batch in flight),
        then finish the previous batch (dead letters, commit) while the applier works on the new one.
        When nothing came, finish what is in flight and keep the watermark moving.

        While a batch is in flight the poll does not wait (it takes what is already fetched): the last batch
        of a burst is finished -- metrics, dead letters, offsets committed -- as soon as the applier is done
        with it, not after a poll that waited ``ingest.poll_timeout_ms`` for records that did not come."""
        timeout_ms = 0 if self._inflight else self.cfg.ingest.poll_timeout_ms
        self.topic_watch.tick()
        try:
            records = self.consumer.poll(timeout_ms=timeout_ms)
        except KafkaError as exc:
            self._failed("kafka", exc, [])
            return
        self.topic_watch.raise_if_recreated()
        if not records and self._brokers_unreachable():
            return
        lags = self.commits.lags()  # once per step: the request's watermark inputs and the lag metric
        batch = self.cutter.cut(records, lags, epoch_required=self._epoch_checked) if records else None
        try:
            if batch is not None:
                self._submit(batch)
                while len(self._inflight) > 1:
                    self._drain()
            else:
                self._drain_all()
                if self.clock() - self._last_advance >= self.cfg.ingest.watermark_interval_seconds:
                    self._submit(self.cutter.idle(lags, epoch_required=self._epoch_checked))
                    self._drain_all()
                    self.commits.commit_pending()
        except Exception as exc:  # classified below; non-transient ones re-raise
            dep = is_transient(exc)
            if dep is None:
                raise
            self._failed(dep, exc, self._abandon(batch))
            return
        if self._progressed:  # not merely "nothing failed yet": a batch went through since the last failure
            self.backoff.reset()
            self._progressed = False
        self.metrics.up.set(1)
        self.metrics.lag.set(sum(lags.values()))

    def _brokers_unreachable(self) -> bool:
        """After an empty poll: whether the consumer knows the brokers to be unreachable (its ``unreachable()``,
        :mod:`~stream_dp.ingest.consumers`: both clients retry by themselves and return nothing meanwhile).
        Then the step counts as a failed Kafka call: ``dependency_up{kafka}`` and ``up`` go to 0 and the loop
        backs off, as when a poll raises; no request goes to the applier, so no partition is reported caught
        up to a high-water mark the client could not refresh. The first step that reaches the brokers again
        sets ``dependency_up{kafka}`` to 1."""
        check = getattr(self.consumer, "unreachable", None)
        why = check() if check is not None else None
        if why is None:
            if self._kafka_down:
                self._kafka_down = False
                self.metrics.dependency_up.labels(dependency="kafka").set(1)
            return False
        self._kafka_down = True
        self._failed("kafka", BrokersUnreachable(f"all brokers down: {why}"), [])
        return True

    def _abandon(self, polled: "Batch | None") -> list[Batch]:
        """After a failure: the batches to rewind to — the one that failed, those still in flight, the
        one just polled. The outcomes in flight are collected and dropped (the applier refused them after
        the failure, or applied them, which the replay skips); then the applier may apply again."""
        batches = {id(b): b for b in (self._failed_batch, *self._inflight, polled) if b is not None}
        self._failed_batch = None
        self._discard_in_flight()
        return list(batches.values())

    def _discard_in_flight(self) -> None:
        while self._inflight:
            self._inflight.popleft()
            self.runner.result()
        self.runner.resume()

    def _failed(self, dependency: str, exc: BaseException, batches: list[Batch]) -> None:
        """Rewind to the start of the unfinished batches, mark the dependency down, wait (stop-aware)."""
        self._failed_batch = None
        self._progressed = False
        self.metrics.errors.labels(dependency=dependency).inc()
        self.metrics.dependency_up.labels(dependency=dependency).set(0)
        self.metrics.up.set(0)
        self._rewind(batches)
        delay = self.backoff.next_delay()
        log.warning("%s; batch will be retried in %.2fs (attempt %d)", describe_failure(dependency, exc), delay,
                    self.backoff.failures + 1)
        self._stop.wait(delay)

    def _rewind(self, batches: list[Batch]) -> None:
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

    def _submit(self, b: Batch) -> None:
        """Hand a batch to the applier, which applies batches strictly in order (chunk order is kept)."""
        self.runner.submit(b.request)
        self._inflight.append(b)

    def _drain_all(self) -> None:
        while self._inflight:
            self._drain()

    def _drain(self) -> None:
        """Finish the oldest batch in flight: its outcome, then its dead letters, then commit its offsets."""
        if not self._inflight:
            return
        b = self._inflight.popleft()
        self._failed_batch = b
        out = self.runner.result()
        if out.failure is not None:
            lost = lost_while_running(self.cfg, out.failure.message)
            if lost is not None:
                raise lost
            raise ApplyFailed(out.failure)
        m = self.metrics
        m.dependency_up.labels(dependency="redis").set(1)
        m.applied.inc(out.applied)
        m.duplicate.inc(out.duplicate)
        m.replanned.inc(out.replanned)
        if out.duplicate:
            log.info("skipped %d events already applied (a replay after a crash or rebalance)", out.duplicate)
        m.bounded.labels(rule="linf").inc(out.linf)
        m.bounded.labels(rule="l0").inc(out.l0)
        if out.rejects:
            self.dead_letters.write(b.rejected(self.records, out.rejects))
        self._failed_batch = None
        self._progressed = True
        self._note_watermark(out.watermark)
        if b.idle:
            return
        self.commits.applied(b.last_offsets)
        self.commits.commit_pending(wait=False)
        for _p, _i, reason in out.rejects:
            m.rejected.labels(reason=reason).inc()
        m.late.inc(out.late)
        self.late.add(out.late)
        m.shard_fill.set(out.fill)
        m.clock_ticks.inc(out.ticks)
        self.batches += 1
        m.batch_duration.observe(time.perf_counter() - b.t0)

    # --- watermark -------------------------------------------------------------------------------
    def _note_watermark(self, state: WatermarkState | None) -> None:
        self._last_advance = self.clock()
        if state is None:
            return
        if state.global_watermark is not None:
            self.metrics.watermark.set(state.global_watermark)
        self.metrics.windows_open.set(state.windows_open)
        if state.windows_closed:
            log.info("global watermark %.3f closed %d window(s)", state.global_watermark or 0.0,
                     len(state.windows_closed))

    # --- rebalance callbacks (run inside poll, between batches; :class:`RebalanceListener`) ----------
    def prepare_handover(self, revoked: set[TopicPartition]) -> Offsets:
        """Before partitions go to another worker: finish the batch in flight, and return the offsets
        applied but not committed yet (the listener commits them before the group moves on)."""
        if not revoked:
            return {}
        self.metrics.rebalances.labels(change="revoked").inc()
        log.info("partitions revoked: %s", sorted(tp.partition for tp in revoked))
        try:
            self._drain_all()  # finish the batches in flight so their offsets can be committed before handing over
        except Exception as exc:  # noqa: BLE001 - the new owner replays it (the offset records skip duplicates)
            self._failed_batch = None
            log.warning("batch in flight not applied before the rebalance (%s); the new owner replays it",
                        exc if isinstance(exc, ApplyFailed) else f"{type(exc).__name__}: {exc}")
            self._discard_in_flight()
        return self.commits.pending_offsets()

    def hand_over(self, revoked: set[TopicPartition]) -> None:
        """After the handover commit (or its failure): forget the revoked partitions."""
        self.commits.hand_over(revoked)
        self.cutter.revoked(revoked)

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.topic_watch.assigned()
        self.metrics.rebalances.labels(change="assigned").inc()
        self.metrics.partitions.set(len(assigned))
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))
