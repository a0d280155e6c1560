"""Writes the service acts on, confirmed on replicas first (Redis ``WAIT``), single node or cluster.

Redis replication is asynchronous: a master acknowledges a write before any replica has it. If the master
then fails and a replica is promoted, the write is gone -- after the service already acted on it (a
release published whose ledger charge vanished: the budget forgets privacy it spent; Kafka offsets
committed for window increments that vanished: events silently lost). docs/scaling.md, Failover safety.

``WAIT numreplicas timeout`` blocks until every write made **on the same connection** so far has been
acknowledged by ``numreplicas`` replicas, or the timeout passed, and returns how many did. It says nothing
about writes made on other connections: a WAIT sent on a different pooled connection (whose own last write
is old or absent) returns at once and proves nothing. So :func:`write_then_wait` queues the writes and the
WAIT in one pipeline, which redis-py sends on one connection -- on a cluster, a connection of the master
that owns the key's slot. Replication is ordered per master, so a write that is confirmed also confirms
every earlier write of that master, including ones other clients made (what :meth:`Ledger.confirm
<stream_dp.accounting.ledger.Ledger.confirm>` relies on: it writes a fence after the charge).

Settings (``[redis]``): ``min_replicas_acked`` ("auto" or an integer, :func:`resolve_min_replicas`) and
``replication_timeout_ms``. When fewer replicas acknowledge in time, :class:`NotReplicated` is raised: a
subclass of ``redis.ConnectionError``, which every worker loop already treats as a Redis outage (retry
with capped backoff; ingest does not commit offsets, the release worker does not publish).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import Pipeline

from stream_dp.config import AUTO_REPLICAS, RedisConfig
from stream_dp.errors import StreamDPError
from stream_dp.node_batches import FAILOVER_ERRORS, is_cluster, node_client, refresh_slots

__all__ = ["NO_REPLICATION", "NotReplicated", "ReplicationPolicy", "resolve_min_replicas", "write_then_wait"]


class NotReplicated(redis.ConnectionError, StreamDPError):
    """A write was not confirmed on ``redis.min_replicas_acked`` replicas within ``redis.replication_timeout_ms``
    (or its master changed during a failover). Transient: the caller must not act on the write yet and
    retries as after any Redis outage. The message names the settings and never a key's value."""


@dataclass(frozen=True)
class ReplicationPolicy:
    """How many replicas must confirm a write, and for how long one ``WAIT`` may block."""

    replicas: int
    timeout_ms: int

    def __post_init__(self) -> None:
        if self.replicas < 0 or self.timeout_ms < 1:
            raise ValueError(f"replicas must be >= 0 and timeout_ms >= 1, got {self.replicas}, {self.timeout_ms}")

    @classmethod
    def from_config(cls, cfg: RedisConfig, client: Any) -> "ReplicationPolicy":
        """The policy of ``cfg`` (``"auto"`` resolved against ``client``'s deployment, once)."""
        return cls(resolve_min_replicas(cfg, client), cfg.replication_timeout_ms)


NO_REPLICATION = ReplicationPolicy(0, 1)


def _cluster_has_replicas(client: Any) -> bool:
    nodes = client.cluster_nodes()  # {"host:port": {"flags": "...", ...}} from any node
    return any("slave" in info.get("flags", "") or "replica" in info.get("flags", "") for info in nodes.values())


def resolve_min_replicas(cfg: RedisConfig, client: Any) -> int:
    """``redis.min_replicas_acked`` as a number: the configured integer, or for ``"auto"`` 1 when the
    deployment has replicas (``CLUSTER NODES`` lists one, or ``INFO replication`` of a single node counts a
    connected one), else 0.

    "auto" is 1 as soon as *any* master has a replica: a master left without one (after a failover, until
    the old master rejoins as a replica) then refuses to confirm (:class:`NotReplicated`, retried) rather
    than letting the service act on a write that one crash could erase. Production deployments should set
    the number explicitly; "auto" is read once, at start-up.
    """
    wanted = cfg.min_replicas_acked
    if wanted != AUTO_REPLICAS:
        return int(wanted)
    if is_cluster(client):
        return 1 if _cluster_has_replicas(client) else 0
    info = client.info("replication")
    return 1 if int(info.get("connected_slaves", 0)) > 0 else 0


def write_then_wait(client: Any, key: str, replicas: int, timeout_ms: int,
                    write: Callable[[Pipeline], object]) -> list[Any]:
    """Run the commands ``write`` queues on a pipeline, then ``WAIT replicas timeout_ms``, all on **one
    connection of the master that owns** ``key``; return the replies of the queued commands.

    ``write`` must only queue commands on keys of ``key``'s slot (one hash tag). With ``replicas == 0`` no
    WAIT is sent. Raises :class:`NotReplicated` when fewer than ``replicas`` replicas acknowledged within
    ``timeout_ms``, or when the slot's master moved or failed meanwhile (the writes may or may not have been
    applied; either way they are not confirmed). Errors of the queued commands themselves propagate.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    node = node_client(client, key)
    pipe = node.pipeline(transaction=False)
    write(pipe)
    queued = len(pipe)
    if replicas:
        pipe.execute_command("WAIT", replicas, timeout_ms)
    try:
        replies = pipe.execute()
    except FAILOVER_ERRORS as exc:
        refresh_slots(client)
        raise NotReplicated(f"the master of a write changed during a failover ({type(exc).__name__}); "
                            "not confirmed on redis.min_replicas_acked replicas yet") from None
    except (redis.ConnectionError, redis.TimeoutError):
        refresh_slots(client)
        raise
    if not replicas:
        return replies
    acked = int(replies[queued])
    if acked < replicas:
        raise NotReplicated(f"a write was confirmed by {acked} of the {replicas} replicas that "
                            f"redis.min_replicas_acked requires within redis.replication_timeout_ms "
                            f"({timeout_ms} ms)")
    return replies[:queued]
