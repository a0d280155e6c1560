"""A window's count classes over its disjoint key shards, and where each of the window's ranks lives (layout
``"key"``, docs/design/key-sharded-counts.md) -- pure, no I/O.

The sample (:func:`stream_dp.release.sampling.sample_count_classes`) needs the window's count histogram and
then the keys at the ranks it reports, ranks in the order of one sorted set (ascending count). In the key
layout each key's whole count is in one key shard, so the window's histogram is the sum of the shards'
histograms, count by count, and a *window rank* can be laid out over the shards: the keys of count ``w``
take the window ranks ``first_w .. first_w + n_w - 1`` (``first_w`` = the number of keys of smaller counts,
as in one sorted set), shard 0's keys of that count first, then shard 1's, … -- each shard's in its own
``ZRANGE`` order. :meth:`ShardedClasses.locate` turns window ranks into (key shard, rank in that shard).

Only the order of keys *within* a count class differs from one sorted set's (member bytes across shards);
the sample draws a uniformly random subset of each class and independent tokens from the row of the class's
count (:func:`~stream_dp.release.sampling.draw_by_count_class`: the keys of a class are exchangeable), so
the release has exactly the single-shard release's distribution -- with the same seed the same classes,
ranks and tokens are drawn, only which key of a class sits at a drawn rank differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShardedClasses:
    """The distinct counts of a window (ascending) and, per count, how many keys of each key shard have it."""

    values: np.ndarray  # float64, strictly ascending
    sizes: np.ndarray  # int64, shape (len(values), shards): keys of count values[c] in key shard j

    @classmethod
    def of(cls, histograms: Sequence[Sequence[tuple[float, int]]]) -> ShardedClasses:
        """From each key shard's ``(count, keys)`` histogram (ascending, as ``window_count_histogram`` walks it).

        >>> ShardedClasses.of([[(1.0, 2), (3.0, 1)], [(1.0, 1), (2.0, 4)]]).histogram()
        [(1.0, 3), (2.0, 4), (3.0, 1)]
        """
        values = np.unique(np.array([c for h in histograms for c, _ in h], dtype=np.float64))
        sizes = np.zeros((len(values), len(histograms)), dtype=np.int64)
        for j, h in enumerate(histograms):
            if h:
                counts = np.array([c for c, _ in h], dtype=np.float64)
                if np.any(np.diff(counts) <= 0):
                    raise ValueError(f"key shard {j}'s count histogram is not strictly ascending")
                sizes[np.searchsorted(values, counts), j] = [n for _, n in h]
        return cls(values, sizes)

    def histogram(self) -> list[tuple[float, int]]:
        """The window's ``(count, keys)`` pairs, ascending: what one sorted set of every key would give."""
        return list(zip(self.values.tolist(), self.sizes.sum(axis=1).tolist()))

    def locate(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(key shard, rank in that shard's ``ZRANGE`` order) of each window rank (module docstring). Raises
        ``ValueError`` for a rank outside the window.

        >>> c = ShardedClasses.of([[(1.0, 2), (3.0, 1)], [(1.0, 1), (2.0, 4)]])
        >>> [tuple(a.tolist()) for a in c.locate(np.array([0, 1, 2, 3, 7]))]
        [(0, 0, 1, 1, 0), (0, 1, 0, 1, 2)]
        """
        at = np.asarray(ranks, dtype=np.int64)
        totals = self.sizes.sum(axis=1)
        window_first = np.concatenate(([0], np.cumsum(totals)[:-1]))
        if len(at) and (at.min() < 0 or at.max() >= int(totals.sum())):
            raise ValueError("a rank outside the window's count classes")
        if not len(at):
            return at.copy(), at.copy()
        c = np.searchsorted(window_first, at, side="right") - 1  # the class of each rank
        offset = at - window_first[c]  # its place within the class
        ends = np.cumsum(self.sizes, axis=1)  # within a class: shard 0's keys, then shard 1's, ...
        shard = (ends[c] <= offset[:, None]).sum(axis=1)
        shard_first = np.cumsum(self.sizes, axis=0) - self.sizes  # each class's first rank within each shard
        within = offset - (ends[c, shard] - self.sizes[c, shard])
        return shard, shard_first[c, shard] + within
