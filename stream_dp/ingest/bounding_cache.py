"""The ingest store's cache of each window shard's bounding state: kept in step with Redis, and bounded.

The store (:mod:`stream_dp.ingest.store`) bounds each chunk on its cache of the window shard
(:class:`~stream_dp.ingest.bounding.WindowBounding`: the keys each user already has, the applied offsets,
how much of the log it has read, and ``apply_token``, the version of the window the cache reflects);
Redis records a plan only if the window is still in that state. This module keeps the caches:

- **caught up** from a stale reply (:meth:`BoundingCaches.catch_up`): its first chunk of the log, then the
  rest read with ``GETRANGE`` in pieces of ``catch_up_chunk_bytes``, each absorbed before the next is read;
- **rolled back** when a plan's outcome is unknown or refused (:meth:`BoundingCaches.rollback`), so the
  cache matches the last confirmed state;
- **bounded**: the caches of all windows together hold at most ``cache_max_users`` users (about 230 B
  each; ``ingest.bounding_cache_max_users``): after each call, least recently used windows' caches are
  dropped until the rest fit (the most recently used window always stays, so one window larger than the cap
  is still cached: the cap is on the sum of the others). A dropped window is caught up again from Redis the
  next time it gets events, by the very path a restart takes -- its fresh cache's plan is refused as stale
  and the log is read back -- so counts stay exact; the cost is one re-read of that window's log.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import cast

import redis

from stream_dp.ingest.bounding import ChunkPlan, WindowBounding
from stream_dp.ingest.chunks import reply_text
from stream_dp.store.bounding_log import log_pieces
from stream_dp.store.keys import Keys

#: Most bounding-log bytes one catch-up read brings (the stale reply's tail, then each GETRANGE).
CATCH_UP_CHUNK_BYTES = 4 << 20

#: A window shard's cache key: (window start, shard).
WindowShard = tuple[int, int]


class BoundingCaches:
    """The bounding state of every window shard this store writes, least recently used first."""

    def __init__(self, client: redis.Redis, keys: Keys, *, window_size: int, max_keys_per_user: int,
                 unit: str = "user", cache_max_users: int | None = None,
                 catch_up_chunk_bytes: int = CATCH_UP_CHUNK_BYTES) -> None:
        self.client = client
        self.keys = keys
        self.window_size = window_size
        self.max_keys_per_user = max_keys_per_user
        self.unit = unit
        self.cache_max_users = cache_max_users
        self.catch_up_chunk_bytes = catch_up_chunk_bytes
        self.evictions = 0  # window caches dropped to stay under cache_max_users
        self.catch_up_reads = 0  # GETRANGE reads of a bounding log beyond a stale reply's first chunk
        self.windows: OrderedDict[WindowShard, WindowBounding] = OrderedDict()

    def of(self, cache: WindowShard) -> WindowBounding:
        """The cache of one window shard (an empty one the first time), now the most recently used."""
        bounding = self.windows.get(cache)
        if bounding is None:
            bounding = self.windows[cache] = WindowBounding(self.max_keys_per_user, unit=self.unit)
        else:
            self.windows.move_to_end(cache)
        return bounding

    def drop(self, cache: WindowShard) -> None:
        """Forget one window shard (closed: never planned on again)."""
        self.windows.pop(cache, None)

    def forget_closed(self, *, closed_through: float) -> None:
        """Drop the caches of windows with ``end <= closed_through`` (closed: no more events)."""
        for cache in [c for c in self.windows if c[0] + self.window_size <= closed_through]:
            del self.windows[cache]

    def rollback(self, plans: list[tuple[WindowShard, ChunkPlan]],
                 skipped: frozenset[int] | set[int] = frozenset()) -> None:
        """Undo plans, newest first (the cache of each window shard then matches its last confirmed state);
        plans in ``skipped`` (by id) were recorded as skipped: :meth:`WindowBounding.skip`."""
        for cache, plan in reversed(plans):
            bounding = self.windows.get(cache)
            if bounding is not None:
                (bounding.skip if id(plan) in skipped else bounding.rollback)(plan)

    def catch_up(self, cache: WindowShard, reply: list) -> None:
        """Absorb a stale reply: its first chunk of the log, then the rest up to the length it reported, read
        with GETRANGE in pieces of ``catch_up_chunk_bytes`` (the log is append-only, so bytes below that
        length do not change). If the log got shorter meanwhile (deleted), the window's cache is dropped:
        the next plan is refused as stale again and catches up from the start."""
        _, token, log_from, tail, flat, length, segment_bytes = reply
        log_from, length, segment_bytes = int(log_from), int(length), int(segment_bytes)
        name = self.keys.window_users(*cache)
        short = False

        def pieces() -> Iterator[bytes]:
            nonlocal short
            yield tail
            at = log_from + len(tail)
            while at < length:
                upto = min(length, at + self.catch_up_chunk_bytes)
                where = log_pieces(name, segment_bytes, at, upto)
                if len(where) == 1:
                    piece = cast(bytes, self.client.getrange(*where[0]))
                else:  # the read crosses segments: one round trip still
                    pipe = self.client.pipeline(transaction=False)
                    for key, first, last in where:
                        pipe.getrange(key, first, last)
                    piece = b"".join(pipe.execute())
                self.catch_up_reads += 1
                if len(piece) != upto - at:
                    short = True
                    return
                yield piece
                at = upto

        bounding = self.windows[cache]
        try:
            bounding.absorb_pieces(token=reply_text(token), log_from=log_from, pieces=pieces(),
                                   applied_through={int(flat[j]): int(flat[j + 1]) for j in range(0, len(flat), 2)})
        except ValueError:
            if not short:
                raise
        if short:
            del self.windows[cache]

    def users(self) -> int:
        """Users held in the caches of all windows (the measure ``cache_max_users`` caps)."""
        return sum(b.users for b in self.windows.values())

    def most_log_bytes(self) -> int:
        """The bounding log bytes of the fullest window shard cached (0 when none is)."""
        return max((b.log_bytes for b in self.windows.values()), default=0)

    def enforce_cap(self) -> None:
        """Drop least recently used window caches until the rest hold at most ``cache_max_users`` users
        (never the most recently used one). Exactness does not depend on the cache (module docstring)."""
        if self.cache_max_users is None:
            return
        total = self.users()
        while total > self.cache_max_users and len(self.windows) > 1:
            _, dropped = self.windows.popitem(last=False)
            total -= dropped.users
            self.evictions += 1
