"""Arbitrary record bytes never raise out of the worker loop, and no record is silently lost (hypothesis).

Kafka is replaced by in-memory fakes here (so hypothesis can run hundreds of batches quickly); Redis is the
real one. Every record of a batch must end up counted (applied, bounded, late or duplicate) or dead-lettered,
and the batch's offsets committed.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from collections import namedtuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import TopicPartition
from prometheus_client import CollectorRegistry

from stream_dp.config import config_from_mapping
from stream_dp.ingest.decode import REJECT_REASONS
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.worker import IngestWorker

pytestmark = pytest.mark.integration

Record = namedtuple("Record", "topic partition offset timestamp key value headers")
TP = TopicPartition("events", 0)


class FakeFuture:
    def get(self, timeout=None):
        return None


class FakeProducer:
    def __init__(self):
        self.sent = []

    def send(self, topic, key=None, value=None, headers=None):
        self.sent.append((topic, value, dict(headers)))
        return FakeFuture()

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


class FakeConsumer:
    def __init__(self):
        self.batches = []
        self.commits = []
        self.end = 0

    def subscribe(self, topics, listener=None):
        pass

    def poll(self, timeout_ms=0):
        return {TP: self.batches.pop(0)} if self.batches else {}

    def assignment(self):
        return {TP}

    def partitions_for_topic(self, topic):
        return {0}

    def highwater(self, tp):
        return self.end

    def commit(self, offsets):
        self.commits.append({tp: o.offset for tp, o in offsets.items()})

    def commit_async(self, offsets, callback):
        self.commit(offsets)
        callback(offsets, None)

    def seek(self, tp, offset):
        raise AssertionError("no rewind expected: Redis is up")

    def close(self, autocommit=False):
        pass

    def ask(self, partitions, timeout_s):
        """The caught-up check's question (stream_dp/ingest/caught_up.py): this fake broker's end offset."""
        answers = {}
        for tp in partitions:
            answers[tp] = Future()
            answers[tp].set_result(self.end)
        return answers


def _value():
    good = st.fixed_dictionaries({"user": st.text(max_size=6), "key": st.text(max_size=6),
                                  "ts": st.floats(0, 1e5) | st.integers(-5, 10**12) | st.text(max_size=3)})
    return st.one_of(st.binary(max_size=60), st.none(), good.map(lambda d: json.dumps(d).encode()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(_value(), min_size=1, max_size=20), min_size=1, max_size=4))
def test_arbitrary_records_never_raise_and_are_all_accounted_for(redis_client, batches):
    redis_client.flushdb()
    cfg = config_from_mapping({"redis": {"url": "redis://unused"}, "windows": {"size_seconds": 100}}, environ={})
    consumer, producer, registry = FakeConsumer(), FakeProducer(), CollectorRegistry()
    worker = IngestWorker(cfg, consumer=consumer, producer=producer, redis_client=redis_client, end_offsets=consumer,
                          metrics=IngestMetrics(registry))
    offset = 0
    for values in batches:
        consumer.batches.append([Record("events", 0, offset + i, 1_000, b"k", v, []) for i, v in enumerate(values)])
        offset += len(values)
    consumer.end = offset
    for _ in range(len(batches) + 1):  # one more: the last batch is finished while nothing new comes
        worker.step()
    m = lambda name, **lab: registry.get_sample_value(f"stream_dp_ingest_{name}", lab) or 0.0  # noqa: E731
    counted = (m("events_applied_total") + m("events_late_total") + m("events_duplicate_total")
               + m("events_bounded_total", rule="linf") + m("events_bounded_total", rule="l0"))
    rejected = sum(registry.get_sample_value("stream_dp_ingest_events_rejected_total", {"reason": r}) or 0
                   for r in REJECT_REASONS)
    ticks = m("clock_ticks_total")  # null values: clock ticks of the trusted producer, counted apart
    assert ticks == sum(v is None for values in batches for v in values)
    assert m("events_consumed_total") == offset
    assert counted + rejected + ticks == offset
    assert len(producer.sent) == rejected
    assert all(h["reason"] for _, _, h in producer.sent)
    assert consumer.commits[-1] == {TP: offset}
    assert m("up") == 1
