"""Event times of the integration tests: near the present, as real producers stamp them.

Apache Kafka 4 refuses a record stamped more than ``log.message.timestamp.after.max.ms`` (1 hour by
default) ahead of the broker's clock, so a fixed future instant (the tests once used 1_800_000_000, January
2027) would be refused there; a fixed past instant would age past any finite retention. :data:`T0` is the
start of the UTC day before yesterday's end -- 24 to 48 hours ago -- fixed once per test process:
window-aligned for every window size that divides a day (60, 100, 600, 3600 s ...), every stream of a test
lies entirely in the past (so no record is "from the future"), and a run's windows do not move while it
runs. Old enough that nothing is in the future, young enough for Kafka's default 7-day retention too.
"""

from __future__ import annotations

import time

DAY = 86400


def recent_day_start(now: float | None = None) -> int:
    """The UTC midnight 24-48 hours before ``now`` (default: the wall clock)."""
    now = time.time() if now is None else now
    return int(now) // DAY * DAY - DAY


T0 = recent_day_start()
