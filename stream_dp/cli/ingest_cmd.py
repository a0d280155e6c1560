"""``stream-dp ingest --config FILE``: run the ingest worker (same as ``python -m workers.ingest``)."""

from __future__ import annotations

import argparse

from stream_dp.runtime import ExitCode, add_config_option, load_config_or_report, run_ingest_worker

EXAMPLES = """\
examples:
  stream-dp ingest --config config/stream-dp.toml       # metrics on :9108; SIGTERM: finish the batch, commit, stop
  STREAM_DP_KAFKA__BOOTSTRAP_SERVERS=kafka-1:9092 STREAM_DP_REDIS__URL=redis://redis:6379/0 stream-dp ingest
  stream-dp ingest --log-level DEBUG                     # uses a running `stream-dp devstack up` when nothing is set
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="run the ingest worker (Kafka events -> bounded window counts in Redis)",
                       description="Consume the events topic in the ingest consumer group and keep per-window, "
                       "contribution-bounded counts in Redis. Stops cleanly on SIGTERM/SIGINT.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ingest worker's options (shared with ``python -m workers.ingest``)."""
    add_config_option(parser)
    parser.add_argument("--accept-state-loss", action="store_true",
                        help="start although Redis lost the window state the consumer group's committed offsets "
                        "stand for: continue from those offsets (windows not yet released lose the events counted "
                        "before the loss); run `stream-dp budget rebuild --from-topic` first")


def run(args: argparse.Namespace, *, crashpoints: object = None) -> int:
    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    return run_ingest_worker(cfg, accept_state_loss=args.accept_state_loss, crashpoints=crashpoints)
