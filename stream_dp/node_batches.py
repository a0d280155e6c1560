"""Pipelines that work on a single Redis and on a Redis Cluster alike: one batch per master.

redis-py's cluster pipeline refuses scripts (``EVALSHA``) and a cluster cannot run one pipeline across
masters anyway. :func:`run_batched` takes ``(key, queue)`` pairs -- ``queue`` puts commands on keys of
``key``'s slot into a pipeline -- and runs one plain pipeline per owning master (on a single Redis: one
pipeline, as before), returning the replies in the order of the pairs. No atomicity across pairs is
implied on either deployment (each pair's atomicity is its own script's).

A MOVED/ASK/CLUSTERDOWN reply (the slot's master changed in a failover or a resharding) refreshes the
client's slot map and raises :class:`SlotMoved`, a ``redis.ConnectionError``: the workers' loops treat it
as a Redis outage and retry the whole batch (every script the service batches is idempotent per its
offset record or fencing token, so a pair that did run before the error is refused or repeated harmlessly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.client import Pipeline

__all__ = ["Reads", "SlotMoved", "is_cluster", "node_client", "refresh_slots", "run_batched", "run_reads"]

#: Replies meaning "the key's master is changing" (failover, resharding, loading): retry later.
FAILOVER_ERRORS = (redis.exceptions.AskError, redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
                   redis.exceptions.ReadOnlyError, redis.exceptions.MasterDownError,
                   redis.exceptions.SlotNotCoveredError)


class SlotMoved(redis.ConnectionError):
    """A slot's master changed while a batch ran (failover or resharding); retry the batch."""


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is redis-py's cluster client."""
    return isinstance(client, redis.RedisCluster)


def node_client(client: Any, key: str) -> Any:
    """The client to send ``key``'s commands on: on a cluster the master that owns its slot (a plain client
    of that node, which accepts scripts in pipelines), else ``client`` itself."""
    if is_cluster(client):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def refresh_slots(client: Any) -> None:
    """After a MOVED or a dead master: let the cluster client re-read the slot map (best effort)."""
    if not is_cluster(client):
        return
    try:
        client.nodes_manager.initialize()
    except redis.RedisError:  # every startup node may be down for a moment; the next call retries
        pass


def run_batched(client: Any, items: Sequence[tuple[str, Callable[[Pipeline], None]]]) -> list[Any]:
    """Run each ``queue(pipeline)`` of ``items`` in a pipeline of the master owning its ``key``; return
    all replies in item order (a ``queue`` may add several commands: their replies follow each other).
    Errors of the commands propagate (the first one) after every pipeline ran, as redis-py does."""
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for _, queue in items:
            queue(pipe)
        return pipe.execute()
    groups: dict[str, list[int]] = {}
    nodes: dict[str, Any] = {}
    for i, (key, _) in enumerate(items):
        node = client.get_node_from_key(key)
        groups.setdefault(node.name, []).append(i)
        nodes[node.name] = node
    replies: list[list[Any]] = [[] for _ in items]
    first_error: BaseException | None = None
    for name, indexes in groups.items():
        pipe = client.get_redis_connection(nodes[name]).pipeline(transaction=False)
        sizes = []
        for i in indexes:
            before = len(pipe)
            items[i][1](pipe)
            sizes.append(len(pipe) - before)
        try:
            out = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError):
            refresh_slots(client)
            raise
        pos = 0
        for i, size in zip(indexes, sizes):
            replies[i] = out[pos:pos + size]
            pos += size
        for reply in out:
            if isinstance(reply, FAILOVER_ERRORS):
                refresh_slots(client)
                raise SlotMoved(f"a slot's master changed during a batch ({type(reply).__name__}); retrying")
            if isinstance(reply, Exception) and first_error is None:
                first_error = reply
    if first_error is not None:
        raise first_error
    return [reply for per_item in replies for reply in per_item]


class Reads:
    """Independent reads of one module, to be sent together with other modules' (:func:`run_reads`): the
    ``(key, queue)`` items (one command each) and ``parse``, which turns their replies into the result."""

    def __init__(self, items: Sequence[tuple[str, Callable[[Pipeline], None]]],
                 parse: Callable[[list[Any]], Any]) -> None:
        self.items = list(items)
        self.parse = parse


def run_reads(client: Any, *reads: Reads) -> list[Any]:
    """Send every read of ``reads`` in one :func:`run_batched` (one round trip on a single Redis, one per
    master on a cluster) and return each ``parse``'s result, in order. Only for reads: no order among them."""
    replies = run_batched(client, [item for r in reads for item in r.items]) if any(r.items for r in reads) else []
    out, pos = [], 0
    for r in reads:
        out.append(r.parse(replies[pos:pos + len(r.items)]))
        pos += len(r.items)
    return out
