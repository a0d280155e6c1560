"""The release benchmark's windows (:mod:`bench.bench_release`): one template sorted set per shard, built once,
and each window's counts made from the templates on the Redis side.

A template holds a shard's share of ``n`` keys with Zipf counts. In the user layout each key's count is split
uniformly at random over the shards (multinomially: a key's users fall into every shard; absent where it got
0); in the key layout each key's whole count is in its key shard (:func:`~stream_dp.store.keys.key_shard_of`).
The templates are written in chunks of :data:`CHUNK` keys, so the bench process never holds more than one
chunk's members (at 10⁷ keys: the counts array and one chunk).

A window is opened the way the release worker finds one that ingest wrote (counts, each user shard's meta,
the windows index; in the key layout the counts sit in the key shards with nothing pending, as after ingest's
second step):

- on one redis-server each window shard is a server-side ``COPY`` of its template;
- on a Redis Cluster a copy cannot cross slots, and a window shard's slot (its hash tag) differs from its
  template's and from every other window's. So each template is ``DUMP``-ed once (Redis's own serialisation of
  the sorted set) and deleted, and each window shard is a ``RESTORE`` of that payload under the window's name
  on the master that owns it (server-side deserialisation): the shards of a window in one batch, one pipeline
  per master, the masters at the same time (:func:`stream_dp.node_batches.run_batched`). The payloads stay in
  the bench process (about 21 bytes per key: 0.2 GB at 10⁷ keys), before the measured windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from redis.client import Pipeline

from stream_dp.node_batches import is_cluster, run_batched
from stream_dp.store.keys import Keys, key_shard_of

TEMPLATE = "bench:template"
#: Keys per template write (one pipeline of up to ``shards`` ZADDs).
CHUNK = 20_000


def zipf_counts(n: int, a: float, top: float) -> np.ndarray:
    i = np.arange(1, n + 1, dtype=np.float64)
    return np.maximum(1, np.floor(top / i**a))


def template_key(shard: int) -> str:
    return f"{TEMPLATE}:{shard}"


def load_template(client: Any, n: int, a: float, top: float, *, shards: int = 1, seed: int = 1,
                  layout: str = "user") -> None:
    """One template sorted set per shard (see the module), written :data:`CHUNK` keys at a time (the user
    layout's split draws the same as one multinomial over all keys: the rows are drawn in order)."""
    counts = zipf_counts(n, a, top)
    rng = np.random.default_rng(seed)
    for s in range(0, n, CHUNK):
        names = [f"item-{j}" for j in range(s, min(n, s + CHUNK))]
        chunk = counts[s:s + len(names)]
        if layout == "key":
            parts = np.zeros((len(names), shards))
            owner = np.fromiter((key_shard_of(name, shards) for name in names), dtype=np.int64, count=len(names))
            parts[np.arange(len(names)), owner] = chunk
        else:
            parts = chunk[:, None] if shards == 1 else rng.multinomial(chunk.astype(np.int64), [1 / shards] * shards)
        pipe = client.pipeline(transaction=False)
        for shard in range(shards):
            col = parts[:, shard]
            members = {names[i]: float(col[i]) for i in np.flatnonzero(col > 0)}
            if members:
                pipe.zadd(template_key(shard), members)
        pipe.execute()


def counts_key(keys: Keys, start: int, shard: int) -> str:
    """Where a window's counts of one shard live: its user shard, or its key shard in the key layout."""
    return keys.key_shard_counts(start, shard) if keys.layout == "key" else keys.window_counts(start, shard)


class WindowMaker:
    """Opens windows from the templates (:func:`load_template`, loaded first): ``COPY`` on one Redis, ``RESTORE``
    of each template's ``DUMP`` on a cluster (the module says why)."""

    def __init__(self, client: Any, keys: Keys, size: int) -> None:
        self.r, self.keys, self.size = client, keys, size
        self.payloads: list[bytes] | None = None
        if is_cluster(client):
            self.payloads = [client.dump(template_key(shard)) or b"" for shard in range(keys.shards)]
            client.delete(*(template_key(shard) for shard in range(keys.shards)))
        self.seconds: list[float] = []  # how long each window took to open

    @property
    def payload_bytes(self) -> int:
        """The bytes of the templates' payloads kept in this process (0 with ``COPY``)."""
        return sum(map(len, self.payloads or []))

    def open(self, start: int) -> None:
        """The window starting at ``start``: its counts, each user shard's meta, its entry in the windows index."""
        t = time.perf_counter()
        if self.payloads is None:
            for shard in range(self.keys.shards):
                self.r.copy(template_key(shard), counts_key(self.keys, start, shard), replace=True)
        else:
            items = [(counts_key(self.keys, start, shard), _restore(counts_key(self.keys, start, shard), payload))
                     for shard, payload in enumerate(self.payloads) if payload]  # b"": no key in that shard
            run_batched(self.r, items)
        for shard in range(self.keys.shards):
            self.r.hset(self.keys.window_meta(start, shard), mapping={"start": start, "end": start + self.size})
        self.r.zadd(self.keys.windows_index(), {str(start): start})
        self.seconds.append(time.perf_counter() - t)

    def drop_counts(self, start: int) -> None:
        """Delete the window's counts (synchronously: nothing is freed in the background afterwards)."""
        self.r.delete(*(counts_key(self.keys, start, shard) for shard in range(self.keys.shards)))


def _restore(name: str, payload: bytes) -> Callable[[Pipeline], object]:
    return lambda pipe: pipe.restore(name, 0, payload, replace=True)
