"""Step 2 of ingest's apply in the key layout (``windows.layout = "key"``; docs/design/key-sharded-counts.md):
count the chunks' accepted increments, recorded as pending in their user shards by step 1, into the window's
key shards -- each chunk at most once per key shard (``store/lua/count_keys.lua``), none lost.

The guarantee, and what gives it:

- **At most once.** A key shard keeps, per source (user shard, partition), the highest chunk offset it
  counted, and skips an entry at or below it; so any entry may be sent again (a replay, a zombie worker).
- **Never lost.** An entry stays pending in its user shard until a step 2 that carried it returned from
  every key shard it names; only then is it deleted (riding the next step-1 pipeline: no round trip of its
  own). The Kafka offsets are committed only after :meth:`KeyCounter.count` returned, so a crash anywhere
  in between replays the batch; a replayed chunk (one with duplicate or late events) reads its source's
  pending entries (one batched ``HGETALL`` per user shard, only on replays) and sends them again.
- **Ordering rule** (the high-water mark is sound): the entries of one source reach a key shard in offset
  order, each together with every still-pending older entry of the source -- step 1's reply names them all,
  and :func:`~stream_dp.store.key_counts.count_args` refuses any other order.

One pipeline per master for the whole step (:func:`~stream_dp.node_batches.run_batched`), sent through the
store's sender, which ``WAIT``s for ``redis.min_replicas_acked`` replicas like step 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import redis
from redis.client import Pipeline

from stream_dp.ingest.crashpoints import NO_CRASHES, CrashPoints
from stream_dp.node_batches import run_batched
from stream_dp.store import scripts
from stream_dp.store.key_counts import (Encoded, Pending, count_args, entries_by_key_shard, parse_pending,
                                        pending_field)
from stream_dp.store.keys import Keys

class Counted(NamedTuple):
    """What one step 2 came to: entries the key shards counted, and entries they skipped as counted before
    (a replay's, or a zombie's; in a steady stream none: each entry is sent once)."""

    counted: int
    skipped: int


#: (window start, user shard, partition): where a chunk's entries come from.
Source = tuple[int, int, int]
Items = list[tuple[str, Callable[[Pipeline], object]]]


class KeyCounter:
    """Sends step 2 for one :class:`~stream_dp.ingest.store.WindowStore` (call from its thread only)."""

    def __init__(self, client: redis.Redis, keys: Keys, *, send: Callable[[Items], list],
                 crashpoints: CrashPoints = NO_CRASHES) -> None:
        self.client = client
        self.keys = keys
        self._send = send  # the store's sender: one pipeline per master, WAIT for replicas when configured
        self.crashpoints = crashpoints
        self._count = scripts.register(client, "count_keys")
        self._trim: dict[str, set[str]] = {}  # pending hash → fields counted everywhere, to delete
        self.total = Counted(0, 0)  # every step 2 of this counter, summed

    # --- the deletion of counted entries, riding step 1 ------------------------------------------------
    def trim_items(self) -> Items:
        """``HDEL`` of the entries known counted, to ride the next step-1 pipeline (one reply each)."""
        return [(name, _hdel(name, sorted(fields))) for name, fields in self._trim.items()]

    def trimmed(self, items: Items) -> None:
        """The pipeline that carried ``items`` (from :meth:`trim_items`) returned: forget them."""
        if not items:
            return
        for name, _ in items:
            self._trim.pop(name, None)
        self.crashpoints.reached("after_trim")

    # --- step 2 -------------------------------------------------------------------------------------
    def count(self, recorded: Mapping[Source, Pending], replays: Iterable[Source]) -> Counted:
        """Count into the key shards every entry step 1 ``recorded`` (per source: the chunk's own entries and
        the older ones its reply named) and every pending entry of the ``replays`` sources (read here); returns
        how many entries the key shards counted and skipped as counted before. Raises redis errors unchanged
        (the batch is then replayed; nothing is deleted from pending)."""
        pending: dict[Source, Pending] = {s: dict(p) for s, p in recorded.items()}
        wanted = sorted(set(replays) - set(recorded))
        if wanted:
            for source, found in zip(wanted, self._read_pending(wanted)):
                pending[source] = found
        listed: list[tuple[int, int, str, Encoded]] = []
        fields: dict[tuple[int, int], list[str]] = {}  # (window, user shard) → the fields sent
        for (start, user_shard, partition), entries_of in pending.items():
            for field, increments in entries_of.items():
                if pending_field(field)[0] != partition:
                    continue
                listed.append((start, user_shard, field, increments))
                fields.setdefault((start, user_shard), []).append(field)
        entries = entries_by_key_shard(listed)
        if not entries:
            return Counted(0, 0)
        self.crashpoints.reached("after_record")
        items: Items = []
        for (start, key_shard), group in sorted(entries.items()):
            names = self.keys.key_shard(start, key_shard)
            items.append((names[0], _evalsha(self._count.sha, names, count_args(group))))
        try:
            replies = self._send(items)
        except redis.exceptions.NoScriptError:
            self.client.script_load(self._count.script)  # Redis restarted or flushed its scripts
            replies = self._send(items)
        self.crashpoints.reached("after_count")
        for (start, user_shard), sent in fields.items():
            self._trim.setdefault(self.keys.window_pending(start, user_shard), set()).update(sent)
        # a released key shard replies {released, 0}: it counted nothing, and will not (the release drained it)
        done = Counted(sum(int(r[0]) for r in replies if isinstance(r[0], int)), sum(int(r[1]) for r in replies))
        self.total = Counted(self.total.counted + done.counted, self.total.skipped + done.skipped)
        return done

    def _read_pending(self, sources: list[Source]) -> list[Pending]:
        """Each source's pending entries (one ``HGETALL`` per user shard, one pipeline per master)."""
        shards = sorted({(start, shard) for start, shard, _ in sources})
        names = [self.keys.window_pending(start, shard) for start, shard in shards]
        items: Items = [(name, _hgetall(name)) for name in names]
        got = {ws: parse_pending(x for kv in reply.items() for x in kv)
               for ws, reply in zip(shards, run_batched(self.client, items))}
        return [{f: v for f, v in got[(start, shard)].items() if f.startswith(f"{partition}:")}
                for start, shard, partition in sources]


def _hdel(name: str, fields: list[str]) -> Callable[[Pipeline], object]:
    return lambda pipe: pipe.hdel(name, *fields)


def _hgetall(name: str) -> Callable[[Pipeline], object]:
    return lambda pipe: pipe.hgetall(name)


def _evalsha(sha: str, names: list[str], args: list[str]) -> Callable[[Pipeline], object]:
    return lambda pipe: pipe.evalsha(sha, len(names), *names, *args)
