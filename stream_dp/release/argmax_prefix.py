"""What the ``argmax`` release reads of a closed window: its counts best first, only as far as the large margin
mechanism's search goes (CHS14 Algorithm 1; :func:`~stream_dp.mechanisms.large_margin.large_margin_argmax_sorted`).

The search compares the noisy top count with the (l+1)-th count for l = 1, 2, … and stops at the first clear
margin; the exponential mechanism then draws among the top l keys. So the release reads the window's *sorted
prefix*, in doubling sizes (:class:`~stream_dp.mechanisms.sorted_scores.SortedPrefix`), through the read
top-k already uses (:meth:`~stream_dp.release.window_counts.WindowCountsReader.top_counts`): one ``ZREVRANGE``
on an unsharded window, each key shard's top m merged exactly in the key layout (key shards are disjoint),
the threshold algorithm over user shards (whose counts are summed). Every one returns the top m in
``ZREVRANGE`` order -- count descending, then the key's bytes descending, the mechanism's tie order -- so the
release is the whole-window release, draw for draw, whatever the layout. The first prefix (257 counts) is
read in the reservation's round trip, like top-k's; a window with a clear winner reads nothing more.

A search with no clear winner goes through every listed count (and step 4 then draws among all of them). Once
a prefix read would bring more than ``limit`` members (``m`` times the shards read; default a quarter of the
reader's ``read_chunk``), the window is read whole instead, in chunks
(:meth:`~stream_dp.release.window_counts.WindowCountsReader.all_counts`), as the release read it before:
bounded replies, and the prefix reads before it cost at most about twice ``limit`` members (measured:
``bench/bench_argmax.py``).

Counts are raw, per key, and private: they stay in this process and go only into the mechanism. How far the
read goes depends on the level the search finds, which the record does not publish; it shows only in the
release's timing (docs/privacy.md §1b), as the search's own computing time did before.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from stream_dp.mechanisms.large_margin import FIRST_PREFIX
from stream_dp.mechanisms.sorted_scores import ScoresInMemory
from stream_dp.node_batches import ReadStep, Reads

if TYPE_CHECKING:
    from stream_dp.release.windows import Window, WindowReader


class WindowPrefix:
    """A closed window's counts as :class:`~stream_dp.mechanisms.sorted_scores.SortedScores`: ``top(m)`` reads
    the top m (module docstring); ``key_at(rank)`` answers from the last read. ``reads`` lists each read's
    size (``("top", m)`` or ``("whole", keys)``), for tests and traces."""

    def __init__(self, reader: WindowReader, window: Window, *, first: dict[str, float] | None = None,
                 limit: int | None = None) -> None:
        self.reader = reader
        self.window = window
        self.limit = limit if limit is not None else reader.read_chunk // 4
        self.reads: list[tuple[str, int]] = []
        self._first = first
        self._keys: list[str] = []
        self._whole: ScoresInMemory | None = None

    @classmethod
    def read(cls, reader: WindowReader, window: Window, *, limit: int | None = None) -> ReadStep:
        """The step that reads the first prefix (one batch where top-k's read is one: ``.later(ride)``)."""
        step = reader.top_counts(window, FIRST_PREFIX)

        def made(first: dict[str, float]) -> WindowPrefix:
            return cls(reader, window, first=first, limit=limit)

        batch = step.batch
        mapped = (None if batch is None else
                  Reads(batch.items, lambda replies: made(batch.parse(replies)), batch.scripts, client=batch.client))
        return ReadStep(lambda: made(step.now()), mapped)

    def top(self, m: int) -> np.ndarray:
        if self._whole is None and m * self.reader.keys.shards > self.limit:
            counts = self.reader.all_counts(self.window)
            self.reads.append(("whole", len(counts)))
            self._whole = ScoresInMemory(list(counts.keys), counts.counts)
        if self._whole is not None:
            return self._whole.top(m)
        if self._first is not None and m == FIRST_PREFIX:
            got, self._first = self._first, None
        else:
            got = self.reader.top_counts(self.window, m).now()
        self.reads.append(("top", m))
        self._keys = list(got)
        return np.fromiter(got.values(), dtype=np.float64, count=len(got))

    def key_at(self, rank: int) -> Hashable:
        return self._whole.key_at(rank) if self._whole is not None else self._keys[rank]
