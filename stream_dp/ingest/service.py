"""Assemble an ingest worker from the config (consumer, dead-letter producer, applier, metrics).

Run by :func:`stream_dp.runtime.run_ingest_worker` (``python -m workers.ingest``, ``stream-dp ingest``),
which owns the process conventions (start checks, /metrics, signal policy, exit codes).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from stream_dp.config import Config
from stream_dp.connections import kafka_producer, redis_client
from stream_dp.ingest import state_check
from stream_dp.ingest.caught_up import LeaderEndOffsets
from stream_dp.ingest.consumers import ingest_consumer
from stream_dp.ingest.crashpoints import NO_CRASHES, CrashPoints
from stream_dp.ingest.runners import ProcessRunner
from stream_dp.ingest.topic_identity import topic_guard
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.worker import IngestWorker
from stream_dp.topics import admin_client

log = logging.getLogger(__name__)


def build_worker(cfg: Config, registry: CollectorRegistry, *, accept_state_loss: bool = False,
                 crashpoints: CrashPoints = NO_CRASHES) -> IngestWorker:
    """The worker with clients built from ``cfg`` (consumer in the ingest group on the ``ingest.kafka_client``
    backend, DLQ producer, Redis). The topics must exist (``stream-dp topics create``; checked by the
    runtime's start checks, :func:`stream_dp.runtime.topics_preflight_or_report`). Before its first batch it
    checks that Redis holds the window state the group's committed offsets stand for
    (:mod:`stream_dp.ingest.state_check`; ``accept_state_loss``: the operator's ``--accept-state-loss``).
    ``crashpoints``: production's no-op; crash tests inject one (:mod:`stream_dp.ingest.crashpoints`)."""
    consumer = ingest_consumer(cfg.kafka, cfg.ingest.kafka_client, prefetch_max_kbytes=cfg.ingest.prefetch_max_kbytes)
    producer = kafka_producer(cfg.kafka, max_block_ms=int(cfg.ingest.dead_letter_timeout_seconds * 1000),
                              max_request_size=cfg.ingest.dead_letter_max_request_bytes)
    def check_state() -> None:
        client = redis_client(cfg.redis)
        try:
            epoch = state_check.check(cfg, client, accept_loss=accept_state_loss)
        finally:
            client.close()
        log.info("ingest epoch %s (%s)", epoch.id, epoch.origin)

    # the caught-up check asks the partition leaders on an admin client's own connections (ingest/caught_up.py)
    end_offsets = LeaderEndOffsets(admin_client(cfg.kafka))
    return IngestWorker(cfg, consumer=consumer, producer=producer, runner=ProcessRunner(cfg, crashpoints=crashpoints),
                        end_offsets=end_offsets,
                        metrics=IngestMetrics(registry), topic_guard=topic_guard(cfg), before_start=check_state)
