"""Contribution bounding per (window, user): the rule, in plain Python.

Privacy unit = user (DESIGN.md §2; Durfee & Rogers 2019 §1.1 assume exactly these sensitivities). Within
one window a user

- counts at most once per key (L∞ = 1): a key's count is the number of distinct users that touched it;
- adds to at most Δ = ``max_keys_per_user`` distinct keys (L0 = Δ): the first Δ distinct keys of the user
  *in Kafka offset order* are kept, every later new key is dropped.

Producers key events by user, so all of one user's events are in one partition and offset order is a
total order on them: a replay after a crash makes exactly the same choice. The production implementation
is the Redis script ``lua/apply_window.lua`` (the bounding state lives next to the counts and the applied
offsets, in one hash tag, so it is replay-safe); :class:`ContributionBounder` is the same rule for tests
and simulations, and the ground truth the integration tests compare Redis against.

With ``unit = "event"`` (event-level privacy) there is no per-user state: every valid event adds 1 to
its key's count. Releases computed on such counts protect single events, not users.

>>> b = ContributionBounder(max_keys_per_user=2)
>>> [b.offer("alice", k) for k in ("x", "x", "y", "z")]
['counted', 'linf', 'counted', 'l0']
>>> dict(b.counts)
{'x': 1, 'y': 1}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

#: Outcome of offering one event to the bounder ("linf" and "l0" are metric labels).
OUTCOMES: tuple[str, ...] = ("counted", "linf", "l0")
BOUNDING_RULES: tuple[str, ...] = ("linf", "l0")


class ContributionBounder:
    """Bounds the contributions to ONE window; offer events in offset order."""

    def __init__(self, max_keys_per_user: int, *, unit: str = "user") -> None:
        if max_keys_per_user < 1:
            raise ValueError(f"contribution.max_keys_per_user must be >= 1, got {max_keys_per_user}")
        if unit not in ("user", "event"):
            raise ValueError(f"contribution.unit must be 'user' or 'event', got {unit!r}")
        self.max_keys_per_user = max_keys_per_user
        self.unit = unit
        self.counts: Counter[str] = Counter()
        self._keys_of: dict[str, list[str]] = {}

    def offer(self, user: str, key: str) -> str:
        """Apply one event; returns ``"counted"``, ``"linf"`` (user already counted for this key) or
        ``"l0"`` (user already at Δ keys)."""
        if self.unit == "event":
            self.counts[key] += 1
            return "counted"
        keys = self._keys_of.setdefault(user, [])
        if key in keys:
            return "linf"
        if len(keys) >= self.max_keys_per_user:
            return "l0"
        keys.append(key)
        self.counts[key] += 1
        return "counted"


def bounded_window_counts(events: Iterable[tuple[int, str, str]], *, window_size: int, max_keys_per_user: int,
                          unit: str = "user") -> dict[int, dict[str, int]]:
    """Ground truth: ``(event time, user, key)`` in offset order per user → {window start: {key: count}}.

    >>> bounded_window_counts([(5, "a", "x"), (6, "a", "x"), (65, "a", "x")], window_size=60, max_keys_per_user=1)
    {0: {'x': 1}, 60: {'x': 1}}
    """
    bounders: dict[int, ContributionBounder] = {}
    for ts, user, key in events:
        start = int(ts // window_size) * window_size
        if start not in bounders:
            bounders[start] = ContributionBounder(max_keys_per_user, unit=unit)
        bounders[start].offer(user, key)
    return {start: dict(b.counts) for start, b in sorted(bounders.items())}
