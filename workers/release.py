"""The release worker process: ``python -m workers.release --config FILE``.

Thin wiring over :mod:`stream_dp.release` (see :mod:`stream_dp.release.worker` for what it does). Stops
cleanly on SIGTERM/SIGINT; serves Prometheus metrics on ``metrics.port``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from stream_dp.config import ConfigError, load_config
from stream_dp.release.service import run_until_signalled


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.release", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")
    parser.add_argument("--worker-id", help="name in claim tokens and logs (default: host-pid)")
    parser.add_argument("--poll-seconds", type=float, default=0.5, help="wait between passes when idle")
    parser.add_argument("--claim-ttl-seconds", type=float, default=30.0,
                        help="a dead worker's claim on a window expires after this long")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 1
    return run_until_signalled(cfg, worker_id=args.worker_id, poll_seconds=args.poll_seconds,
                               claim_ttl_seconds=args.claim_ttl_seconds)


if __name__ == "__main__":
    sys.exit(main())
