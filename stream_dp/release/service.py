"""Assemble a release worker from the config (clients, ledger, producer, metrics) and run it until a signal.

Shared by ``workers/release.py`` and ``stream-dp release``. The first SIGTERM/SIGINT sets the stop flag (the
current window finishes, then the loop exits); a second one exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from stream_dp.config import Config
from stream_dp.connections import ensure_topics, kafka_producer, redis_client
from stream_dp.keys import Keys
from stream_dp.metrics_http import MetricsPortError, serve_metrics
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox, Publisher
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
                 rng: Any = None, poll_seconds: float = 0.5, claim_ttl_seconds: float = 30.0) -> Service:
    """A ready-to-run release worker for ``cfg`` (production: ``rng=None``, OS entropy)."""
    from stream_dp.accounting.ledger import BudgetCap, Ledger

    registry = registry if registry is not None else CollectorRegistry()
    metrics = ReleaseMetrics(registry)
    client = redis_client(cfg.redis)
    keys = Keys(cfg.redis.key_prefix)
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys,
                    lifetime_cap=BudgetCap.lifetime_from_config(cfg.budget))
    ensure_topics(cfg.kafka, {cfg.kafka.releases_topic: 1})
    producer = kafka_producer(cfg.kafka, enable_idempotence=True, acks="all", retries=5)
    publisher = Publisher(producer, cfg.kafka.releases_topic)
    outbox = Outbox(ledger, publisher, metrics)
    worker = ReleaseWorker(cfg, client, ledger, outbox, metrics, worker_id=worker_id or default_worker_id(),
                           claim_ttl_seconds=claim_ttl_seconds, poll_seconds=poll_seconds, rng=rng)
    return Service(worker, publisher, client, registry)


def run_until_signalled(cfg: Config, **kwargs: Any) -> int:
    """Run the worker until SIGTERM/SIGINT; serve /metrics on ``metrics.port`` (0 = off)."""
    service = build_worker(cfg, **kwargs)
    try:
        serve_metrics(cfg.metrics, service.registry, role="release")
    except MetricsPortError as exc:
        log.error("%s", exc)
        service.close()
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        log.info("%s: finishing the current window, then stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        service.worker.run(stop)
    finally:
        service.close()
    return 0
