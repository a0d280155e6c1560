"""The release worker with a crash injected: ``python tests/integration/crashing_release.py --crash-at POINT[@N]
<release worker options>``.

Test-owned: production's worker gets :data:`stream_dp.release.crashpoints.NO_CRASHES`; this entry point
injects :class:`kill_at.KillAt`, which SIGKILLs the process the N-th time (1-based) it reaches POINT.
"""

from __future__ import annotations

import sys

from kill_at import CRASHED, crashing_main
from stream_dp.cli import release_cmd
from stream_dp.release.crashpoints import POINTS

__all__ = ["CRASHED"]

if __name__ == "__main__":
    sys.exit(crashing_main(None, prog="crashing_release", description=__doc__.splitlines()[0], command=release_cmd,
                           points=POINTS))
