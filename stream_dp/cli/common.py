"""What several subcommands share: the ``--config`` option and loading it with a readable error."""

from __future__ import annotations

import argparse
import sys

from stream_dp.config import Config, ConfigError, load_config


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` (default: config/stream-dp.toml; STREAM_DP_* environment overrides apply)."""
    parser.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")


def load_config_or_report(path: str | None) -> Config | None:
    """The validated config, or None after printing ``config error: …`` (naming the setting) to stderr."""
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return None
