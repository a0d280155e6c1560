"""Ingest: Kafka events → validated, event-time-windowed, contribution-bounded counts in Redis.

Modules, one job each:

- :mod:`~stream_dp.ingest.decode` -- record bytes → :class:`Event` or a rejection reason (never raises);
- :mod:`~stream_dp.ingest.windowing` -- tumbling windows and the watermark rule;
- :mod:`~stream_dp.ingest.bounding` -- the per-(window, user) contribution bound (L∞ = 1, L0 = Δ), in Python;
- :mod:`~stream_dp.ingest.chunks` -- what one apply exchanges with Redis: chunks, the apply script's
  header, results;
- :mod:`~stream_dp.ingest.store` -- the Redis side (Lua): exactly-once application of bounded increments;
- :mod:`~stream_dp.ingest.bounding_cache` -- the store's cache of each window shard's bounding state, caught
  up from Redis and bounded in size;
- :mod:`~stream_dp.ingest.watermarks` -- the shared global watermark and the closing of windows;
- :mod:`~stream_dp.ingest.applier` -- one batch's records → decoded, windowed, bounded and applied in Redis,
  watermark advanced; runs in its own process beside the loop (``applier_process``) or on a thread;
- :mod:`~stream_dp.ingest.worker` -- the consumer-group loop (dead letters, commits after apply, rebalances,
  backoff, graceful stop);
- :mod:`~stream_dp.ingest.batches` -- one poll's records cut into the applier's request, and found again for
  their dead letters;
- :mod:`~stream_dp.ingest.consumers` -- the loop's Kafka consumer, chosen by ``ingest.kafka_client``:
  kafka-python itself, or confluent-kafka (librdkafka) behind the kafka-python calls the loop makes
  (:mod:`~stream_dp.ingest.confluent_consumer`);
- :mod:`~stream_dp.ingest.metrics` -- the ``stream_dp_ingest_*`` Prometheus metrics.

The process is ``python -m workers.ingest --config FILE`` (or ``stream-dp ingest``); docs/ingest.md has
the guarantees and the Redis layout.
"""

from stream_dp.ingest.bounding import ContributionBounder, bounded_window_counts
from stream_dp.ingest.decode import REJECT_REASONS, Event, EventDecoder, Rejection
from stream_dp.ingest.chunks import Chunk, ChunkResult
from stream_dp.ingest.store import WindowStore
from stream_dp.ingest.watermarks import WatermarkState
from stream_dp.ingest.windowing import PartitionClock, global_watermark, window_start

__all__ = [
    "REJECT_REASONS", "Chunk", "ChunkResult", "ContributionBounder", "Event", "EventDecoder", "PartitionClock",
    "Rejection", "WatermarkState", "WindowStore", "bounded_window_counts", "global_watermark", "window_start",
]
