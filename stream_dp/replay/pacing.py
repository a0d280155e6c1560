"""When may the next replayed event go out: a rate limit and/or event time sped up by a factor."""

from __future__ import annotations

import time
from collections.abc import Callable


class Pacer:
    """When may the next event go out? Combines an optional rate limit and an event-time speed-up.

    With ``rate`` R, event i goes out no earlier than ``t0 + i / R``. With ``speedup`` S, an event at event
    time ts goes out no earlier than ``t0 + (ts - ts0) / S`` (ts0: the first event's time), so the stream
    plays S times faster than it happened. Neither: as fast as possible. Time goes through the injected
    ``clock``/``sleep`` so tests can use a fake clock.

    >>> fake = [0.0]
    >>> p = Pacer(rate=2, clock=lambda: fake[0], sleep=lambda s: fake.__setitem__(0, fake[0] + s))
    >>> for ts in (0, 0, 0): p.wait(ts)
    >>> fake[0]
    1.0
    """

    def __init__(self, *, rate: float | None = None, speedup: float | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if rate is not None and not rate > 0:
            raise ValueError(f"rate (events per second) must be > 0, got {rate!r}")
        if speedup is not None and not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup!r}")
        self.rate, self.speedup = rate, speedup
        self._clock, self._sleep = clock, sleep
        self._t0: float | None = None
        self._ts0: float | None = None
        self._sent = 0

    def due(self, ts: float | None) -> float:
        """Wall-clock time (on ``clock``) at which the next event, with event time ``ts``, may go out."""
        if self._t0 is None:
            self._t0 = self._clock()
        target = self._t0
        if self.rate is not None:
            target = max(target, self._t0 + self._sent / self.rate)
        if self.speedup is not None and ts is not None:
            if self._ts0 is None:
                self._ts0 = ts
            target = max(target, self._t0 + (ts - self._ts0) / self.speedup)
        return target

    def wait(self, ts: float | None) -> None:
        """Sleep until the next event is due, then count it as sent."""
        delay = self.due(ts) - self._clock()
        if delay > 0:
            self._sleep(delay)
        self._sent += 1
