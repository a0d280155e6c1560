"""Caught up, as the partition's leader says now: the idle rule's evidence for a quiet partition.

The watermark lets a quiet partition go idle -- stop holding the global watermark back -- only while its owner
reports it *caught up*: its position has reached the broker's high-water mark (:mod:`~stream_dp.ingest.windowing`).
The lag the loop knows (:meth:`~stream_dp.ingest.commits.OffsetCommits.lags`) uses the high-water mark of the
last fetch response, and that is stale exactly when it matters: while a partition's leader fails over, the
consumer's fetches of it stall, its cached mark stays where the last fetch left it, and the partition looks
caught up *and* quiet. After ``windows.idle_partition_timeout_seconds`` the global watermark passed it, and the
records produced to its new leader meanwhile were late when they came (measured on a 3-broker Apache Kafka,
the leader of events-0 SIGKILLed, idle timeout 3 s: 560 events dropped as late in two windows;
tests/chaos/test_kafka_leader_kills.py).

:class:`CaughtUpCheck` confirms a zero cached lag with the partition's leader (ListOffsets, through the
consumer's ``end_offset``): the partition stays caught up when the leader answered within ``timeout`` with an
end offset at or below the position; an end offset above it makes the partition lagging (busy, so active);
no answer drops it from the lags (neither busy nor caught up: active, holding the global at its watermark).
A confirmation holds for ``valid_for`` seconds, a quarter of the idle timeout at most, so the last report
before a stall turns "not caught up" well before the partition could go idle; a partition that did not answer
is asked again only after ``valid_for``, and one unanswered ask ends the step's asking, so a dead leader
blocks the loop at most ``timeout`` per step. The cached lag is never lowered: a broker that under-reports
its end offset (Tansu) leaves the rule as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from kafka import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["CaughtUpCheck", "EndOffsets"]

#: The longest a confirmation holds, whatever the idle timeout (seconds).
MAX_VALID_FOR = 5.0
#: The longest one ask waits for the leader's answer (seconds).
MAX_TIMEOUT = 1.0


class EndOffsets(Protocol):
    """What the check needs from the consumer (both ingest backends, :mod:`~stream_dp.ingest.consumers`)."""

    def end_offset(self, tp: TopicPartition, timeout_s: float) -> int | None: ...


class CaughtUpCheck:
    """Confirms each zero cached lag with the partition's leader, at most once per ``valid_for`` seconds."""

    def __init__(self, consumer: EndOffsets, *, idle_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.consumer = consumer
        self.valid_for = min(idle_timeout / 4, MAX_VALID_FOR)
        self.timeout = max(min(self.valid_for, MAX_TIMEOUT), 0.05)
        self.clock = clock
        self._confirmed: dict[TopicPartition, float] = {}  # when the leader last confirmed it caught up
        self._unanswered: dict[TopicPartition, float] = {}  # when an ask last went unanswered

    def confirm(self, lags: dict[TopicPartition, int], positions: dict[TopicPartition, int]
                ) -> dict[TopicPartition, int]:
        """``lags`` with every zero lag confirmed: kept, raised to the leader's end offset minus the position,
        or dropped (unknown) when the leader did not answer or was not asked this step."""
        now = self.clock()
        out = dict(lags)
        asking = True
        for tp, lag in lags.items():
            if lag > 0 or now - self._confirmed.get(tp, float("-inf")) < self.valid_for:
                continue
            if not asking or now - self._unanswered.get(tp, float("-inf")) < self.valid_for:
                del out[tp]
                continue
            end = self.consumer.end_offset(tp, self.timeout)
            if end is None:
                self._unanswered[tp] = now
                asking = False
                del out[tp]
                log.debug("%s[%d]: its leader did not answer; not reported caught up", tp.topic, tp.partition)
            elif end > positions[tp]:
                out[tp] = end - positions[tp]  # records the fetches have not brought yet
            else:
                self._confirmed[tp] = now
        return out

    def forget(self, partitions: Any) -> None:
        """Partitions handed over: a later owner's confirmation starts afresh."""
        for tp in partitions:
            self._confirmed.pop(tp, None)
            self._unanswered.pop(tp, None)
