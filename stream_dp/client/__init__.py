"""Subscribe to the releases topic: schema-checked, de-duplicated release records, for any downstream reader.

A release record (``config/release.schema.json``) is what the service publishes per window and release
type. :func:`subscribe` yields them as dicts, each one

- **checked**: its ``schema_version`` is one this client reads (an unknown version raises
  :class:`UnsupportedSchemaVersion` by default -- a newer producer is never misread silently), and it
  follows the JSON schema shipped with the package (a record that does not is skipped and reported);
- **once**: a release the worker republished after a crash (same ``release_id``, same bytes) is yielded
  only the first time it is seen;

from one of three starting points:

- ``start="beginning"`` (default): every release still on the topic, then new ones;
- ``start="now"``: only releases published after the subscriber was assigned its partitions (the end is
  the high-water mark of the first fetch, not the broker's end offset, which some Kafka-protocol brokers
  under-report);
- ``group="my-service"``: a Kafka consumer group for a downstream service. It resumes where the group
  left off after a restart (``start`` then only chooses where a *new* group begins). Delivery is at least
  once: a record's offset is committed once the caller asks for the next record (or calls
  :meth:`ReleaseSubscriber.commit`), so the record being processed when the service died is delivered
  again -- make processing idempotent by ``release_id``.

The package imports no Redis client: subscribers only ever see what the service published. Its modules:
:mod:`~stream_dp.client.records` checks one record, :mod:`~stream_dp.client.once` hands each release out
whole and once, :mod:`~stream_dp.client.subscriber` reads the topic and keeps the offsets.

>>> check_record(b'{"schema_version": 2, "release_id": "0-60.topk"}')
Traceback (most recent call last):
...
stream_dp.client.records.UnsupportedSchemaVersion: release record 0-60.topk has schema_version 2; this stream-dp client reads schema_version 1 only (upgrade stream-dp to read newer records)
"""

from stream_dp.broker_reach import BrokerUnreachable
from stream_dp.client.once import DEFAULT_SEEN_CAPACITY, PartJoiner, SeenIds
from stream_dp.client.records import (SCHEMA_PATH, SUPPORTED_SCHEMA_VERSIONS, InvalidReleaseRecord, ReleaseRecordError,
                                      UnsupportedSchemaVersion, check_record, release_types, report_invalid)
from stream_dp.client.subscriber import STARTS, ReleaseSubscriber, subscribe

__all__ = ["DEFAULT_SEEN_CAPACITY", "SCHEMA_PATH", "STARTS", "SUPPORTED_SCHEMA_VERSIONS", "BrokerUnreachable",
           "InvalidReleaseRecord", "PartJoiner", "ReleaseRecordError", "ReleaseSubscriber", "SeenIds",
           "UnsupportedSchemaVersion", "check_record", "release_types", "report_invalid", "subscribe"]
