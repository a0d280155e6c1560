"""The reads of a closed window in the key layout (docs/design/key-sharded-counts.md), served through
:class:`~stream_dp.release.window_counts.WindowCountsReader` when ``windows.layout = "key"``, after the
release's drain (:mod:`stream_dp.release.key_drain`) made the key shards final.

In the key layout every key's whole window count is in one key shard (:func:`~stream_dp.store.keys.key_shard_of`),
so each read is one batch of single-shard commands -- one pipeline per master on a cluster, one round trip on
a single Redis -- and returns exactly what :class:`~stream_dp.release.windows.WindowReader` returns for the
same counts in one unsharded window, in the same order:

- :meth:`KeyShardReads.top_counts` -- ``ZREVRANGE 0 n-1`` of every key shard (the ``window_top`` script, one
  JSON reply each), merged exactly (:func:`~stream_dp.release.key_shards.merge_disjoint_top`). Unlike the user
  layout's threshold algorithm it is one batch, so it can ride along with another step (``ReadStep.later``);
- :meth:`KeyShardReads.counts_of` -- ``ZMSCORE`` of each watched key on its own key shard only;
- :meth:`KeyShardReads.count_histogram` and :meth:`KeyShardReads.members_at` -- the sample's count classes,
  each key shard's histogram walked (``window_count_histogram``) and summed count by count, then only the
  keys at the ranks the sample reports, each on its own key shard (:mod:`stream_dp.release.key_classes`:
  the same distribution as one sorted set);
- :meth:`KeyShardReads.all_counts` -- every key shard read whole, in ``ZRANGE`` chunks, and concatenated
  (disjoint: nothing is summed), for the histogram (and the large-margin mechanism when its sorted prefix
  would be as large: :mod:`stream_dp.release.argmax_prefix`).

Every step reads all key shards in one batch: one pipeline per master on a cluster (the masters answer in
parallel), one round trip on a single Redis; a walk or read that needs more chunks goes round by round, each
round one batch over the shards that still have more.

Counts are raw, per key, and private: they stay in this process and go only into mechanisms.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from stream_dp.node_batches import ReadStep, Reads, evalsha_item, run_with_scripts
from stream_dp.release.key_classes import ShardedClasses
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
        self._chunk = scripts.register(client, "window_read_chunk")
        self._histogram = scripts.register(client, "window_count_histogram")
        self._members_at = scripts.register(client, "window_members_at")
        self._classes: tuple[int, ShardedClasses] | None = None  # the window whose histogram was read last

    @property
    def scripts(self) -> tuple:
        """The Lua scripts these reads run (loaded when the worker starts)."""
        return (self._top, self._chunk, self._histogram, self._members_at)

    def forget(self, window: Window) -> None:
        """Drop what is kept of ``window`` (its count classes)."""
        if self._classes is not None and self._classes[0] == window.start:
            self._classes = None

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

    # --- whole-window reads, shard by shard -------------------------------------------------------------
    def _rounds(self, script, window: Window, first_args, next_args, chunk: int,
                shards: range | None = None) -> dict[int, list]:
        """Each key shard's JSON replies of ``script`` (every shard, or ``shards``), round by round: round 1
        sends ``first_args(j)`` to every shard in one batch, each later round ``next_args(flat)`` to the shards
        whose last reply was full."""
        out: dict[int, list] = {j: [] for j in (range(self.keys.shards) if shards is None else shards)}
        todo = {j: first_args(j) for j in out}
        while todo:
            asked = sorted(todo)
            items = [evalsha_item(script, [self.keys.key_shard_counts(window.start, j)], todo[j]) for j in asked]
            replies = run_with_scripts(self.r, items, [script], ordered=False)
            todo = {}
            for j, raw in zip(asked, replies):
                flat = json.loads(raw)
                out[j].append(flat)
                if len(flat) >= 2 * chunk:
                    todo[j] = next_args(j, len(out[j]), flat)
        return out

    def all_counts(self, window: Window, chunk: int) -> tuple[list[str], np.ndarray]:
        """Every key of the window with its count: key shard 0's in ``ZRANGE`` order, then shard 1's, …"""
        keys: list[str] = []
        parts: list[np.ndarray] = []
        for shard in self._chunks(window, chunk).values():
            for flat in shard:
                keys.extend(flat[0::2])
                parts.append(np.array(flat[1::2], dtype=np.float64))
        return keys, (np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64))

    def shard_counts(self, window: Window, shard: int, chunk: int) -> dict[str, float]:
        """One key shard's counts, key → count, read in ``ZRANGE`` chunks (the histogram reads the window one
        key shard at a time: :class:`~stream_dp.mechanisms.count_parts.CountParts`)."""
        out: dict[str, float] = {}
        for flat in self._chunks(window, chunk, range(shard, shard + 1))[shard]:
            out.update(zip(flat[0::2], (float(c) for c in flat[1::2])))
        return out

    def _chunks(self, window: Window, chunk: int, shards: range | None = None) -> dict[int, list]:
        """The key shards' ``ZRANGE`` chunks of ``chunk`` keys (``window_read_chunk``), round by round."""
        return self._rounds(self._chunk, window, lambda j: [0, chunk - 1],
                            lambda j, n, flat: [n * chunk, (n + 1) * chunk - 1], chunk, shards)

    def count_histogram(self, window: Window, chunk: int) -> list[tuple[float, int]]:
        """``(count, keys with that count)`` of the window, ascending: every key shard's walk summed (kept for
        :meth:`members_at` of the same window)."""
        replies = self._rounds(self._histogram, window, lambda j: ["-inf", chunk, "+inf"],
                               lambda j, n, flat: ["(" + str(flat[-2]), chunk, "+inf"], chunk)
        histograms = [[(float(c), int(k)) for flat in shard for c, k in zip(flat[0::2], flat[1::2])]
                      for shard in replies.values()]
        classes = ShardedClasses.of(histograms)
        self._classes = (window.start, classes)
        return classes.histogram()

    def members_at(self, window: Window, ranks: np.ndarray, counts: np.ndarray, chunk: int) -> list[str]:
        """The keys at window ranks ``ranks`` (laid out over the key shards as :mod:`~stream_dp.release.key_classes`
        says; the classes of :meth:`count_histogram`, read first), each checked to have its count in ``counts``.
        One batch per ``chunk`` ranks of a shard. Raises ``RuntimeError`` when the window changed (a closed
        window never does)."""
        if self._classes is None or self._classes[0] != window.start:
            self.count_histogram(window, chunk)
        assert self._classes is not None
        want = np.asarray(counts, dtype=np.float64)
        at = np.asarray(ranks, dtype=np.int64)
        try:
            shard, within = self._classes[1].locate(at)
        except ValueError:
            raise RuntimeError(f"window {window.label} changed while it was being sampled "
                               "(a closed window must not change)") from None
        out = np.empty(len(at), dtype=object)
        items, places = [], []
        for j in np.unique(shard).tolist():
            where = np.flatnonzero(shard == j)
            for s in range(0, len(where), chunk):
                part = where[s:s + chunk]
                items.append(evalsha_item(self._members_at, [self.keys.key_shard_counts(window.start, j)],
                                          _runs(within[part])))
                places.append(part)
        for part, raw in zip(places, run_with_scripts(self.r, items, [self._members_at], ordered=False)):
            flat = json.loads(raw)
            got = np.array(flat[1::2], dtype=np.float64)
            if len(got) != len(part) or np.any(got != want[part]):
                raise RuntimeError(f"window {window.label} changed while it was being sampled "
                                   "(a closed window must not change)")
            out[part] = flat[0::2]
        return out.tolist()


def _runs(ranks: np.ndarray) -> list[int]:
    """Runs of consecutive ranks, in the order given, as (first, last) pairs flattened (``window_members_at``)."""
    if not len(ranks):
        return []
    starts = np.flatnonzero(np.concatenate(([True], np.diff(ranks) != 1)))
    ends = np.concatenate((starts[1:], [len(ranks)])) - 1
    return np.column_stack((ranks[starts], ranks[ends])).ravel().tolist()
