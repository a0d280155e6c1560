"""Retry delays for the workers' loops: capped exponential backoff with jitter, reset on success.

One class for the ingest loop and the release worker. The *n*-th consecutive failure waits
``min(cap, initial · 2ⁿ⁻¹)`` scaled by a random factor in ``[1 − jitter, 1]`` ("equal"-style jitter: the
delay still grows, but workers that failed together do not retry in lockstep). :meth:`Backoff.reset` —
call it only after an attempt that actually reached the failing dependency — starts again at ``initial``.

>>> b = Backoff(0.1, 0.5, jitter=0.0)
>>> [b.next_delay() for _ in range(5)]
[0.1, 0.2, 0.4, 0.5, 0.5]
>>> b.failures
5
>>> b.reset(); b.next_delay()
0.1
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Capped exponential delays with jitter; ``rand`` (uniform in [0, 1)) is injectable for tests."""

    def __init__(self, initial: float, cap: float, *, jitter: float = 0.2,
                 rand: Callable[[], float] = random.random) -> None:
        if not (initial > 0 and cap >= initial):
            raise ValueError(f"backoff needs 0 < initial <= cap, got initial={initial}, cap={cap}")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"backoff jitter must be in [0, 1), got {jitter}")
        self.initial, self.cap, self.jitter = initial, cap, jitter
        self._rand = rand
        self.failures = 0

    def next_delay(self) -> float:
        """The delay before the next attempt after one more failure."""
        base = min(self.cap, self.initial * 2.0 ** min(self.failures, 63))
        self.failures += 1
        if not self.jitter:
            return base
        return base * (1.0 - self.jitter * self._rand())

    def reset(self) -> None:
        """After a success: the next failure waits ``initial`` again."""
        self.failures = 0
