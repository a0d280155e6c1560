"""``stream-dp config check``: load, apply environment overrides, validate, print the effective config
(passwords, SASL secrets and URL credentials masked as ``***``)."""

from __future__ import annotations

import argparse
import json
import sys

from stream_dp.runtime import ExitCode, add_config_option, load_config_or_report
from stream_dp.redact import redacted_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="check a configuration file",
                       description="Validate a config file (with STREAM_DP_* environment overrides applied).")
    p.add_argument("action", choices=("check",))
    add_config_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    print(json.dumps(redacted_config(cfg), indent=2, default=list))
    print("config OK", file=sys.stderr)
    return 0
