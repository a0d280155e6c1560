"""``python -m workers.ingest --config FILE``: the ingest worker process (thin wiring).

Builds the clients from the config, serves /metrics on ``metrics.port`` (0 = off), installs the signal
handlers (first SIGTERM/SIGINT: finish the batch, commit, close; a second one exits at once) and runs
:class:`stream_dp.ingest.worker.IngestWorker`. Exit code 0 after a clean stop.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, start_http_server

from stream_dp import redact
from stream_dp.cli.common import budget_plan_or_report, redis_preflight_or_report, schedule_or_report
from stream_dp.config import Config, ConfigError, load_config
from stream_dp.connections import ensure_topics, kafka_consumer, kafka_producer
from stream_dp.ingest.applier import ProcessRunner
from stream_dp.ingest.metrics import IngestMetrics
from stream_dp.ingest.worker import IngestWorker

log = logging.getLogger("stream_dp.ingest")

HARD_EXIT_CODE = 130


def build_worker(cfg: Config, registry: CollectorRegistry) -> IngestWorker:
    """The worker with clients built from ``cfg`` (consumer in the ingest group, DLQ producer, Redis)."""
    ensure_topics(cfg.kafka, {cfg.kafka.dead_letter_topic: 1})
    consumer = kafka_consumer(cfg.kafka, group_id=cfg.kafka.ingest_group_id)
    producer = kafka_producer(cfg.kafka, max_block_ms=int(cfg.ingest.dead_letter_timeout_seconds * 1000))
    return IngestWorker(cfg, consumer=consumer, producer=producer, runner=ProcessRunner(cfg),
                        metrics=IngestMetrics(registry))


def signal_handler(worker: IngestWorker, *, hard_exit: Callable[[int], object] = os._exit
                   ) -> Callable[[int, object], None]:
    """First SIGTERM/SIGINT: graceful stop; second: immediate exit (uncommitted work is replayed)."""

    def handle(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if worker.stopping:
            log.warning("second %s: exiting immediately; uncommitted batches will be replayed", name)
            logging.shutdown()
            hard_exit(HARD_EXIT_CODE)
            return
        log.info("%s received: finishing the current batch, then committing and closing", name)
        worker.stop()

    return handle


def install_signal_handlers(worker: IngestWorker) -> None:
    handle = signal_handler(worker)
    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def run(cfg: Config) -> int:
    redact.install(cfg)  # every log line of this process masks the config's secrets and URL credentials
    if not budget_plan_or_report(cfg) or not redis_preflight_or_report(cfg) or not schedule_or_report(cfg):
        return 2
    registry = CollectorRegistry()
    if cfg.metrics.port:
        start_http_server(cfg.metrics.port, addr=cfg.metrics.host, registry=registry)
        log.info("metrics on http://%s:%d/metrics", cfg.metrics.host, cfg.metrics.port)
    worker = build_worker(cfg, registry)
    install_signal_handlers(worker)
    worker.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="TOML config file (default: config/stream-dp.toml)")
    parser.add_argument("--log-level", default=os.environ.get("STREAM_DP_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python narrates every connection at INFO
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        redact.install()
        log.error("config error: %s", exc)
        return 2
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
