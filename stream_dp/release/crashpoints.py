"""Crash points for tests: make the release worker SIGKILL itself at a named step.

Set ``STREAMDP_TEST_CRASH_AT`` to ``"<point>"`` or ``"<point>@<n>"`` (kill on the n-th time the point is
reached, 1-based) in the worker's environment. Unset (production), :func:`crashpoint` does nothing. Points:

- ``after_reserve``      -- budget reserved, mechanism not run / nothing stored
- ``after_commit``       -- charge settled and release stored, not yet published
- ``after_publish``      -- produced to Kafka (acked), not yet marked published
- ``after_mark``         -- marked published, post-commit steps of the type not done
- ``before_release_window`` -- all types published, window not yet marked released
"""

from __future__ import annotations

import os
import signal

ENV = "STREAMDP_TEST_CRASH_AT"  # not STREAM_DP_*: that prefix is the config override namespace
POINTS = ("after_reserve", "after_commit", "after_publish", "after_mark", "before_release_window")

_hits: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    raw = os.environ.get(ENV, "")
    if not raw:
        return None
    name, _, nth = raw.partition("@")
    if name not in POINTS:
        raise ValueError(f"{ENV}={raw!r}: unknown crash point; known: {', '.join(POINTS)}")
    return name, int(nth or 1)


def crashpoint(name: str) -> None:
    """SIGKILL this process if the test environment asks for a crash at ``name`` (now)."""
    target = _target()
    if target is None or target[0] != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == target[1]:
        os.kill(os.getpid(), signal.SIGKILL)
