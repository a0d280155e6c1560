"""One poll's records as the ingest loop carries them: cut into the applier's request, and back to dead letters.

:class:`BatchCutter` turns what the consumer's ``poll`` returned into a :class:`Batch`: per-partition columns
for the applier (offsets, record timestamps, values -- no decoding here), the first and last offsets the loop
rewinds to or commits, and the request's watermark inputs from the consumer (which partitions are owned,
busy -- in this batch, or lagging -- and caught up, and which were revoked since the last request).
:meth:`Batch.rejected` finds a rejected record again by its (partition, index) for its dead letter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition

from stream_dp.ingest.applier import BatchRequest, PartitionRecords
from stream_dp.ingest.consumers import Records
from stream_dp.ingest.dead_letters import Rejected
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.topic_identity import TopicWatch


@dataclass
class Batch:
    """One poll's records on their way through the loop (``idle``: a watermark-only request)."""

    t0: float
    request: BatchRequest
    records: dict[Any, list[Any]] = field(default_factory=dict)
    n: int = 0
    first_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    last_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    idle: bool = False

    def rejected(self, reader: Records, rejects: list[tuple[int, int, str]]) -> list[Rejected]:
        """The records the applier rejected (``(partition, index in the poll, reason)``), as dead letters."""
        by_partition = {tp.partition: recs for tp, recs in self.records.items()}
        out = []
        for p, i, reason in rejects:
            topic, partition, offset, key, value = reader.fields(by_partition[p][i])
            out.append(Rejected(topic, partition, offset, key, value, reason))
        return out


class BatchCutter:
    """Builds the loop's batches for ``topic`` from ``consumer``'s polls (read with ``reader``)."""

    def __init__(self, consumer: Any, topic: str, reader: Records, metrics: IngestMetrics,
                 topic_watch: TopicWatch) -> None:
        self.consumer = consumer
        self.topic = topic
        self.reader = reader
        self.metrics = metrics
        self.topic_watch = topic_watch
        self._known_partitions: set[int] = set()
        self._revoked: set[int] = set()  # revoked since the last request (the applier forgets their clocks)

    def cut(self, records: dict, lags: dict[TopicPartition, int], *, epoch_required: bool) -> Batch:
        """Cut one poll's records into per-partition columns for the applier (no decoding here)."""
        t0 = time.perf_counter()
        parts: list[PartitionRecords] = []
        first: dict[TopicPartition, int] = {}
        last: dict[TopicPartition, int] = {}
        for tp, recs in records.items():
            if recs:
                offsets, stamps, values = self.reader.columns(recs)
                parts.append(PartitionRecords(tp.partition, offsets, stamps, values))
                first[tp], last[tp] = offsets[0], offsets[-1]
        self.topic_watch.polled(first, last)
        b = Batch(t0=t0, request=self.request(parts, {p.partition for p in parts}, lags, epoch_required=epoch_required),
                  records=records, n=sum(len(p.offsets) for p in parts), first_offsets=first, last_offsets=last)
        self.metrics.consumed.inc(b.n)
        self.metrics.batch_events.observe(b.n)
        return b

    def idle(self, lags: dict[TopicPartition, int], *, epoch_required: bool) -> Batch:
        """A watermark-only batch: no records, the consumer's view of the partitions."""
        return Batch(t0=time.perf_counter(), request=self.request([], set(), lags, epoch_required=epoch_required),
                     idle=True)

    def request(self, parts: list[PartitionRecords], busy: set[int], lags: dict[TopicPartition, int], *,
                epoch_required: bool) -> BatchRequest:
        """The request for ``parts``, with what the watermark advance needs from the consumer: which
        partitions are owned, busy (in this batch, or lagging) and caught up (``lags``: this step's)."""
        owned = {tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic}
        if not self._known_partitions:
            self._known_partitions = set(self.consumer.partitions_for_topic(self.topic) or ())
        lagging = {tp.partition for tp, lag in lags.items() if lag > 0}
        caught_up = {tp.partition for tp, lag in lags.items() if lag == 0}
        forget, self._revoked = frozenset(self._revoked), set()
        return BatchRequest(parts, owned=frozenset(owned), busy=frozenset((busy | lagging) & owned),
                            epoch_required=epoch_required,
                            known=frozenset(self._known_partitions), forget=forget,
                            caught_up=frozenset(caught_up & owned))

    def revoked(self, partitions: set[TopicPartition]) -> None:
        """Partitions handed over: the next request tells the applier to forget their clocks."""
        self._revoked |= {tp.partition for tp in partitions if tp.topic == self.topic}
