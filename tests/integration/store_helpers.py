"""Random per-partition event logs and their application to a :class:`~stream_dp.ingest.store.WindowStore` in
random batches (sometimes replaying an already applied span), shared by the store tests."""

from __future__ import annotations

import random

from stream_dp.ingest.store import Chunk, WindowStore
from stream_dp.schedule import window_start

Log = dict[int, list[tuple[int, float, str, str]]]


def random_log(rnd: random.Random, n: int, *, partitions: int, users: int, keys: int, span: float,
               pareto: float) -> Log:
    """``n`` events per partition in offset order over ``[0, span)`` seconds; users are pinned to partitions
    as producers key by user; keys follow a Pareto(``pareto``) popularity capped at ``keys``."""
    logs: Log = {p: [] for p in range(partitions)}
    for _ in range(n):
        u = rnd.randrange(users)
        p = u % partitions
        key = f"k{min(int(rnd.paretovariate(pareto)), keys)}"
        ts = rnd.uniform(0, span)
        logs[p].append((len(logs[p]), ts, f"user-{u}", key))
    return logs


def apply_in_batches(store: WindowStore, logs: Log, rnd: random.Random, *, size: int, replays: bool,
                     most: int, shuffle: bool) -> None:
    """Apply each partition's log in random batches of at most ``most`` events, sometimes (``replays``) from an
    earlier offset again; ``shuffle`` the chunks of a step (different (window, partition) are independent)."""
    pos = {p: 0 for p in logs}
    while any(pos[p] < len(logs[p]) for p in logs):
        chunks = []
        for p, log in logs.items():
            lo = pos[p]
            if replays and lo and rnd.random() < 0.3:
                lo = rnd.randrange(lo)  # replay from an earlier offset
            hi = min(len(log), pos[p] + rnd.randrange(1, most))
            by_window: dict[int, list] = {}
            for off, ts, user, key in log[lo:hi]:
                by_window.setdefault(window_start(ts, size), []).append((off, user, key))
            chunks += [Chunk.of(w, p, evs) for w, evs in by_window.items()]
            pos[p] = hi
        store.register_windows({c.start for c in chunks})
        if shuffle:
            rnd.shuffle(chunks)
        store.apply(chunks, closed_through=None)


def uncounted_pending(client, keys, start: int) -> list[str]:
    """The key layout's pending entries of window ``start`` that a key shard has not counted yet (none once
    every crash was healed): ``keys`` is a ``Keys`` with ``layout = "key"``."""
    out = []
    for user_shard in range(keys.shards):
        for field in client.hkeys(keys.window_pending(start, user_shard)):
            partition, offset, key_shard = (int(x) for x in field.decode().split(":"))
            high = client.hget(keys.key_shard_applied(start, key_shard), f"{user_shard}:{partition}")
            if high is None or int(high) < offset:
                out.append(field.decode())
    return out
