"""A window's counts given as disjoint parts, read one at a time: the key layout's key shards
(docs/design/key-sharded-counts.md) as the histogram mechanisms take them.

The thresholded histograms (:func:`~stream_dp.mechanisms.gaussian_histogram.noisy_threshold_release`) noise
every key independently, select it by its own noisy count, and keep the ``max_keys`` largest of the selected
in a fixed total order (noisy count, then :func:`~stream_dp.mechanisms._validation.tie_key`). So they can run
part by part: each part's keys noised and selected, each part's ``max_keys`` best kept (the global best
``max_keys`` are among them: a key among the global best has fewer than ``max_keys`` selected keys above it
in the order, so fewer in its own part), and the union capped once more. The output has exactly the law of
one release over all the keys -- only which draw goes to which key differs -- and the process holds one
part and the kept candidates, not the whole window. One generator serves every part, never re-seeded.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CountParts:
    """``size`` disjoint parts of a window's counts: ``read(i)`` is part i's key → count (called once per
    release, in order 0 .. size-1), ``part_of(key)`` the part a (public domain) key belongs in -- the part that
    would hold its count."""

    size: int
    read: Callable[[int], Mapping[Any, object]]
    part_of: Callable[[Hashable], int]

    @classmethod
    def whole(cls, counts: Mapping[Any, object]) -> CountParts:
        """One mapping as a single part."""
        return cls(1, lambda i: counts, lambda key: 0)
