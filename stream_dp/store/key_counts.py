"""Step 2 of the key layout's apply: a chunk's accepted increments, split by key shard, as the arguments of
``store/lua/count_keys.lua`` (docs/design/key-sharded-counts.md): sent by ingest's step 2
(:mod:`stream_dp.ingest.key_counter`) and by the release worker's drain (:mod:`stream_dp.release.key_drain`).

Step 1 bounds a chunk in its user shard and records the increments it accepted as pending; step 2 counts
them into each key shard ``key_shard_of(key, S)``, once per chunk: a key shard keeps, per source (user shard,
partition), the highest chunk offset it counted, and skips an entry at or below it. That high-water mark is
sound only under the **ordering rule**: the entries of one source reach a key shard in offset order, and an
entry is sent together with (after) every still-pending entry of its source -- :func:`count_args` checks the
order it is given; which entries are pending is step 1's reply.

The pending hash (``Keys.window_pending``) is encoded and decoded here only: field
``<partition>:<last offset>:<key shard>`` (:func:`pending_field`), value the increments in the very form
``count_keys.lua`` takes them, ``<counts, comma-separated>\0<keys, NUL-separated>`` (:func:`encode_increments`,
checked when encoded), so that step 2 -- ingest's, its replay's, the release's drain -- forwards a value as
read, never decoding it (:func:`pending_entries`, :func:`pending_args`, :func:`parse_pending`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from dataclasses import dataclass

from stream_dp.store.keys import key_shard_of


#: A chunk's increments for one key shard as ``count_keys.lua`` takes them (:func:`encode_increments`).
Encoded = str


@dataclass(frozen=True)
class CountEntry:
    """The increments one chunk (user shard, partition, up to ``last_offset``) accepted for one key shard:
    key → number of distinct users of the chunk newly counted for it, or the same already
    :func:`encode_increments`-ed (as a pending value is)."""

    user_shard: int
    partition: int
    last_offset: int
    increments: Mapping[str, int] | Encoded

    @property
    def source(self) -> str:
        """The key shard's name for where the entry comes from: ``<user shard>:<partition>``."""
        return f"{self.user_shard}:{self.partition}"


def split_by_key_shard(increments: Mapping[str, int], shards: int) -> dict[int, dict[str, int]]:
    """A chunk's increments grouped by the key shard that counts each key (only shards with a key appear).

    >>> split_by_key_shard({"a": 1, "b": 2}, 1)
    {0: {'a': 1, 'b': 2}}
    """
    out: dict[int, dict[str, int]] = {}
    for key, n in increments.items():
        out.setdefault(key_shard_of(key, shards), {})[key] = n
    return out


def encode_increments(increments: Mapping[str, int], *, where: str = "count entry") -> Encoded:
    """``increments`` as ``count_keys.lua`` takes an entry's: the counts comma-separated, NUL, the keys
    NUL-separated. Raises ``ValueError`` (naming ``where``) for no key, an empty key or one holding NUL (the
    separator), or a count that is not a positive integer.

    >>> encode_increments({"a": 1, "b": 2})
    '1,2\\x00a\\x00b'
    """
    keys = "\0".join(increments)
    counts = list(increments.values())
    # checked on the joined text and the values' types at C speed (step 1 encodes every chunk's increments);
    # the loop below only runs to name what is at fault
    if (not counts or "" in increments or keys.count("\0") != len(counts) - 1
            or not set(map(type, counts)) <= {int} or min(counts) < 1):
        if not counts:
            raise ValueError(f"{where}: no increments")
        for key, n in increments.items():
            if not key or "\0" in key:
                raise ValueError(f"{where}: key {key!r} is empty or holds NUL")
            if type(n) is not int or n < 1:
                raise ValueError(f"{where}: count {n!r} of a key is not a positive integer")
    return ",".join(map(str, counts)) + "\0" + keys


def count_args(entries: Sequence[CountEntry]) -> list[str]:
    """The ARGV of ``count_keys.lua`` for ``entries`` (all for one key shard): source, last offset, encoded
    increments per entry. Raises ``ValueError`` for an entry whose offset does not increase within its source
    (the ordering rule), or increments :func:`encode_increments` refuses -- before anything is sent. Encoded
    increments (pending values, checked when step 1 encoded them) are sent as they are.

    >>> count_args([CountEntry(0, 3, 41, {"a": 1, "b": 2})])
    ['0:3', '41', '1,2\\x00a\\x00b']
    """
    last: dict[str, int] = {}
    out: list[str] = []
    for e in entries:
        source = e.source
        if source in last and e.last_offset <= last[source]:
            raise ValueError(f"count entries of source {source} out of offset order: {e.last_offset} after "
                             f"{last[source]} (the key shard would skip it)")
        last[source] = e.last_offset
        value = e.increments if isinstance(e.increments, str) else encode_increments(
            e.increments, where=f"count entry of source {source} at offset {e.last_offset}")
        out += [source, str(int(e.last_offset)), value]
    return out


#: pending field → its increments for that key shard, encoded (:func:`encode_increments`), as step 1 wrote them.
Pending = dict[str, Encoded]


def pending_entries(partition: int, last_offset: int, increments: Mapping[str, int], shards: int) -> Pending:
    """A chunk's accepted ``increments`` as its pending entries: one per key shard that counts one of its
    keys, field ``<partition>:<last_offset>:<key shard>``, value encoded (:func:`encode_increments`, which
    checks them).

    >>> pending_entries(3, 41, {"a": 1}, 1)
    {'3:41:0': '1\\x00a'}
    """
    where = f"the increments of partition {partition} up to offset {last_offset}"
    return {f"{partition}:{last_offset}:{shard}": encode_increments(incs, where=where)
            for shard, incs in sorted(split_by_key_shard(increments, shards).items())}


def pending_args(entries: Pending) -> list[str]:
    """Step 1's ARGV[5..]: (field, encoded increments) pairs.

    >>> pending_args({'3:41:0': '1\\x00a'})
    ['3:41:0', '1\\x00a']
    """
    out: list[str] = []
    for field, value in entries.items():
        out += [field, value]
    return out


def parse_pending(flat: Iterable[Any]) -> Pending:
    """A flat (field, value, …) reply of step 1 or of ``HGETALL`` as field → encoded increments."""
    items = [x.decode() if isinstance(x, bytes) else str(x) for x in flat]
    return dict(zip(items[0::2], items[1::2]))


def pending_field(field: str) -> tuple[int, int, int]:
    """A pending hash field ``<partition>:<last offset>:<key shard>`` as integers.

    >>> pending_field("3:41:0")
    (3, 41, 0)
    """
    partition, offset, key_shard = (int(x) for x in field.split(":"))
    return partition, offset, key_shard


def entries_by_key_shard(found: Iterable[tuple[int, int, str, Mapping[str, int] | Encoded]]
                         ) -> dict[tuple[int, int], list[CountEntry]]:
    """Pending entries ``(window start, user shard, field, increments)`` grouped by (window start, key shard),
    each group in the ordering rule's order (source, then offset): what one ``count_keys.lua`` call per key
    shard takes (:func:`count_args`).

    >>> entries_by_key_shard([(0, 1, "2:9:0", "1\\x00a"), (0, 1, "2:5:0", "1\\x00b")])[(0, 0)][0].last_offset
    5
    """
    out: dict[tuple[int, int], list[CountEntry]] = {}
    for start, user_shard, field, increments in found:
        partition, offset, key_shard = pending_field(field)
        out.setdefault((start, key_shard), []).append(CountEntry(user_shard, partition, offset, increments))
    for group in out.values():
        group.sort(key=lambda e: (e.user_shard, e.partition, e.last_offset))
    return out
