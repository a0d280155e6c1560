"""The ingest worker with a crash injected: ``python tests/integration/crashing_ingest.py --crash-at POINT[@N]
<ingest worker options>``.

Test-owned: production's worker gets :data:`stream_dp.ingest.crashpoints.NO_CRASHES`; this entry point
injects :class:`ingest_kill.KillIngestAt`, which SIGKILLs the worker the N-th time (1-based) its applier
reaches POINT (:mod:`stream_dp.ingest.crashpoints`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ingest_kill import KillIngestAt
from stream_dp.cli import ingest_cmd
from stream_dp.ingest.crashpoints import POINTS
from stream_dp.runtime import process_main


def main(argv: Sequence[str] | None = None) -> int:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ingest_cmd.add_arguments(parser)
        parser.add_argument("--crash-at", required=True, help=f"POINT[@N], POINT one of {', '.join(POINTS)}")

    return process_main(argv, prog="crashing_ingest", description=__doc__.splitlines()[0],
                        add_arguments=add_arguments,
                        run=lambda args: ingest_cmd.run(args, crashpoints=KillIngestAt(args.crash_at)))


if __name__ == "__main__":
    sys.exit(main())
