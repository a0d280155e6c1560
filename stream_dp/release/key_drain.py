"""The key layout's drain before a release, and the key shards' released mark (``windows.layout = "key"``,
docs/design/key-sharded-counts.md).

Ingest applies a chunk in two steps: step 1 bounds it in its user shard and records the accepted increments
there as *pending*; step 2 counts them into the key shards (``store/lua/count_keys.lua``, at most once per
chunk by the key shard's offset high-water mark). An ingest worker that dies between the steps leaves
entries pending; normally its replay sends them again, but a window can close before any replay does (the
worker gone for good, its partitions idle past ``ingest.idle_timeout``). So:

**The guarantee.** :meth:`KeyShardDrain.drain` returns only once every pending entry of the window is
counted into its key shard, and the release reads the window's counts only after it returned
(:meth:`WindowRelease.run <stream_dp.release.unit.WindowRelease.run>` drains before the claim's round trip,
which carries top-k's read). Its key shards then hold, key by key, exactly the counts one unsharded window
would hold: each accepted (user, key) increment once, none lost.

Why this suffices, and why it is safe to run from any release worker, any number of times:

- *Nothing new becomes pending after the drain read.* A window is due only once ``end <= watermarks.global``,
  and ingest sets ``global`` only after every user shard of the window is marked ``closed``
  (:mod:`stream_dp.ingest.watermarks`), after which step 1 refuses the window (``apply_window.lua``). So the
  pending hashes read here are final (entries may only disappear: counted and trimmed by ingest).
- *Nothing is counted twice.* The drain sends every pending entry of every user shard with the same
  ``count_keys.lua`` as ingest's step 2; an entry a key shard already counted is at or below its source's
  high-water mark and is skipped. The whole pending hash of a user shard is sent, so each source's entries
  reach a key shard in offset order with every older pending one (the ordering rule,
  :func:`~stream_dp.store.key_counts.count_args`); an entry already trimmed was counted by every key shard
  it names.
- *Nothing changes after publication.* :meth:`KeyShardDrain.release` (run after the fenced released mark)
  marks every key shard ``released`` -- ``count_keys.lua`` then counts nothing, so a zombie ingest worker's
  late step 2 cannot change a published window -- and deletes the window's pending hashes.

Cost: one batch of ``HGETALL`` (one per user shard, one pipeline per master) per window; one more batch of
``count_keys`` only when something was left pending. Raw counts never leave this process and are never
logged: only the number of entries drained.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from redis.client import Pipeline

from stream_dp.node_batches import Item, evalsha_item, run_batched, run_with_scripts
from stream_dp.replication import NO_REPLICATION, ReplicationPolicy, write_then_wait
from stream_dp.store import scripts
from stream_dp.store.key_counts import Encoded, count_args, entries_by_key_shard, parse_pending
from stream_dp.store.keys import Keys

if TYPE_CHECKING:
    from stream_dp.release.windows import Window

log = logging.getLogger(__name__)


class KeyShardDrain:
    """The drain and the released mark of the key shards of closed windows (``keys.layout == "key"``)."""

    def __init__(self, client, *, keys: Keys) -> None:  # a redis client (single node or cluster)
        if keys.layout != "key":
            raise ValueError(f"the key-shard drain needs the key layout, got windows.layout = {keys.layout!r}")
        self.r = client
        self.keys = keys
        self._count = scripts.register(client, "count_keys")
        self._release = scripts.register(client, "release_key_shard")

    @property
    def scripts(self) -> tuple:
        """The Lua scripts the drain runs (loaded when the worker starts)."""
        return (self._count, self._release)

    def pending(self, window: Window) -> list[tuple[int, int, str, Encoded]]:
        """Every pending entry of the window's user shards: ``(start, user shard, field, encoded increments)``."""
        names = [self.keys.window_pending(window.start, shard) for shard in range(self.keys.shards)]
        replies = run_batched(self.r, [(name, _hgetall(name)) for name in names])
        out: list[tuple[int, int, str, Encoded]] = []
        for shard, reply in enumerate(replies):
            entries = parse_pending(x for kv in reply.items() for x in kv)
            out += [(window.start, shard, field, increments) for field, increments in sorted(entries.items())]
        return out

    def drain(self, window: Window, replication: ReplicationPolicy = NO_REPLICATION) -> int:
        """Count every pending entry of the closed ``window`` into its key shards (see the module's guarantee);
        the number of entries sent (0: nothing was pending, one round trip). With ``replication.replicas`` > 0
        (``redis.min_replicas_acked``) each key shard's counts are confirmed on that many replicas (``WAIT``)
        before it returns, as ingest's step 2 is: a failover cannot then take back counts the release reads.
        Idempotent; redis errors (and :class:`~stream_dp.replication.NotReplicated`) are raised unchanged (the
        pass is retried, and the drain with it)."""
        found = self.pending(window)
        if not found:
            return 0
        items: list[Item] = []
        for (start, key_shard), group in sorted(entries_by_key_shard(found).items()):
            items.append(evalsha_item(self._count, self.keys.key_shard(start, key_shard), count_args(group)))
        if replication.replicas:
            self._count_confirmed(items, replication)
        else:
            run_with_scripts(self.r, items, [self._count], ordered=False)  # each key shard's script on its own
        log.info("window %s: %d pending key-shard entries counted before its release (left by an ingest worker "
                 "stopped between its two steps)", window.label, len(found))
        return len(found)

    def _count_confirmed(self, items: list[Item], replication: ReplicationPolicy) -> None:
        """Each key shard's ``count_keys`` followed by ``WAIT`` on its master's connection (one key shard, one
        slot, at a time: the drain has work only after an ingest worker died between its steps)."""
        self.r.script_load(self._count.script)  # on a cluster: every master (the script runs by SHA below)
        for key, queue in items:
            write_then_wait(self.r, key, replication.replicas, replication.timeout_ms, queue)

    def release(self, window: Window, *, retention_seconds: int) -> None:
        """Mark every key shard of the window released (retention TTLs) and delete its pending hashes: run
        after the window's fenced released mark (idempotent, like the rest of ``finish_released``)."""
        items: list[Item] = [evalsha_item(self._release, self.keys.key_shard(window.start, j), [int(retention_seconds)])
                             for j in range(self.keys.shards)]
        items += [(name, _delete(name)) for name in
                  (self.keys.window_pending(window.start, shard) for shard in range(self.keys.shards))]
        run_with_scripts(self.r, items, [self._release], ordered=False)


def _hgetall(name: str) -> Callable[[Pipeline], object]:
    return lambda pipe: pipe.hgetall(name)


def _delete(name: str) -> Callable[[Pipeline], object]:
    return lambda pipe: pipe.delete(name)

