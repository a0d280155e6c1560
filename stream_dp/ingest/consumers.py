"""The Kafka consumer backends the ingest loop runs on, and how the loop reads their records.

The loop (:mod:`~stream_dp.ingest.worker`) and the offset protocol (:mod:`~stream_dp.ingest.commits`) are
written against kafka-python's consumer calls: ``subscribe`` with a rebalance listener, ``poll`` returning
records per partition, ``assignment``, ``commit`` / ``commit_async`` of explicit offsets, ``seek``,
``position``, ``highwater``, ``partitions_for_topic``, ``close(autocommit=False)``. ``ingest.kafka_client``
selects the backend (:func:`ingest_consumer`): kafka-python itself (:class:`KafkaPythonConsumer`), or
confluent-kafka behind exactly those calls (:class:`~stream_dp.ingest.confluent_consumer.ConfluentConsumer`,
whose module says what maps how).

- Records: the loop reads a record's offset, timestamp and value as columns (:func:`columns`) and a
  rejected record's topic, partition, offset, key and value (:func:`fields`); both backends give the same
  values to the one decoder (:func:`records_of`).
- Outages: both clients reconnect by themselves, and a poll while no broker answers just returns nothing.
  Each backend says so through ``unreachable()`` (:meth:`ConfluentConsumer.unreachable`,
  :meth:`KafkaPythonConsumer.unreachable`), which the loop asks after an empty poll; the loop then fails
  the step with :class:`BrokersUnreachable`.
"""

from __future__ import annotations

from typing import Any, Protocol

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from stream_dp.broker_reach import BrokerReach
from stream_dp.config import KafkaConfig
from stream_dp.errors import StreamDPError
from stream_dp.ingest.confluent_consumer import PREFETCH_MAX_KBYTES, ConfluentConsumer, confluent_settings

__all__ = ["KAFKA_CLIENTS", "PREFETCH_MAX_KBYTES", "BrokersUnreachable", "ConfluentConsumer", "KafkaPythonConsumer",
           "KafkaPythonRecords", "Records", "columns", "confluent_settings", "fields", "ingest_consumer", "records_of"]

#: The values of ``ingest.kafka_client``.
KAFKA_CLIENTS = ("kafka-python", "confluent")


# --- records: the same fields from both backends ----------------------------------------------------------

def columns(recs: list[Any]) -> tuple[list[int], list[int | None], list[bytes | None]]:
    """Offsets, record timestamps (ms) and values of one partition's kafka-python records."""
    return [r.offset for r in recs], [r.timestamp for r in recs], [r.value for r in recs]


def fields(rec: Any) -> tuple[str, int, int, bytes | None, bytes | None]:
    """Topic, partition, offset, key and value of one kafka-python record (a dead letter's source)."""
    return rec.topic, rec.partition, rec.offset, rec.key, rec.value


class Records(Protocol):
    """How the loop reads the records a backend's ``poll`` returned."""

    def columns(self, recs: list[Any]) -> tuple[list[int], list[int | None], list[bytes | None]]: ...

    def fields(self, rec: Any) -> tuple[str, int, int, bytes | None, bytes | None]: ...


class KafkaPythonRecords:
    """:class:`Records` of kafka-python's ``ConsumerRecord``."""

    columns = staticmethod(columns)
    fields = staticmethod(fields)


def records_of(consumer: Any) -> Records:
    """How to read what ``consumer.poll`` returns: the backend's own :class:`Records`, else kafka-python's."""
    return consumer if isinstance(consumer, ConfluentConsumer) else KafkaPythonRecords()


# --- kafka-python -----------------------------------------------------------------------------------------

class KafkaPythonConsumer(KafkaConsumer):
    """kafka-python's consumer with the outage report the loop asks for after an empty poll."""

    _reach: BrokerReach | None = None

    def unreachable(self) -> str | None:
        """Why the brokers cannot be reached, or None (:class:`~stream_dp.broker_reach.BrokerReach`: no
        connection to any broker right after a poll). kafka-python retries by itself and its poll returns
        nothing meanwhile, so without this a worker reported itself up through an outage and kept telling the
        watermark its partitions were caught up (to a stale high-water mark)."""
        if self._reach is None:
            self._reach = BrokerReach(self)
        return self._reach.unreachable()


    def end_offset(self, tp: Any, timeout_s: float) -> int | None:
        """``tp``'s end offset as its leader answers now (ListOffsets), or None when no answer came within
        ``timeout_s`` (:mod:`~stream_dp.ingest.caught_up`: the fetched high-water mark may be stale)."""
        try:
            return self.end_offsets([tp], timeout_ms=max(1, int(timeout_s * 1000))).get(tp)
        except KafkaError:  # a timeout or the leader's error: no answer
            return None


class BrokersUnreachable(KafkaError, StreamDPError):
    """The consumer reports that no broker can be reached (its ``unreachable()``): the loop's "kafka"
    dependency is down although the poll raised nothing."""

    retriable = True


def ingest_consumer(cfg: KafkaConfig, client: str, *, prefetch_max_kbytes: int = PREFETCH_MAX_KBYTES) -> Any:
    """The ingest loop's consumer in group ``kafka.ingest_group_id`` (not yet subscribed), on backend
    ``client`` (``ingest.kafka_client``); ``prefetch_max_kbytes`` bounds confluent's prefetch
    (:func:`confluent_settings`; kafka-python fetches only when polled)."""
    if client == "confluent":
        return ConfluentConsumer(confluent_settings(cfg, group_id=cfg.ingest_group_id,
                                                    prefetch_max_kbytes=prefetch_max_kbytes),
                                 max_poll_records=cfg.max_poll_records)
    if client == "kafka-python":
        from stream_dp.connections import kafka_consumer

        return kafka_consumer(cfg, group_id=cfg.ingest_group_id, consumer_class=KafkaPythonConsumer)
    raise ValueError(f"ingest.kafka_client = {client!r}: expected one of {', '.join(KAFKA_CLIENTS)}")
