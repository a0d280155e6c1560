"""Crash points: the named steps of a release where a test may kill the worker (a seam, not a switch).

The release worker and its outbox call ``crashpoints.reached(point)`` at each step below. In production the
object is :data:`NO_CRASHES`, which does nothing; nothing here reads the environment. Crash tests inject
an object that kills the process at a chosen point (``tests/integration/crashing_release.py``), to
prove a release is charged exactly once and never recomputed with fresh noise whatever step a crash hits.

- ``after_reserve``      -- budget reserved, mechanism not run / nothing stored
- ``after_commit``       -- charge settled and release stored, not yet published
- ``after_publish``      -- produced to Kafka (acked), not yet marked published
- ``after_mark``         -- marked published: the round trip that carried the mark returned. The worker
  queues the mark ahead of its next Redis step (:class:`~stream_dp.node_batches.RideAlong`), so by then the
  type's post-commit writes queued after it, and the next release's first step, went too
- ``before_release_window`` -- all types published, window not yet marked released
"""

from __future__ import annotations

from stream_dp.crashpoints import NO_CRASHES, CrashPoints

__all__ = ["NO_CRASHES", "POINTS", "CrashPoints"]

POINTS = ("after_reserve", "after_commit", "after_publish", "after_mark", "before_release_window")
