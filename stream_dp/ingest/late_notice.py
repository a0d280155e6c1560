"""A log line for events dropped as late: how many, and which settings decide it.

Late events are dropped by design (their window was already closed, or starts before the release schedule,
:mod:`stream_dp.ingest.windowing`) and counted in ``stream_dp_ingest_events_late_total``. A counter alone
hides an operator's mistake, though: a ``windows.start`` after the stream's event times, or an
``allowed_lateness_seconds`` far below the producers' delays, yields no releases and no word. So the worker
logs late events too -- the first batch that has any at once, then at most one line per ``interval`` with
the count since the previous line -- naming the settings to look at.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from stream_dp.config import WindowsConfig

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 60.0


class LateNotice:
    """Rate-limited warnings about late events (``add`` after each batch; a line at most every ``interval``)."""

    def __init__(self, windows: WindowsConfig, *, interval: float = INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.windows = windows
        self.interval = interval
        self.clock = clock
        self.pending = 0
        self.total = 0
        self._since: float | None = None
        self._last: float | None = None

    def add(self, late: int) -> None:
        """Count ``late`` events of one batch; log when a line is due."""
        if late <= 0:
            return
        now = self.clock()
        if self._since is None:
            self._since = now
        self.pending += late
        self.total += late
        if self._last is not None and now - self._last < self.interval:
            return
        w = self.windows
        log.warning("dropped %d late events in the last %.0f s (%d since start): their window had already closed "
                    "(the global watermark passed its end + windows.allowed_lateness_seconds = %g) or starts before "
                    "the release schedule (windows.start = %s); if most events are late, check windows.start and "
                    "windows.allowed_lateness_seconds", self.pending, now - self._since, self.total,
                    w.allowed_lateness_seconds, w.start)
        self.pending, self._since, self._last = 0, now, now
