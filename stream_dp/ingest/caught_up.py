"""Caught up, as the partition's leader says: the idle rule's evidence for a quiet partition.

The watermark lets a quiet partition go idle -- stop holding the global watermark back -- only while its owner
reports it *caught up*: its position has reached the high-water mark (:mod:`~stream_dp.ingest.windowing`). The
lag the loop knows (:meth:`~stream_dp.ingest.commits.OffsetCommits.lags`) uses the high-water mark of the last
fetch response, and that is stale exactly when it matters: while a partition's leader fails over, the
consumer's fetches of it stall, its cached mark stays where the last fetch left it, and the partition looks
caught up *and* quiet. After ``windows.idle_partition_timeout_seconds`` the global watermark passed it, and the
records produced to its new leader meanwhile were late when they came (measured on a 3-broker Apache Kafka,
the leader of events-0 SIGKILLed, idle timeout 3 s: 560 events dropped as late in two windows;
tests/chaos/test_kafka_leader_kills.py).

:class:`CaughtUpCheck` confirms a zero cached lag with the partition's leader: its end offset (ListOffsets),
asked on an admin client's own connections (:class:`LeaderEndOffsets`) -- the consumer's connection would
queue the question behind its fetch long-poll -- and never waited for: the loop collects the answer at a
later step. A partition stays caught up while the leader's latest answer is less than ``valid_for`` seconds
old (counted from when it was asked) and at or below the position; an answer above the position makes it
lagging (busy, so active); with no fresh answer it is dropped from the lags (neither busy nor caught up:
active, holding the global at its watermark). So a partition can be reported caught up at most ``valid_for``
after its leader last said so. Answers are asked again at half that age, one request in flight at a time.
The cached lag is never lowered: a broker that under-reports its end offset (Tansu counts a batch as one)
leaves the rule as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from kafka import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["CaughtUpCheck", "EndOffsetAsker", "LeaderEndOffsets", "valid_for"]

#: The longest a leader's answer confirms a partition caught up (seconds), whatever the idle timeout.
MAX_VALID_FOR = 5.0


def valid_for(idle_timeout: float, poll_timeout: float) -> float:
    """How long an answer confirms: half the idle timeout, at most :data:`MAX_VALID_FOR`, and at least three
    poll timeouts (an answer asked at one step is collected at a later one, and must still be fresh then).

    >>> valid_for(30.0, 0.5), valid_for(3.0, 0.2), valid_for(1.0, 0.5)
    (5.0, 1.5, 1.5)
    """
    return max(min(idle_timeout / 2, MAX_VALID_FOR), 3 * poll_timeout)


class EndOffsetAsker(Protocol):
    """Sends one ListOffsets question for ``partitions`` and returns a future per partition (its end offset)."""

    def ask(self, partitions: list[TopicPartition], timeout_s: float) -> Mapping[TopicPartition, Future[int]]: ...


class LeaderEndOffsets:
    """:class:`EndOffsetAsker` on a confluent-kafka admin client (its own connections to the leaders)."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def ask(self, partitions: list[TopicPartition], timeout_s: float) -> dict[TopicPartition, Future[int]]:
        from confluent_kafka import TopicPartition as CKPartition
        from confluent_kafka.admin import OffsetSpec

        question = {CKPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in partitions}
        out: dict[TopicPartition, Future[int]] = {}
        for ck, answer in self.admin.list_offsets(question, request_timeout=timeout_s).items():
            end: Future[int] = Future()
            answer.add_done_callback(lambda f, end=end: _settle(end, f))
            out[TopicPartition(ck.topic, ck.partition)] = end
        return out


def _settle(end: Future[int], answer: Future[Any]) -> None:
    """``end`` gets ``answer``'s offset, or its error."""
    exc = answer.exception()
    if exc is not None:
        end.set_exception(exc)
    else:
        end.set_result(int(answer.result().offset))


class CaughtUpCheck:
    """Confirms each zero cached lag with the partition leader's latest answer (module docstring)."""

    def __init__(self, asker: EndOffsetAsker, *, valid_for: float, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.asker = asker
        self.valid_for = valid_for
        self.clock = clock
        self._answers: dict[TopicPartition, tuple[float, int]] = {}  # (asked at, end offset)
        self._in_flight: tuple[float, Mapping[TopicPartition, Future[int]]] | None = None

    def confirm(self, lags: dict[TopicPartition, int], positions: dict[TopicPartition, int]
                ) -> dict[TopicPartition, int]:
        """``lags`` with every zero lag confirmed by a fresh answer: kept, raised to the leader's end offset
        minus the position, or dropped (unknown). Never waits: asks for what needs a fresh answer."""
        now = self.clock()
        self._collect()
        out = dict(lags)
        due = []
        for tp, lag in lags.items():
            if lag > 0:
                continue
            asked_at, end = self._answers.get(tp, (float("-inf"), 0))
            if now - asked_at >= self.valid_for:
                del out[tp]
            elif end > positions[tp]:
                out[tp] = end - positions[tp]  # records its fetches have not brought yet
            if now - asked_at >= self.valid_for / 2:
                due.append(tp)
        if due and self._in_flight is None:
            self._in_flight = (now, self.asker.ask(due, self.valid_for))
        return out

    def _collect(self) -> None:
        """Take the answers of the question in flight once every partition's came (or failed)."""
        if self._in_flight is None:
            return
        asked_at, futures = self._in_flight
        if not all(f.done() for f in futures.values()):
            return
        self._in_flight = None
        for tp, f in futures.items():
            if f.exception() is None:
                self._answers[tp] = (asked_at, f.result())
            else:
                log.debug("%s[%d]: no end offset from its leader (%s)", tp.topic, tp.partition, f.exception())

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions handed over: a later owner's confirmation starts afresh."""
        for tp in partitions:
            self._answers.pop(tp, None)
