"""What a release reads of one closed window: its raw counts, only as much as each release type needs.

:class:`WindowCountsReader` (the base of :class:`~stream_dp.release.windows.WindowReader`) serves the
builders (:mod:`stream_dp.release.builders`):

- :meth:`WindowCountsReader.top_counts` -- the top ``n`` counts (``ZREVRANGE``), for limited-domain top-k,
  which reads only the top k̄+1 (DR19 Algorithm 1);
- :meth:`WindowCountsReader.counts_of` -- the counts of given (public, watched) keys (``ZMSCORE``), missing = 0;
- :meth:`WindowCountsReader.count_histogram` -- how many keys have each count (a walk over the distinct
  counts, O(#distinct counts · log n) in Redis), and :meth:`WindowCountsReader.members_at` -- the keys at
  given ranks, for weighted sampling, which reads only the keys it reports
  (:func:`stream_dp.release.sampling.sample_count_classes`);
- :meth:`WindowCountsReader.all_counts` -- the whole window as numpy arrays, read in ``ZRANGE`` chunks, for
  the histogram (and the large-margin mechanism when its search goes deep: it reads the top counts first,
  :mod:`stream_dp.release.argmax_prefix`);
- :meth:`WindowCountsReader.bounding_pairs` -- every counted (user, key) pair, from ingest's bounding logs
  (their encoding is :mod:`stream_dp.store.bounding_log`'s), for the per-user weighted histogram.

**Sharded windows** (``windows.shards`` S > 1, :mod:`stream_dp.store.keys`): a key's count is the sum of its
counts in the S shards (each shard counts different users). The reader merges exactly, reading only what
the release type needs: the top n by the threshold algorithm over the shards' sorted sets
(:mod:`stream_dp.release.shard_merge`), the watched keys by ``ZMSCORE`` on every shard, and -- for the
sample, whose count classes are of the *summed* counts, and the whole-window mechanisms -- every key of
every shard once, merged in memory (a key's class is unknown until all its shards are read), then
served from that merge for the window's other release types.

**Key layout** (``windows.layout = "key"``, docs/design/key-sharded-counts.md): the counts are in disjoint key
shards, final once the release's drain ran (:meth:`~stream_dp.release.windows.WindowReader.make_final`).
Every read goes to :class:`~stream_dp.release.key_windows.KeyShardReads`, each key shard read for what the
type needs and merged exactly, all shards in one batch per step: the top n (merged), the watched keys (each
on its own shard), the sample's count classes (summed per count) and reported keys (each on its shard),
the whole window (concatenated; the histogram takes it one key shard at a time, :meth:`count_parts`). The bounding logs stay in the user shards and are read as in the user
layout.

Counts are raw, per-key, and private: they stay in this process and go only into mechanisms. A closed
window never changes (ingest's contract), so what one read brought may serve the window's other types.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import redis

from stream_dp.errors import StreamDPError
from stream_dp.mechanisms.count_parts import CountParts
from stream_dp.node_batches import ReadStep, Reads, evalsha_item
from stream_dp.release.key_windows import KeyShardReads
from stream_dp.release.shard_merge import merged_top
from stream_dp.store import scripts
from stream_dp.store.bounding_log import LOG_SEGMENT_BYTES, LogDecoder, log_pieces
from stream_dp.store.keys import Keys, key_shard_of

if TYPE_CHECKING:
    from stream_dp.release.windows import Window

READ_CHUNK = 50_000  # members per ZRANGE round trip when reading a whole window
HISTOGRAM_CHUNK = 20_000  # distinct counts per Lua call when walking a window's count histogram
RANKS_CHUNK = 20_000  # ranks per Lua call when reading the members at given ranks


@dataclass(frozen=True)
class WindowCounts:
    """A whole window: parallel arrays of keys (str) and counts (float64, distinct bounded users)."""

    keys: list[str]
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.keys, self.counts.tolist()))


@dataclass
class _TopOfWindow:
    """The top of one (unsharded) window as top-k read it: members and counts, best first (``ZREVRANGE``
    order, the exact reverse of ``ZRANGE`` order). ``complete``: it is the whole window. ``size``: the
    window's number of keys, known once its histogram is read.

    The sample of the same window reuses it: every key with a count above the top's lowest count is in it,
    so those count classes need no walk in Redis and their keys no read (a closed window never changes)."""

    start: int
    members: list[str]
    scores: np.ndarray
    complete: bool
    size: int | None = None

    def classes_above(self, lowest: float) -> list[tuple[float, int]]:
        """``(count, keys)`` for the counts above ``lowest`` in the top, ascending."""
        values, sizes = np.unique(self.scores[self.scores > lowest], return_counts=True)
        return [(float(v), int(n)) for v, n in zip(values.tolist(), sizes.tolist())]


#: Most bounding-log bytes one read of the release worker brings (:meth:`WindowReader.bounding_pairs`).
LOG_READ_BYTES = 4 << 20


class WindowLogShort(RuntimeError, StreamDPError):
    """A window shard's bounding log is shorter than its metadata records."""



class WindowCountsReader:
    """Read-only access to the counts of ingest's closed windows (see the module's docstring), with the
    window's merge (sharded) or top (unsharded) kept for its other release types."""

    def __init__(self, client: redis.Redis, *, keys: Keys, read_chunk: int = READ_CHUNK) -> None:
        self.read_chunk = read_chunk
        self.r = client
        self.keys = keys
        self._merged: tuple[int, WindowCounts, np.ndarray] | None = None  # (start, by count, distinct counts)
        # the top of one unsharded window as read for top-k, reused by the sample (_TopOfWindow)
        self._top: _TopOfWindow | None = None
        self._chunk = scripts.register(client, "window_read_chunk")
        self._histogram = scripts.register(client, "window_count_histogram")
        self._scores = scripts.register(client, "window_scores")
        self._top_script = scripts.register(client, "window_top")
        self._members_at = scripts.register(client, "window_members_at")
        self._by_key = KeyShardReads(client, keys=keys) if keys.layout == "key" else None

    @property
    def scripts(self) -> tuple:
        """The reads' Lua scripts (loaded when the worker starts, :func:`~stream_dp.node_batches.load_scripts`)."""
        return (self._chunk, self._histogram, self._scores, self._top_script, self._members_at)

    def forget(self, window: Window) -> None:
        """Drop what is kept of ``window`` (its merge, its top): it is released, never read again."""
        if self._merged is not None and self._merged[0] == window.start:
            self._merged = None
        if self._top is not None and self._top.start == window.start:
            self._top = None
        if self._by_key is not None:
            self._by_key.forget(window)

    def top_counts(self, window: Window, n: int) -> ReadStep:
        """The ``n`` largest counts, key → count, best first (ties: Redis' reverse lexicographic order);
        ``.now()``, or queued as one command (``.later(ride)``) on an unsharded window (a sharded one: the
        threshold algorithm reads the shards in rounds, :mod:`stream_dp.release.shard_merge`).

        Read as one JSON reply (a read-only Lua ``ZREVRANGE``): redis-py's pure-Python parse of k̄+1 = 1001
        members with scores took ~5-10 ms, the JSON parse well under 1 ms.
        """
        if self._by_key is not None:
            return self._by_key.top_counts(window, n)
        batch = None
        if self.keys.shards == 1:
            name = self.keys.window_counts(window.start)
            batch = Reads([evalsha_item(self._top_script, [name], [n - 1, 0])],
                          lambda replies: self._top_reply(window, 0, 0, n - 1, replies[0]), scripts=[self._top_script])
        return ReadStep(lambda: self._top_counts_now(window, n), batch)

    def _top_counts_now(self, window: Window, n: int) -> dict[str, float]:
        if self.keys.shards == 1:
            return self._ranks_desc(window, 0, 0, n - 1)
        top, _ = merged_top(n, self.keys.shards,
                            lambda shard, first, last: list(self._ranks_desc(window, shard, first, last).items()),
                            lambda keys: list(self._counts_of_now(window, keys).values()))
        return top

    def _ranks_desc(self, window: Window, shard: int, first: int, last: int) -> dict[str, float]:
        raw = self._top_script(keys=[self.keys.window_counts(window.start, shard)], args=[last, first])
        return self._top_reply(window, shard, first, last, raw)

    def _top_reply(self, window: Window, shard: int, first: int, last: int, raw: bytes | str) -> dict[str, float]:
        flat = json.loads(raw)
        members, scores = flat[0::2], np.array(flat[1::2], dtype=np.float64)
        if self.keys.shards == 1 and first == 0:  # the window's top: kept for the sample of this window
            self._top = _TopOfWindow(window.start, members, scores, complete=len(members) < last + 1)
        return dict(zip(members, scores.tolist()))

    def counts_of(self, window: Window, watched: list[str]) -> ReadStep:
        """Counts of the given public keys (0 for a key with no events), summed over the shards; ``.now()``, or
        queued as one command (``ZMSCORE``, ``.later(ride)``) on an unsharded window."""
        if self._by_key is not None:
            return self._by_key.counts_of(window, watched)
        batch = None
        keys = list(watched)
        if self.keys.shards == 1:
            name = self.keys.window_counts(window.start)
            batch = (Reads([(name, lambda pipe: pipe.zmscore(name, keys))],
                           lambda replies: {k: (0.0 if s is None else float(s)) for k, s in zip(keys, replies[0])})
                     if keys else Reads([], lambda replies: {}))
        return ReadStep(lambda: self._counts_of_now(window, keys), batch)

    def _counts_of_now(self, window: Window, watched: list[str]) -> dict[str, float]:
        if not watched:
            return {}
        if self.keys.shards == 1:
            scores = self.r.zmscore(self.keys.window_counts(window.start), watched)
            return {k: (0.0 if s is None else float(s)) for k, s in zip(watched, scores)}
        total = np.zeros(len(watched))
        members = json.dumps(watched)
        for shard in range(self.keys.shards):
            total += np.array(json.loads(self._scores(keys=[self.keys.window_counts(window.start, shard)],
                                                      args=[members])), dtype=np.float64)
        return dict(zip(watched, total.tolist()))

    def all_counts(self, window: Window, *, chunk: int | None = None) -> WindowCounts:
        """Every key of the window, read in ``ZRANGE`` chunks (bounded replies, bounded server time).

        Each chunk comes back as one JSON string built by a read-only Lua script (``cjson``), which the
        client parses in C: a pure-Python RESP parse of 10⁶ members and scores takes seconds. Members are
        in ``ZRANGE`` order (score, then member bytes), which is deterministic.
        """
        if self._by_key is not None:
            return WindowCounts(*self._by_key.all_counts(window, chunk or self.read_chunk))
        if self.keys.shards > 1:
            return self._merge(window, chunk)[1]
        return self._read_shard(window, 0, chunk)

    def count_parts(self, window: Window, *, chunk: int | None = None) -> CountParts:
        """The window's counts as disjoint parts read one at a time, for the thresholded histograms
        (:mod:`stream_dp.mechanisms.count_parts`): its key shards in the key layout (memory: one key shard and
        the kept candidates), else the whole window as one part."""
        if self._by_key is None:
            return CountParts.whole(self.all_counts(window, chunk=chunk).as_dict())
        by_key, shards, size = self._by_key, self.keys.shards, chunk or self.read_chunk
        return CountParts(shards, lambda j: by_key.shard_counts(window, j, size),
                          lambda key: key_shard_of(str(key), shards))

    def _read_shard(self, window: Window, shard: int, chunk: int | None) -> WindowCounts:
        chunk = chunk or self.read_chunk
        name = self.keys.window_counts(window.start, shard)
        keys: list[str] = []
        parts: list[np.ndarray] = []
        offset = 0
        while True:
            flat = json.loads(self._chunk(keys=[name], args=[offset, offset + chunk - 1]))
            if not flat:
                break
            keys.extend(flat[0::2])
            parts.append(np.array(flat[1::2], dtype=np.float64))
            if len(flat) < 2 * chunk:
                break
            offset += chunk
        counts = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
        return WindowCounts(keys, counts)

    def bounding_pairs(self, window: Window, *, chunk_bytes: int = LOG_READ_BYTES) -> Iterator[tuple[str, str]]:
        """Every counted (user, key) pair of the window, shard by shard: ingest's bounding logs (docs/ingest.md;
        a user's pairs are all in her shard), read with ``GETRANGE`` in pieces of ``chunk_bytes`` up to each
        shard's recorded length, so no reply and no buffer holds a whole log. For the per-user weights of the
        histogram (docs/privacy.md §8d). Raises :class:`WindowLogShort` if a log is shorter than its shard's
        metadata says (deleted under the reader: the window is not readable)."""
        for shard in range(self.keys.shards):
            raw_length, raw_segment = self.r.hmget(self.keys.window_meta(window.start, shard), "log_bytes",
                                                   "log_segment_bytes")
            length, segment = int(raw_length or 0), int(raw_segment or LOG_SEGMENT_BYTES)
            name = self.keys.window_users(window.start, shard)
            decoder = LogDecoder()
            at = 0
            while at < length:
                upto = min(length, at + chunk_bytes)
                pipe = self.r.pipeline(transaction=False)
                for key, first, last in log_pieces(name, segment, at, upto):
                    pipe.getrange(key, first, last)
                piece = b"".join(pipe.execute())
                if len(piece) != upto - at:
                    raise WindowLogShort(f"window {window.label}, shard {shard}: the bounding log ends before "
                                         f"byte {upto} of the {length} its metadata records")
                yield from decoder.feed(piece)
                at = upto
            decoder.finish()

    def drop_merge(self) -> None:
        """Forget the cached merge of a sharded window (the next read of it merges the shards again)."""
        self._merged = None

    def _merge(self, window: Window, chunk: int | None = None) -> tuple[int, WindowCounts, np.ndarray]:
        """Every shard read once and summed per key, in ascending count order (kept for the window's other
        release types; the reader holds one window's merge at a time)."""
        if self._merged is not None and self._merged[0] == window.start:
            return self._merged
        total: dict[str, float] = {}
        get = total.get
        for shard in range(self.keys.shards):
            part = self._read_shard(window, shard, chunk)
            for key, c in zip(part.keys, part.counts.tolist()):
                total[key] = get(key, 0.0) + c
        keys = list(total)
        counts = np.fromiter(total.values(), dtype=np.float64, count=len(keys))
        order = np.argsort(counts, kind="stable")
        merged = WindowCounts([keys[i] for i in order.tolist()], counts[order])
        self._merged = (window.start, merged, np.unique(merged.counts))
        return self._merged

    def count_histogram(self, window: Window, *, chunk: int = HISTOGRAM_CHUNK) -> list[tuple[float, int]]:
        """``(count, number of keys with that count)`` for every distinct count of the window, ascending.

        Cost: O(#distinct counts · log n) in Redis, never proportional to the number of keys (a window of
        users' distinct counts has at most ~√(2·total) distinct counts). Walked in chunks of ``chunk``
        distinct counts per Lua call. An empty (or absent) window gives ``[]``.
        """
        if self._by_key is not None:
            return self._by_key.count_histogram(window, chunk)
        if self.keys.shards > 1:
            merged = self._merge(window)[1]
            values, sizes = np.unique(merged.counts, return_counts=True)
            return [(float(v), int(n)) for v, n in zip(values.tolist(), sizes.tolist())]
        name = self.keys.window_counts(window.start)
        top = self._top if self._top is not None and self._top.start == window.start else None
        out: list[tuple[float, int]] = []
        if top is not None and top.complete:  # the top read was the whole window
            out = top.classes_above(-np.inf)
            top.size = sum(n for _, n in out)
            return out
        lower, upper = "-inf", ("+inf" if top is None else repr(float(top.scores[-1])))
        while True:  # the distinct counts up to the top's lowest one, walked in Redis
            flat = json.loads(self._histogram(keys=[name], args=[lower, chunk, upper]))
            out.extend((float(s), int(n)) for s, n in zip(flat[0::2], flat[1::2]))
            if len(flat) < 2 * chunk:
                break
            lower = "(" + flat[-2]
        if top is not None:  # above it, every key of every count is in the top: classes counted from it
            out.extend(top.classes_above(float(top.scores[-1])))
            top.size = sum(n for _, n in out)
        return out

    def members_at(self, window: Window, ranks: np.ndarray, counts: np.ndarray, *,
                   chunk: int = RANKS_CHUNK) -> list[str]:
        """The keys at ``ranks`` (``ZRANGE`` order), checked to have ``counts``; O(log n) per rank.

        Raises ``RuntimeError`` when a rank is past the end or holds another count: the window changed
        after its histogram was read (a closed window never does -- ingest's contract).
        """
        if self._by_key is not None:
            return self._by_key.members_at(window, ranks, counts, chunk)
        want = np.asarray(counts, dtype=np.float64)
        if self.keys.shards > 1:  # ranks in the merge's ascending count order (count_histogram's classes)
            merged = self._merge(window)[1]
            at = np.asarray(ranks, dtype=np.int64)
            if len(at) and (at.max() >= len(merged) or np.any(merged.counts[at] != want)):
                raise RuntimeError(f"window {window.label} changed while it was being sampled "
                                   "(a closed window must not change)")
            return [merged.keys[i] for i in at.tolist()]
        name = self.keys.window_counts(window.start)
        at = np.asarray(ranks, dtype=np.int64)
        top = self._top if self._top is not None and self._top.start == window.start else None
        if top is not None and top.size is not None and len(at):
            # ranks within the top read (ascending rank r is top position size - 1 - r) need no round trip
            pos = top.size - 1 - at
            known = (pos >= 0) & (pos < len(top.members))
            if known.any():
                if np.any(top.scores[pos[known]] != want[known]):
                    raise RuntimeError(f"window {window.label} changed while it was being sampled "
                                       "(a closed window must not change)")
                out = np.empty(len(at), dtype=object)
                out[known] = [top.members[i] for i in pos[known].tolist()]
                rest = np.flatnonzero(~known)
                if len(rest):
                    out[rest] = self._members_at_ranks(window, name, at[rest], want[rest], chunk)
                return out.tolist()
        return self._members_at_ranks(window, name, at, want, chunk)

    def _members_at_ranks(self, window: Window, name: str, at: np.ndarray, want: np.ndarray,
                          chunk: int) -> list[str]:
        keys: list[str] = []
        for s in range(0, len(at), chunk):
            part = at[s:s + chunk]
            # runs of consecutive ranks, in the order asked: one (first, last) pair each
            starts = np.flatnonzero(np.concatenate(([True], np.diff(part) != 1)))
            ends = np.concatenate((starts[1:], [len(part)])) - 1
            runs = np.column_stack((part[starts], part[ends])).ravel().tolist()
            flat = json.loads(self._members_at(keys=[name], args=runs))
            got = np.array(flat[1::2], dtype=np.float64)
            if len(got) != len(part) or np.any(got != want[s:s + chunk]):
                raise RuntimeError(f"window {window.label} changed while it was being sampled "
                                   "(a closed window must not change)")
            keys.extend(flat[0::2])
        return keys
