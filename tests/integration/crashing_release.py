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
from stream_dp.release.crashpoints import POINTS
from stream_dp.runtime import process_main


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
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        release_cmd.add_arguments(parser)
        parser.add_argument("--crash-at", required=True, help=f"POINT[@N], POINT one of {', '.join(POINTS)}")

    return process_main(argv, prog="crashing_release", description=__doc__.splitlines()[0],
                        add_arguments=add_arguments,
                        run=lambda args: release_cmd.run(args, crashpoints=KillAt(args.crash_at)))


if __name__ == "__main__":
    sys.exit(main())
