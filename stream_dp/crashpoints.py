"""The crash-point seam shared by the workers: the named steps where a test may kill a worker.

A worker calls ``crashpoints.reached(point)`` at each of its points (the release worker's:
:mod:`stream_dp.release.crashpoints`; ingest's two-step apply: :mod:`stream_dp.ingest.crashpoints`). In
production the object is :data:`NO_CRASHES`, which does nothing; nothing here reads the environment. Crash
tests inject an object that kills the process at a chosen point (``tests/integration/kill_at.py``).
"""

from __future__ import annotations

from typing import Protocol


class CrashPoints(Protocol):
    """Told each time the worker reaches one of its points."""

    def reached(self, point: str) -> None: ...


class _NoCrashes:
    """Production's crash points: reaching one does nothing."""

    def reached(self, point: str) -> None:
        return None


NO_CRASHES: CrashPoints = _NoCrashes()
