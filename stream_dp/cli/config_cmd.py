"""``stream-dp config check``: load, apply environment overrides, validate, print the effective config
(passwords, SASL secrets and URL credentials masked as ``***``)."""

from __future__ import annotations

import argparse
import json
import sys

from stream_dp.runtime import ExitCode, add_config_option, load_config_or_report
from stream_dp.redact import redacted_config

EXAMPLES = """\
examples:
  stream-dp config check                                  # the default config/stream-dp.toml, as loaded
  stream-dp config check --config prod.toml               # your file, STREAM_DP_* overrides applied
  STREAM_DP_RELEASES__TOPK__K_BAR=5 stream-dp config check   # a bad value: one line naming the setting
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="check a configuration file",
                       description="Validate a config file (with STREAM_DP_* environment overrides applied) and "
                       "print the effective config, secrets masked.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
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
