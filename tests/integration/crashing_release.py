"""The release worker with a crash injected: ``python tests/integration/crashing_release.py --crash-at POINT[@N]
<release worker options>``.

Test-owned: production's worker gets :data:`stream_dp.release.crashpoints.NO_CRASHES`; this entry point
injects :class:`KillAt`, which SIGKILLs the process the N-th time (1-based) it reaches POINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from stream_dp.cli import release_cmd
from stream_dp.config import ConfigError
from stream_dp.release.crashpoints import POINTS
from stream_dp.runtime import (ExitCode, add_log_level_option, configure_logging, load_config_or_report,
                               run_release_worker, with_release_flags)


CRASHED = "crash point reached, SIGKILL:"


class KillAt:
    """SIGKILL this process the ``nth`` time ``point`` is reached."""

    def __init__(self, spec: str) -> None:
        point, _, nth = spec.partition("@")
        if point not in POINTS:
            raise ValueError(f"--crash-at {spec!r}: unknown crash point; known: {', '.join(POINTS)}")
        self.point, self.nth, self.hits = point, int(nth or 1), 0

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.hits += 1
        if self.hits == self.nth:
            print(f"{CRASHED} {point}@{self.nth}", file=sys.stderr, flush=True)  # the test counts these
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crashing_release", description=__doc__.splitlines()[0])
    release_cmd.add_arguments(parser)
    add_log_level_option(parser)
    parser.add_argument("--crash-at", required=True, help=f"POINT[@N], POINT one of {', '.join(POINTS)}")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    crash = KillAt(args.crash_at)
    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    try:
        cfg = with_release_flags(cfg, poll_seconds=args.poll_seconds, claim_ttl_seconds=args.claim_ttl_seconds)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    return run_release_worker(cfg, worker_id=args.worker_id, crashpoints=crash)


if __name__ == "__main__":
    sys.exit(main())
