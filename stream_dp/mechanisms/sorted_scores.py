"""Scores best first, read only as far as a mechanism needs: the input of the large margin mechanism
(Chaudhuri, Hsu & Song, NIPS 2014, Algorithm 1; :mod:`stream_dp.mechanisms.large_margin`).

Algorithm 1's search compares the noisy top score with the (l+1)-th largest score for l = 1, 2, … and stops
at the first clear margin; its exponential mechanism then runs over the top l items only. So it reads the
scores as a *sorted prefix*: on a window whose winner is clear it needs a few hundred of them, not the
window. A :class:`SortedScores` gives that prefix; :class:`SortedPrefix` asks for it in doubling sizes.

Order: score descending, equal scores in the fixed tie order (descending
:func:`~stream_dp.mechanisms._validation.tie_key`: for ``str`` keys their UTF-8 bytes, which is the order of a
Redis sorted set read by ``ZREVRANGE``). A mechanism that depends on the scores only through this order
gives the same output for the same seed whoever computes the prefix -- one sort in memory
(:class:`ScoresInMemory`) or a store's merged top of its shards.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import numpy as np

from stream_dp.mechanisms._validation import tie_key


class SortedScores(Protocol):
    """The m best scores of a fixed set of items, best first, and the item at a rank (module docstring)."""

    def top(self, m: int) -> np.ndarray:
        """The ``m`` largest scores, descending, as float64; fewer than ``m`` only when that is every item."""
        ...

    def key_at(self, rank: int) -> Hashable:
        """The item at 0-based ``rank`` of the order; ``rank`` is below the length of a :meth:`top` returned."""
        ...


class ScoresInMemory:
    """A whole mapping's scores as :class:`SortedScores`: one numpy sort of the values; an item is resolved
    only when asked for (:meth:`key_at` sorts the items of one score by the tie order), so a window of 10⁶
    keys costs a sort of floats, never of keys."""

    def __init__(self, keys: list[Hashable], values: np.ndarray) -> None:
        self.keys = keys
        self.values = values
        self.sorted = np.sort(values)[::-1]

    def __len__(self) -> int:
        return len(self.keys)

    def top(self, m: int) -> np.ndarray:
        return self.sorted[:m]

    def key_at(self, rank: int) -> Hashable:
        score = self.sorted[rank]
        first = int(np.searchsorted(-self.sorted, -score, side="left"))  # ranks of higher scores come first
        tied = sorted(np.flatnonzero(self.values == score).tolist(), key=lambda i: tie_key(self.keys[i]), reverse=True)
        return self.keys[tied[rank - first]]


class SortedPrefix:
    """The prefix of a :class:`SortedScores` a search has asked for so far, extended by doubling: a request
    beyond it asks the source for ``max(needed, 2 × last asked)`` scores, so reaching level l costs O(l)
    scores read in O(log l) requests. ``complete``: the prefix is every item (the source returned fewer than
    asked), so its length is the number of items. ``asked`` lists every request's size, in order."""

    def __init__(self, source: SortedScores, *, first: int = 1) -> None:
        self.source = source
        self.first = first
        self.values = np.zeros(0, dtype=np.float64)
        self.complete = False
        self.asked: list[int] = []

    def upto(self, count: int) -> np.ndarray:
        """At least the ``count`` best scores, or every one (then :attr:`complete`)."""
        if len(self.values) < count and not self.complete:
            m = max(count, self.first, 2 * (self.asked[-1] if self.asked else 0))
            got = np.asarray(self.source.top(m), dtype=np.float64)
            if len(got) < len(self.values) or np.any(got[:len(self.values)] != self.values):
                raise RuntimeError("the scores changed between two reads of their sorted prefix "
                                   "(a closed window must not change)")
            self.values, self.complete = got, len(got) < m
            self.asked.append(m)
        return self.values
