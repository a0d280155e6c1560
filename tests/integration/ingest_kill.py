"""The crash points object the crashing ingest worker injects (``crashing_ingest.py``): it travels pickled to
the worker's applier process (:class:`stream_dp.ingest.runners.ProcessRunner`), so it lives in a module of
its own that the child imports by this name (the test puts this directory on the child's PYTHONPATH)."""

from __future__ import annotations

import os
import signal
import sys

from stream_dp.ingest.crashpoints import POINTS

CRASHED = "ingest crash point reached, SIGKILL:"


class KillIngestAt:
    """SIGKILL the worker (the applier's parent) and the applier the ``nth`` time (1-based) ``point`` is
    reached -- the whole worker dies at that step, as with a machine failure."""

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
            os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
