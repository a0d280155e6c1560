"""Contribution bounding per (window, user): the rule, in plain Python.

Privacy unit = user (docs/privacy.md §1; Durfee & Rogers 2019 assume exactly these sensitivities: ℓ∞ = 1, ℓ0 = Δ). Within
one window a user

- counts at most once per key (L∞ = 1): a key's count is the number of distinct users that touched it;
- adds to at most Δ = ``max_keys_per_user`` distinct keys (L0 = Δ): the first Δ distinct keys of the user
  *in Kafka offset order* are kept, every later new key is dropped.

Producers key events by user, so all of one user's events are in one partition and offset order is a
total order on them: a replay after a crash makes exactly the same choice. (A user whose events are spread
over partitions is still held to Δ keys per window; which keys are kept then follows the order in which the
chunks were applied.)

Two implementations of the one rule live here: :class:`ContributionBounder`, event by event, for tests,
simulations and the ground truth of the integration tests; and :class:`WindowBounding`, the production
planner the ingest worker runs chunk by chunk on a cache of a window's state, whose outcome Redis records
only if the window is still in the state the cache was made for (``store/lua/apply_window.lua``).

With ``unit = "event"`` (event-level privacy) there is no per-user state: every valid event adds 1 to
its key's count. Releases computed on such counts protect single events, not users.

>>> b = ContributionBounder(max_keys_per_user=2)
>>> [b.offer("alice", k) for k in ("x", "x", "y", "z")]
['counted', 'linf', 'counted', 'l0']
>>> dict(b.counts)
{'x': 1, 'y': 1}
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import ge, itemgetter
from typing import Any

from stream_dp.schedule import window_start
from stream_dp.store.bounding_log import LogDecoder, encode_log

#: Outcome of offering one event to the bounder ("linf" and "l0" are metric labels).
OUTCOMES: tuple[str, ...] = ("counted", "linf", "l0")
BOUNDING_RULES: tuple[str, ...] = ("linf", "l0")


def check_bounding_settings(max_keys_per_user: int, unit: str) -> None:
    """Raise ValueError naming the setting when Δ or the privacy unit is invalid."""
    if max_keys_per_user < 1:
        raise ValueError(f"contribution.max_keys_per_user must be >= 1, got {max_keys_per_user}")
    if unit not in ("user", "event"):
        raise ValueError(f"contribution.unit must be 'user' or 'event', got {unit!r}")


class ContributionBounder:
    """Bounds the contributions to ONE window; offer events in offset order."""

    def __init__(self, max_keys_per_user: int, *, unit: str = "user") -> None:
        check_bounding_settings(max_keys_per_user, unit)
        self.max_keys_per_user = max_keys_per_user
        self.unit = unit
        self.counts: Counter[Hashable] = Counter()  # keys and users: strings in the service, any hashable in
        self._keys_of: dict[Hashable, list[Hashable]] = {}  # the library (stream_dp.api)

    def offer(self, user: Hashable, key: Hashable) -> str:
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

    def pairs(self) -> list[tuple[Hashable, Hashable]]:
        """The counted (user, key) pairs, each user's in the order they were counted (``unit = "user"``)."""
        return [(user, key) for user, keys in self._keys_of.items() for key in keys]


def bounded_window_counts(events: Iterable[tuple[int, str, str]], *, window_size: int, max_keys_per_user: int,
                          unit: str = "user") -> dict[int, dict[Hashable, int]]:
    """Ground truth: ``(event time, user, key)`` in offset order per user → {window start: {key: count}}.

    >>> bounded_window_counts([(5, "a", "x"), (6, "a", "x"), (65, "a", "x")], window_size=60, max_keys_per_user=1)
    {0: {'x': 1}, 60: {'x': 1}}
    """
    bounders: dict[int, ContributionBounder] = {}
    for ts, user, key in events:
        start = window_start(ts, window_size)
        if start not in bounders:
            bounders[start] = ContributionBounder(max_keys_per_user, unit=unit)
        bounders[start].offer(user, key)
    return {start: dict(b.counts) for start, b in sorted(bounders.items())}


# --- the production planner ----------------------------------------------------------------------------
#
# The rule above is evaluated in the ingest worker, on a cache of the window's bounding state, and Redis
# only records the outcome. What makes that safe is optimistic concurrency: the cache is valid for exactly
# one version ("token") of the window's state in Redis, the apply script refuses a plan made for any other
# version, and the refusal carries what changed so the plan can be made again on the current state.

def applied_prefix(events: Sequence[tuple[int, str, str]], applied_through: int | None) -> int:
    """How many leading ``(offset, user, key)`` events (offsets increasing) are at or below the applied
    offset ``applied_through`` (None: nothing applied yet), i.e. already applied: a replay."""
    return 0 if applied_through is None else bisect_right(events, applied_through, key=itemgetter(0))


def check_increasing(partition: int, events: Sequence[tuple[int, str, str]]) -> None:
    """Raise ValueError unless the chunk's offsets strictly increase."""
    offsets = list(map(itemgetter(0), events))
    if any(map(ge, offsets, islice(offsets, 1, None))):
        i = next(i for i in range(1, len(offsets)) if offsets[i] <= offsets[i - 1])
        raise ValueError(f"chunk of partition {partition}: offsets must increase within a chunk "
                         f"({offsets[i]} after {offsets[i - 1]})")


@dataclass
class ChunkPlan:
    """The effect of one (window, partition) chunk on the cached state, before Redis has applied it.

    ``duplicate`` leading events are at or below the partition's applied offset (a replay); of the rest,
    ``applied`` are counted, ``linf``/``l0`` bounded away. ``log`` holds the counted (user, key) pairs,
    ``increments`` the count added per key. ``token_before``/``token`` name the state the plan was made on
    and the state it creates.
    """

    partition: int
    duplicate: int
    applied: int
    linf: int
    l0: int
    last_offset: int | None  # the chunk's highest offset, None when every event is a duplicate
    log: bytes
    increments: dict[str, int]
    token_before: str
    token: str
    log_bytes_before: int  # the log length the plan was made on (the script checks it)
    _counted: list[str]  # [user, key, ...] of the counted events, in order (for rollback)
    _offset_before: int | None


class WindowBounding:
    """The bounding state of ONE window as of one version of it in Redis (the planner's cache).

    - ``token``: the version (set by every apply; ``""`` before the first);
    - ``log_bytes``: how much of the window's bounding log (``{w:<start>}:users``, the counted
      ``user\\0key\\0`` pairs in apply order) this cache has absorbed;
    - the counted keys of every user, in first-seen order (:meth:`keys`), and the highest applied offset
      per partition.

    A user's keys are held as the key itself (``str``) while there is one, as a tuple of keys from the
    second on (``keys_of``): neither is a container the cyclic garbage collector keeps tracking (strings
    never are; tuples of strings are untracked the first time a collection sees them), so the cache --
    up to ``ingest.bounding_cache_max_users`` users -- adds nothing to the traversal of a full collection,
    where one list per user made each full collection walk every cached user (bench/README.md), and a
    one-key user costs no object of its own.

    :meth:`plan` applies the rule of :class:`ContributionBounder` to a chunk and advances the cache
    tentatively; :meth:`rollback` undoes the latest plans (newest first) when Redis refused them or the
    outcome is unknown; :meth:`absorb` adds what other writers appended since ``log_bytes``.
    """

    def __init__(self, max_keys_per_user: int, *, unit: str = "user") -> None:
        # Δ and the unit come from the validated config (contribution.*), not re-checked here
        self.max_keys_per_user = max_keys_per_user
        self.unit = unit
        self.token = ""
        self.log_bytes = 0
        # user -> its key (a str), or its keys (a tuple of str; see above). Any: the loops tell them apart with
        # type(x) is tuple, the fastest test, which mypy does not narrow on
        self.keys_of: dict[str, Any] = {}
        self.applied_through: dict[int, int] = {}

    def keys(self, user: str) -> tuple[str, ...]:
        """The keys counted for ``user`` in this window, in the order they were counted."""
        mine = self.keys_of.get(user)
        return () if mine is None else (mine,) if type(mine) is not tuple else mine

    def plan(self, partition: int, events: Sequence[tuple[int, str, str]], *, token: str) -> ChunkPlan:
        """Bound one chunk, ``(offset, user, key)`` in strictly increasing offset order, on the cached
        state; the cache then reflects the chunk as applied, under the version ``token``."""
        check_increasing(partition, events)
        n = len(events)
        last = self.applied_through.get(partition)
        first = applied_prefix(events, last)
        counted: list[str] = []
        linf = l0 = 0
        if self.unit == "event":
            increments = Counter(key for _, _, key in events[first:])
            applied = n - first
        else:
            keys_of, cap, add = self.keys_of, self.max_keys_per_user, counted.extend
            for _, user, key in events[first:]:
                mine = keys_of.get(user)
                if mine is None:
                    keys_of[user] = key
                elif type(mine) is not tuple:  # one key so far
                    if key == mine:
                        linf += 1
                        continue
                    if cap == 1:
                        l0 += 1
                        continue
                    keys_of[user] = (mine, key)
                elif key in mine:
                    linf += 1
                    continue
                elif len(mine) >= cap:
                    l0 += 1
                    continue
                else:
                    keys_of[user] = mine + (key,)
                add((user, key))
            increments = Counter(counted[1::2])
            applied = len(counted) // 2
        log = encode_log(counted)
        plan = ChunkPlan(partition=partition, duplicate=first, applied=applied, linf=linf, l0=l0,
                         last_offset=events[-1][0] if first < n else None, log=log, increments=increments,
                         token_before=self.token, token=token, log_bytes_before=self.log_bytes,
                         _counted=counted, _offset_before=last)
        if first < n:
            self.applied_through[partition] = events[-1][0]
            self.log_bytes += len(log)
            self.token = token
        return plan

    def rollback(self, plan: ChunkPlan) -> None:
        """Undo ``plan``, which must be the newest plan not yet undone."""
        if plan.last_offset is None:
            return
        if self.token != plan.token:
            raise RuntimeError("bounding cache: plans must be rolled back newest first")
        counted, keys_of = plan._counted, self.keys_of
        for i in range(len(counted) - 2, -1, -2):  # the counted pairs back out, newest first
            user = counted[i]
            mine = keys_of[user]
            if type(mine) is not tuple:
                del keys_of[user]
            elif len(mine) == 2:
                keys_of[user] = mine[0]
            else:
                keys_of[user] = mine[:-1]
        if plan._offset_before is None:
            del self.applied_through[plan.partition]
        else:
            self.applied_through[plan.partition] = plan._offset_before
        self.log_bytes = plan.log_bytes_before
        self.token = plan.token_before

    def skip(self, plan: ChunkPlan) -> None:
        """``plan`` (the newest not undone) was recorded as *skipped*: Redis moved the partition's offset and
        the token on, but counted none of its events (the shard was at capacity, ``apply_window.lua``
        reply ``full``). The cache follows: the plan's pairs are undone, its offset and token kept."""
        if plan.last_offset is None:
            return
        self.rollback(plan)
        self.applied_through[plan.partition] = plan.last_offset
        self.token = plan.token

    def absorb(self, *, token: str, log_from: int, log_tail: bytes, applied_through: dict[int, int]) -> None:
        """Catch up with Redis: ``log_tail`` is the window's log from byte ``log_from`` to its end (from 0
        when the log is shorter than this cache: it was reset, and so is the cache)."""
        self.absorb_pieces(token=token, log_from=log_from, pieces=[log_tail], applied_through=applied_through)

    def absorb_pieces(self, *, token: str, log_from: int, pieces: Iterable[bytes],
                      applied_through: dict[int, int]) -> None:
        """:meth:`absorb` with the log tail given as consecutive byte ranges (read in bounded chunks: only one
        piece and its pairs are held at a time, whatever the length of the log)."""
        if log_from == 0 and self.log_bytes:
            self.keys_of.clear()
        elif log_from != self.log_bytes:
            raise ValueError(f"bounding log read from byte {log_from}, but the cache holds {self.log_bytes} bytes")
        keys_of = self.keys_of
        decoder = LogDecoder()
        length = log_from
        for piece in pieces:
            length += len(piece)
            for user, key in decoder.feed(piece):
                mine = keys_of.get(user)
                if mine is None:
                    keys_of[user] = key
                elif type(mine) is not tuple:
                    keys_of[user] = (mine, key)
                else:
                    keys_of[user] = mine + (key,)
        decoder.finish()
        self.log_bytes = length
        self.applied_through = dict(applied_through)
        self.token = token

    @property
    def users(self) -> int:
        """Users cached (each at most ~230 B with its keys and strings; the cache's size measure)."""
        return len(self.keys_of)
