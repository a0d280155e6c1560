"""Exact top-n of counts summed over window shards: the threshold algorithm (Fagin, Lotem & Naor 2003, "TA").

A window split into S shards (``windows.shards``; :mod:`stream_dp.store.keys`) holds, per shard, the number of
that shard's distinct users per key; a key's window count is the SUM over the shards (different users, so
the shards' counts add up exactly). The top ``n`` of the sums is not the union of the shards' tops (a key
second everywhere can beat one that is first in one shard only), and reading every key of every shard would
make limited-domain top-k read the whole window. TA reads each shard's keys in descending order, in chunks:

- every key seen for the first time gets its exact sum by random access (its score in every shard);
- after each round, an unseen key scores at most the shard's *frontier* (the last score read there; 0 once
  the shard is exhausted) in every shard, so its sum is at most ``threshold = Σ frontiers``;
- stop as soon as the ``n``-th best exact sum is strictly above the threshold (or every shard is exhausted):
  no unseen key can then reach, or tie with, any of the top ``n``.

Ties are broken as one Redis sorted set breaks them in ``ZREVRANGE`` (higher count first, then the key's
bytes in reverse lexicographic order), so S shards give exactly the keys one unsharded window would.
The stop is strict so that a tie at the boundary is never decided by which keys happened to be read; the
price is that a boundary tie among many keys reads further (chunks double every round).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: ``read_desc(shard, first, last)``: the members at ranks first..last (inclusive) of one shard in
#: descending order, as ``(key, count)``.
ReadDesc = Callable[[int, int, int], Sequence[tuple[str, float]]]
#: ``scores_of(keys)``: for each key, its count summed over every shard (missing = 0).
SumsOf = Callable[[list[str]], list[float]]


def rank_key(item: tuple[str, float]) -> tuple[float, bytes]:
    """Sort key of ``(key, count)``, best last: Redis's ``ZREVRANGE`` order reversed."""
    return item[1], item[0].encode()


def merged_top(n: int, shards: int, read_desc: ReadDesc, sums_of: SumsOf, *, first_chunk: int | None = None,
               ) -> tuple[dict[str, float], int]:
    """The ``n`` largest summed counts over ``shards`` shards, best first, and how many members were read by
    sorted access. Exact (module docstring); ``first_chunk`` members per shard in the first round (default
    ``n``), doubling every round."""
    if n < 1:
        return {}, 0
    chunk = max(1, first_chunk or n)
    sums: dict[str, float] = {}
    position = [0] * shards
    frontier = [float("inf")] * shards
    exhausted = [False] * shards
    read = 0
    while True:
        new: list[str] = []
        for j in range(shards):
            if exhausted[j]:
                continue
            got = read_desc(j, position[j], position[j] + chunk - 1)
            read += len(got)
            position[j] += len(got)
            if len(got) < chunk:
                exhausted[j], frontier[j] = True, 0.0
            else:
                frontier[j] = float(got[-1][1])
            for key, _ in got:
                if key not in sums:
                    sums[key] = 0.0
                    new.append(key)
        if new:
            for key, total in zip(new, sums_of(new)):
                sums[key] = float(total)
        best = sorted(sums.items(), key=rank_key, reverse=True)[:n]
        if all(exhausted) or (len(best) == n and best[-1][1] > sum(frontier)):
            return dict(best), read
        chunk *= 2
