"""``stream-dp release``: run the release worker (same as ``python -m workers.release``)."""

from __future__ import annotations

import argparse
import sys

from stream_dp.config import ConfigError
from stream_dp.runtime import (
    ExitCode,
    add_config_option,
    load_config_or_report,
    run_release_worker,
    with_release_flags,
)

EXAMPLES = """\
examples:
  stream-dp release --config config/stream-dp.toml      # refuses to start if a budget period is not covered
  STREAM_DP_METRICS__PORT=9109 stream-dp release        # next to an ingest worker on the same host
  stream-dp release --worker-id release-2 --claim-ttl-seconds 15   # a second worker: windows are claimed
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("release", help="run the release worker",
                       description="Release every closed window: run the configured DP releases, charge the "
                                   "ledger, publish to the releases topic. Stops on SIGTERM/SIGINT.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The release worker's options (shared with ``python -m workers.release``); the flags override the
    config's ``[release]`` section."""
    add_config_option(parser)
    parser.add_argument("--worker-id", help="name in claim tokens and logs (default: host-pid)")
    parser.add_argument("--poll-seconds", type=float, default=None,
                        help="wait between passes when idle (default: release.poll_interval_seconds)")
    parser.add_argument("--claim-ttl-seconds", type=float, default=None,
                        help="a dead worker's claim on a window expires after this long "
                             "(default: release.claim_ttl_seconds)")


def run(args: argparse.Namespace, *, crashpoints: object = None) -> int:
    """Load the config named by ``args``, apply the flags over ``[release]`` and run until a signal
    (``crashpoints``: None in production; crash tests inject one)."""
    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    try:
        cfg = with_release_flags(cfg, poll_seconds=args.poll_seconds, claim_ttl_seconds=args.claim_ttl_seconds)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    return run_release_worker(cfg, worker_id=args.worker_id, crashpoints=crashpoints)
