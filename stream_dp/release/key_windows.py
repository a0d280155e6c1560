"""The reads of a closed window in the key layout that touch only some keys: top-k's top n and the watched
keys' counts (docs/design/key-sharded-counts.md), served through
:class:`~stream_dp.release.window_counts.WindowCountsReader` when ``windows.layout = "key"`` (the release
worker itself still refuses that layout: its sample and histogram reads and the drain are not done).

In the key layout every key's whole window count is in one key shard (:func:`~stream_dp.store.keys.key_shard_of`),
so each read is one batch of single-shard commands -- one pipeline per master on a cluster, one round trip on
a single Redis -- and returns exactly what :class:`~stream_dp.release.windows.WindowReader` returns for the
same counts in one unsharded window, in the same order:

- :meth:`KeyShardReads.top_counts` -- ``ZREVRANGE 0 n-1`` of every key shard (the ``window_top`` script, one
  JSON reply each), merged exactly (:func:`~stream_dp.release.key_shards.merge_disjoint_top`). Unlike the user
  layout's threshold algorithm it is one batch, so it can ride along with another step (``ReadStep.later``);
- :meth:`KeyShardReads.counts_of` -- ``ZMSCORE`` of each watched key on its own key shard only.

Counts are raw, per key, and private: they stay in this process and go only into mechanisms.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from stream_dp.node_batches import ReadStep, Reads, evalsha_item
from stream_dp.release.key_shards import merge_disjoint_top, route_by_key_shard
from stream_dp.store import scripts
from stream_dp.store.keys import Keys

if TYPE_CHECKING:
    from stream_dp.release.windows import Window


class KeyShardReads:
    """Reads of closed windows whose counts are in key shards (``keys.layout == "key"``)."""

    def __init__(self, client, *, keys: Keys) -> None:  # a redis client (single node or cluster)
        if keys.layout != "key":
            raise ValueError(f"key-shard reads need the key layout, got windows.layout = {keys.layout!r}")
        self.r = client
        self.keys = keys
        self._top = scripts.register(client, "window_top")

    @property
    def scripts(self) -> tuple:
        """The Lua scripts these reads run (loaded when the worker starts)."""
        return (self._top,)

    def top_counts(self, window: Window, n: int) -> ReadStep:
        """The ``n`` largest counts of the window, key → count, best first, ties in ``ZREVRANGE`` order: one
        batch, ``.now()`` or ``.later(ride)``."""
        if n < 1:
            empty = Reads([], lambda replies: {}, client=self.r)
            return ReadStep(empty.now, empty)
        items = [evalsha_item(self._top, [self.keys.key_shard_counts(window.start, j)], [n - 1, 0])
                 for j in range(self.keys.shards)]

        def parse(replies: list) -> dict[str, float]:
            parts = []
            for raw in replies:
                flat = json.loads(raw)
                parts.append(list(zip(flat[0::2], (float(s) for s in flat[1::2]))))
            return merge_disjoint_top(parts, n)

        batch = Reads(items, parse, scripts=[self._top], client=self.r)
        return ReadStep(batch.now, batch)

    def counts_of(self, window: Window, watched: list[str]) -> ReadStep:
        """The counts of the given public keys (0 for a key with no events), key → count in the order given:
        one ``ZMSCORE`` per key shard that holds one of them, as one batch."""
        keys = list(watched)
        routed = sorted(route_by_key_shard(dict.fromkeys(keys), self.keys.shards).items())
        items = []
        for shard, members in routed:
            name = self.keys.key_shard_counts(window.start, shard)
            items.append((name, lambda pipe, name=name, members=members: pipe.zmscore(name, members)))

        def parse(replies: list) -> dict[str, float]:
            got: dict[str, float] = {}
            for (_, members), scores in zip(routed, replies):
                got.update((k, 0.0 if s is None else float(s)) for k, s in zip(members, scores))
            return {k: got[k] for k in keys}

        batch = Reads(items, parse, client=self.r)
        return ReadStep(batch.now, batch)
