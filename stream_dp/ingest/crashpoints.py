"""Crash points of ingest's two-step apply in the key layout (docs/design/key-sharded-counts.md): the named
steps where a test may kill the worker (a seam, not a switch).

:class:`~stream_dp.ingest.key_counter.KeyCounter` calls ``crashpoints.reached(point)`` at each step below. In
production the object is :data:`NO_CRASHES`, which does nothing; nothing here reads the environment. Crash
tests inject an object that kills the worker (``tests/integration/crashing_ingest.py``) to prove that a crash
between the steps is healed by the replay: nothing counted twice, nothing lost.

- ``after_record`` -- step 1 returned (the chunks bounded, their increments recorded as pending in the user
  shards, the offsets recorded), step 2 not sent
- ``after_count``  -- step 2 returned (every key shard counted the pending entries), the entries not yet
  deleted from pending, the Kafka offsets not committed
- ``after_trim``   -- a later step 1 that carried the deletion of counted entries returned
"""

from __future__ import annotations

from stream_dp.crashpoints import NO_CRASHES, CrashPoints

__all__ = ["NO_CRASHES", "POINTS", "CrashPoints"]

POINTS = ("after_record", "after_count", "after_trim")
