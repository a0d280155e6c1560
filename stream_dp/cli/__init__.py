"""The ``stream-dp`` command line.

Each subcommand lives in a module of this package that exposes ``register(subparsers)``; the module
adds its parser and sets ``func`` (called with the parsed args, returns the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata
from collections.abc import Sequence

from stream_dp.runtime import ExitCode, add_log_level_option, configure_logging

# Subcommand modules, in the order `stream-dp --help` lists them.
COMMANDS: tuple[str, ...] = (
    "stream_dp.cli.demo_cmd",
    "stream_dp.cli.ingest_cmd",
    "stream_dp.cli.release_cmd",
    "stream_dp.cli.replay_cmd",
    "stream_dp.cli.tail_cmd",
    "stream_dp.cli.dashboard_cmd",
    "stream_dp.cli.budget_cmd",
    "stream_dp.cli.config_cmd",
    "stream_dp.cli.topics_cmd",
    "stream_dp.cli.devstack_cmd",
)


def version() -> str:
    """The installed distribution's version (pyproject.toml), or ``unknown`` when run from a bare tree."""
    try:
        return metadata.version("stream-dp")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stream-dp",
        description="Differentially private heavy hitters, released continuously from a Kafka stream.",
        epilog="Each command's --help has examples. README.md: Quickstart, Run it yourself, The command line.",
    )
    parser.add_argument("--version", action="version", version=f"stream-dp {version()}")
    add_log_level_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    for command in sub.choices.values():  # --log-level also after the subcommand
        add_log_level_option(command, default=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    _take_trailing_positional(parser, args, extra)
    configure_logging(args.log_level)  # once; every line masks URL credentials (and config secrets, once loaded)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.CONFIG
    return int(args.func(args) or 0)


def _take_trailing_positional(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Accept an optional positional after the options (``stream-dp budget show --config F SCOPE``).

    argparse fills positionals only before the first option of a subcommand; a subcommand names the one
    it accepts later with ``set_defaults(trailing_positional="scope")``. Anything else left over is the
    usual "unrecognized arguments" error."""
    name = getattr(args, "trailing_positional", None)
    if name and len(extra) == 1 and not extra[0].startswith("-") and getattr(args, name, None) is None:
        setattr(args, name, extra.pop())
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
