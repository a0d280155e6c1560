"""Assemble a release worker from the config (clients, ledger, producer, metrics).

Run by :func:`stream_dp.runtime.run_release_worker` (``python -m workers.release``, ``stream-dp release``),
which owns the process conventions (start checks, /metrics, signal policy, exit codes).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from stream_dp.config import Config
from stream_dp.connections import redis_client
from stream_dp.store.keys import Keys
from stream_dp.replication import ReplicationPolicy
from stream_dp.release.crashpoints import NO_CRASHES, CrashPoints
from stream_dp.release.ledger_guard import TAIL_MESSAGES, LedgerGuard, start_check
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox, Publisher
from stream_dp.release.producers import release_producer
from stream_dp.release.topic_reader import read_releases
from stream_dp.release.worker import ReleaseWorker

log = logging.getLogger(__name__)


@dataclass
class Service:
    worker: ReleaseWorker
    publisher: Publisher
    redis: Any
    registry: CollectorRegistry

    def close(self) -> None:
        self.publisher.close()
        self.redis.close()


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}".replace(":", "-")


def build_worker(cfg: Config, *, registry: CollectorRegistry | None = None, worker_id: str | None = None,
                 rng: Any = None, crashpoints: CrashPoints = NO_CRASHES,
                 after_start: Callable[[], object] | None = None) -> Service:
    """A ready-to-run release worker for ``cfg`` (production: ``rng=None``, OS entropy); its poll interval,
    claim TTL and retry backoff come from ``cfg.release``; ``after_start`` runs once when the worker's
    start-up is done (:meth:`ReleaseWorker.start`)."""
    from stream_dp.accounting.ledger import BudgetCap, Ledger

    registry = registry if registry is not None else CollectorRegistry()
    metrics = ReleaseMetrics(registry)
    client = redis_client(cfg.redis)
    keys = Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout)
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys,
                    lifetime_cap=BudgetCap.lifetime_from_config(cfg.budget))
    publisher = Publisher(release_producer(cfg), cfg.kafka.releases_topic,
                          max_message_bytes=cfg.kafka.release_message_max_bytes)
    outbox = Outbox(ledger, publisher, metrics, crashpoints=crashpoints)

    def before_start() -> None:
        """The start steps that need Redis and the broker, run by the worker's first pass (so its loop retries
        them, with backoff, until both answer): the replication policy ("auto" resolved once) and the ledger
        compared with the releases topic's last records (:mod:`stream_dp.release.ledger_guard`)."""
        ledger.replication = ReplicationPolicy.from_config(cfg.redis, client)
        log.info("ledger charges are confirmed on %d replica(s) before a release is published "
                 "(redis.min_replicas_acked = %s)", ledger.replication.replicas, cfg.redis.min_replicas_acked)
        epoch = start_check(client, keys, read_releases(cfg.kafka, last=TAIL_MESSAGES))
        outbox.guard = LedgerGuard(client, keys, epoch)
        log.info("ledger epoch %s (%s): the ledger holds the releases topic's last records", epoch.id, epoch.origin)

    worker = ReleaseWorker(cfg, client, ledger, outbox, metrics, worker_id=worker_id or default_worker_id(),
                           rng=rng, after_start=after_start, before_start=before_start)
    return Service(worker, publisher, client, registry)
