"""``stream-dp ingest --config FILE``: run the ingest worker (same as ``python -m workers.ingest``)."""

from __future__ import annotations

import argparse
import logging

from stream_dp.config import ConfigError, load_config
from stream_dp.redact import redact_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="run the ingest worker (Kafka events -> bounded window counts in Redis)",
                       description="Consume the events topic in the ingest consumer group and keep per-window, "
                       "contribution-bounded counts in Redis. Stops cleanly on SIGTERM/SIGINT.")
    p.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workers import ingest  # the process wiring lives in workers/

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        logging.getLogger("stream_dp.ingest").error("config error: %s", redact_text(str(exc)))
        return 2
    return ingest.run(cfg)
