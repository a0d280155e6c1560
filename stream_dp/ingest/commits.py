"""Offsets of the ingest loop: the commit protocol, the rebalance handover, and the lag.

The loop (:mod:`stream_dp.ingest.worker`) tells :class:`OffsetCommits` which offsets a batch applied in
Redis (:meth:`OffsetCommits.applied`); only then are they committed to Kafka. The guarantee: an offset is
committed only after its records were applied (and their rejects dead-lettered), so a crash or rebalance can
only cause a replay, which the offset records in Redis skip -- never a loss.

- After each batch the commit is sent asynchronously; its outcome arrives during a later poll
  (:meth:`OffsetCommits.committed`). While one async commit is unanswered no other is sent: the offsets of
  the batches meanwhile go with the next one (small batches would otherwise fill the connection's in-flight
  slots, and commits would fail for no reason).
- When idle and on shutdown the commit is synchronous; before a rebalance hands partitions over it is sent
  and awaited by :class:`RebalanceListener`.
- A failed commit is retried with the next batch (a later commit covers it); a commit refused after a
  rebalance is dropped (the new owner replays, harmlessly).

Lag (:meth:`OffsetCommits.lags`): records behind the fetched high-water mark per owned partition, from the
next offset to apply (Tansu under-reports ``end_offsets``, so the fetch's high-water mark is used).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from kafka import TopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from stream_dp.ingest.caught_up import CaughtUpCheck
from stream_dp.ingest.dead_letters import DeadLetterWriter
from stream_dp.ingest.metrics import IngestMetrics

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, OffsetAndMetadata]


class OffsetCommits:
    """The offsets applied in Redis but not committed yet, the commit in flight, and the next offset to
    apply per owned partition (for the lag)."""

    def __init__(self, consumer: Any, topic: str, metrics: IngestMetrics, dead_letters: DeadLetterWriter, *,
                 caught_up: CaughtUpCheck) -> None:
        self.consumer = consumer
        self.caught_up = caught_up
        self.topic = topic
        self.metrics = metrics
        self.dead_letters = dead_letters
        self._pending: dict[TopicPartition, int] = {}  # applied in Redis, not yet committed
        self._in_flight: Any = None  # the future of the async commit not answered yet
        self._positions: dict[TopicPartition, int] = {}  # next offset per owned partition (for lag)

    def applied(self, last_offsets: dict[TopicPartition, int]) -> None:
        """A batch whose last offset per partition is ``last_offsets`` is applied in Redis."""
        for tp, off in last_offsets.items():
            self._pending[tp] = off + 1
            self._positions[tp] = off + 1

    def commit_pending(self, *, wait: bool = True) -> None:
        """Commit the offsets applied but not yet committed (module docstring: ``wait=False`` after each
        batch, synchronous when idle and on shutdown). A lost commit only means a replay."""
        if not self._pending:
            return
        if not wait and self._in_flight is not None and not self._in_flight.is_done:
            return
        offsets = self.pending_offsets()
        if not offsets:
            self._pending.clear()
            return
        if not wait:
            try:
                self._in_flight = self.consumer.commit_async(offsets, callback=self.committed)
            except KafkaError as exc:
                self.commit_failed(exc)
            return
        try:
            self.consumer.commit(offsets)
        except CommitFailedError as exc:
            self.commit_failed(exc)
            self._pending.clear()  # the group rebalanced under us: the new owners replay (harmless)
        except KafkaError as exc:
            self.commit_failed(exc)
        else:
            self.committed(offsets, None)

    def pending_offsets(self) -> Offsets:
        """The offsets to commit: applied in Redis, not committed yet, of partitions this worker owns."""
        owned = self.consumer.assignment()
        return {tp: OffsetAndMetadata(off, "", -1) for tp, off in self._pending.items() if tp in owned}

    def committed(self, offsets: Offsets, outcome: Any) -> None:
        """A commit's outcome (an exception, or anything else for success): forget what it covered."""
        if isinstance(outcome, BaseException):
            self.commit_failed(outcome)
            return
        for tp, meta in offsets.items():
            if self._pending.get(tp) == meta.offset:
                del self._pending[tp]
            self.dead_letters.forget(tp.topic, tp.partition, meta.offset)
        self.metrics.dependency_up.labels(dependency="kafka").set(1)

    def commit_failed(self, exc: BaseException) -> None:
        self.metrics.commits_failed.inc()
        if isinstance(exc, CommitFailedError):
            log.warning("offset commit refused after a rebalance (%s); the new owner replays", exc)
            return
        self.metrics.dependency_up.labels(dependency="kafka").set(0)
        log.warning("offset commit failed (%s: %s); retried with the next batch", type(exc).__name__, exc)

    def hand_over(self, revoked: set[TopicPartition]) -> None:
        """After the handover commit (or its failure): forget the revoked partitions."""
        for tp in revoked:
            self._pending.pop(tp, None)
            self._positions.pop(tp, None)
            self.dead_letters.forget_partition(tp.topic, tp.partition)
        self.caught_up.forget(revoked)

    # --- lag -------------------------------------------------------------------------------------------
    def lags(self) -> dict[TopicPartition, int]:
        """Records behind the fetched high-water mark per owned partition, a zero confirmed by the partition's
        leader (:class:`~stream_dp.ingest.caught_up.CaughtUpCheck`: the fetched mark is stale while fetches stall).

        A partition with no known high-water mark yet has no entry (it is not known to be caught up), nor one
        whose leader did not confirm its zero. An owned partition that delivered nothing since it was assigned
        counts from the consumer's position, if the consumer knows it without waiting (unknown stays unknown)."""
        lags = {}
        positions = dict(self._positions)
        for tp in self.consumer.assignment():
            # a known high-water mark means a fetch ran, so the position is initialised (no round trip)
            if tp.topic == self.topic and tp not in positions and self.consumer.highwater(tp) is not None:
                pos = self._position_now(tp)
                if pos is not None:
                    positions[tp] = pos
        for tp, pos in positions.items():
            hw = self.consumer.highwater(tp)
            if hw is not None:
                lags[tp] = max(0, hw - pos)
        return self.caught_up.confirm(lags, positions)

    def _position_now(self, tp: TopicPartition) -> int | None:
        """The consumer's fetch position of ``tp`` if it knows it already (never blocks), else None."""
        try:
            return self.consumer.position(tp, timeout_ms=0)
        except Exception:  # noqa: BLE001 - not initialised yet, or revoked meanwhile: unknown
            return None


class Handover(Protocol):
    """What the rebalance listener needs from the loop."""

    commits: OffsetCommits

    def prepare_handover(self, revoked: set[TopicPartition]) -> Offsets: ...

    def hand_over(self, revoked: set[TopicPartition]) -> None: ...

    def on_assigned(self, assigned: set[TopicPartition]) -> None: ...


class RebalanceListener(AsyncConsumerRebalanceListener):
    """The rebalance handover, on both consumer backends (:mod:`~stream_dp.ingest.consumers`).

    kafka-python (3.x) calls the ``on_partitions_*`` coroutines on its IO thread while the loop waits inside
    ``poll()``; a blocking consumer call is refused there, so the handover commit is sent and awaited on that
    thread's loop. confluent-kafka calls :meth:`revoke` / :meth:`assigned` inside ``consume()`` on the loop's
    thread, with a synchronous commit. Either way: the batches in flight are applied, then their offsets
    committed, then the partitions are forgotten."""

    def __init__(self, loop: Handover) -> None:
        self.loop = loop

    async def on_partitions_revoked(self, revoked: Any) -> None:
        loop, commits = self.loop, self.loop.commits
        offsets = loop.prepare_handover({tp for tp in revoked})
        if offsets:
            try:
                await commits.consumer.commit_async(offsets)
            except Exception as exc:  # noqa: BLE001 - a lost commit only means a replay the offset records skip
                commits.commit_failed(exc)
            else:
                commits.committed(offsets, None)
        loop.hand_over({tp for tp in revoked})

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.loop.on_assigned({tp for tp in assigned})

    def revoke(self, revoked: set[TopicPartition], commit: Callable[[Offsets], None] | None) -> None:
        """The handover with a blocking ``commit`` (None: the partitions are already lost, commit nothing)."""
        loop, commits = self.loop, self.loop.commits
        offsets = loop.prepare_handover(revoked)
        if offsets and commit is not None:
            try:
                commit(offsets)
            except Exception as exc:  # noqa: BLE001 - a lost commit only means a replay the offset records skip
                commits.commit_failed(exc)
            else:
                commits.committed(offsets, None)
        loop.hand_over(revoked)

    def assigned(self, assigned: set[TopicPartition]) -> None:
        self.loop.on_assigned(assigned)
