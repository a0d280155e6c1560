"""The ``stream-dp`` command line.

Each subcommand lives in a module of this package that exposes ``register(subparsers)``; the module
adds its parser and sets ``func`` (called with the parsed args, returns the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from stream_dp import redact

# Subcommand modules, in the order `stream-dp --help` lists them.
COMMANDS: tuple[str, ...] = (
    "stream_dp.cli.demo_cmd",
    "stream_dp.cli.ingest_cmd",
    "stream_dp.cli.release_cmd",
    "stream_dp.cli.replay_cmd",
    "stream_dp.cli.tail_cmd",
    "stream_dp.cli.budget_cmd",
    "stream_dp.cli.config_cmd",
    "stream_dp.cli.devstack_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stream-dp",
        description="Differentially private heavy hitters, released continuously from a Kafka stream.",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    redact.install()  # URL credentials masked in every log line; config secrets once a config is loaded
    # kafka-python narrates every connection at INFO; a command-line user needs its warnings only
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLogger().level))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
