"""The ingest worker with a crash injected: ``python tests/integration/crashing_ingest.py --crash-at POINT[@N]
<ingest worker options>``.

Test-owned: production's worker gets :data:`stream_dp.ingest.crashpoints.NO_CRASHES`; this entry point
injects :class:`kill_at.KillAt`, which SIGKILLs the worker (and its applier process) the N-th time (1-based)
its applier reaches POINT (:mod:`stream_dp.ingest.crashpoints`).
"""

from __future__ import annotations

import sys

from kill_at import crashing_main
from stream_dp.cli import ingest_cmd
from stream_dp.ingest.crashpoints import POINTS

if __name__ == "__main__":
    sys.exit(crashing_main(None, prog="crashing_ingest", description=__doc__.splitlines()[0], command=ingest_cmd,
                           points=POINTS, parent=True))
