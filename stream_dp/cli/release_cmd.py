"""``stream-dp release``: run the release worker (same as ``python -m workers.release``)."""

from __future__ import annotations

import argparse

from stream_dp.cli.common import (
    add_config_option,
    budget_plan_or_report,
    load_config_or_report,
    redis_preflight_or_report,
    schedule_or_report,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("release", help="run the release worker",
                       description="Release every closed window: run the configured DP releases, charge the "
                                   "ledger, publish to the releases topic. Stops on SIGTERM/SIGINT.")
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The release worker's options (shared with ``python -m workers.release``)."""
    add_config_option(parser)
    parser.add_argument("--worker-id", help="name in claim tokens and logs (default: host-pid)")
    parser.add_argument("--poll-seconds", type=float, default=0.5, help="wait between passes when idle")
    parser.add_argument("--claim-ttl-seconds", type=float, default=30.0,
                        help="a dead worker's claim on a window expires after this long")


def run(args: argparse.Namespace) -> int:
    from stream_dp.release.service import run_until_signalled

    cfg = load_config_or_report(args.config)
    if cfg is None:
        return 1
    if not budget_plan_or_report(cfg) or not redis_preflight_or_report(cfg) or not schedule_or_report(cfg):
        return 2
    return run_until_signalled(cfg, worker_id=args.worker_id, poll_seconds=args.poll_seconds,
                               claim_ttl_seconds=args.claim_ttl_seconds)
