"""``stream-dp config check``: load, apply environment overrides, validate, print the effective config."""

from __future__ import annotations

import argparse
import json
import sys

from stream_dp.config import ConfigError, load_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="check a configuration file",
                       description="Validate a config file (with STREAM_DP_* environment overrides applied).")
    p.add_argument("action", choices=("check",))
    p.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(cfg.to_dict(), indent=2, default=list))
    print("config OK", file=sys.stderr)
    return 0
