"""``stream-dp release``: run the release worker (same as ``python -m workers.release``)."""

from __future__ import annotations

import argparse
import sys

from stream_dp.config import ConfigError, load_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("release", help="run the release worker",
                       description="Release every closed window: run the configured DP releases, charge the "
                                   "ledger, publish to the releases topic. Stops on SIGTERM/SIGINT.")
    p.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")
    p.add_argument("--worker-id", help="name in claim tokens and logs (default: host-pid)")
    p.add_argument("--poll-seconds", type=float, default=0.5, help="wait between passes when idle")
    p.add_argument("--claim-ttl-seconds", type=float, default=30.0,
                   help="a dead worker's claim on a window expires after this long")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stream_dp.release.service import run_until_signalled

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    return run_until_signalled(cfg, worker_id=args.worker_id, poll_seconds=args.poll_seconds,
                               claim_ttl_seconds=args.claim_ttl_seconds)
