"""The ground truth for bounded counts, owned by the tests (the integration tests' and bench/bench_scaleout.py's).

Written apart from production's bounding code (``stream_dp.ingest.bounding``), so that a bug there cannot
hide in the expected values too: per tumbling window, each user's first Δ = ``max_keys_per_user``
distinct keys, in the order given (Kafka offset order for one user), count once each (L∞ = 1, L0 = Δ);
with ``unit = "event"`` every event counts.

>>> bounded_counts([(5, "a", "x"), (6, "a", "x"), (7, "a", "y"), (65, "a", "y")], window_size=60,
...                max_keys_per_user=1)
{0: {'x': 1}, 60: {'y': 1}}
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable


def bounded_counts(events: Iterable[tuple[float, str, str]], *, window_size: int, max_keys_per_user: int,
                   unit: str = "user") -> dict[int, dict[str, int]]:
    """``(event time, user, key)`` in offset order per user → ``{window start: {key: count}}``."""
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    kept: dict[tuple[int, str], set[str]] = defaultdict(set)  # (window, user) -> keys that counted
    for ts, user, key in events:
        second = math.floor(ts)
        window = second - second % window_size
        if unit == "event":
            counts[window][key] += 1
            continue
        keys = kept[window, user]
        if key not in keys and len(keys) < max_keys_per_user:
            keys.add(key)
            counts[window][key] += 1
    return {window: dict(counts[window]) for window in sorted(counts)}
