"""Markers that Redis still holds the state the service cannot run without, and the error when it does not.

Redis can lose everything at once -- restarted without its AOF, a ``FLUSHALL``, a failover to an empty
replica -- and nothing in the data says so: an empty ledger looks like a new budget period, empty windows
look like quiet ones. Kafka keeps what the service acted on (the published releases, the committed ingest
offsets), so each side keeps an **epoch** marker in Redis, written when its state is first created, and
compares it with Kafka:

- the ledger's (``Keys.ledger_epoch``, the scope index's slot): written by the first release worker of a
  deployment (an empty releases topic) or by ``stream-dp budget rebuild --from-topic``; compared with the last
  records on the releases topic when a release worker starts, and read again in every poll and behind
  every commit (:mod:`stream_dp.release.ledger_guard`);
- ingest's (``Keys.ingest_epoch``, the ``{ingest}`` slot): written by the first ingest start of a consumer
  group with no committed offsets; checked at start against the group's committed offsets and by every
  watermark advance (:mod:`stream_dp.ingest.state_check`).

A side that finds its marker gone stops with :class:`StateLost` (exit code 2), whose message names what was
lost and the command that recovers it; the rule for telling a lost state from a new deployment is in
docs/privacy.md §4c.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from stream_dp.node_batches import Reads
from stream_dp.refusals import Refusal
from stream_dp.replication import NO_REPLICATION, ReplicationPolicy, write_then_wait


class StateLost(Refusal):
    """Redis lost state the service acted on; nothing more is done until ``recovery`` (a command) has run."""

    def __init__(self, message: str, *, recovery: str) -> None:
        super().__init__(message)
        self.recovery = recovery


@dataclass(frozen=True)
class Epoch:
    """One marker: a random id, when and why it was written (``origin``)."""

    id: str
    created: float
    origin: str

    def dumps(self) -> str:
        return json.dumps({"id": self.id, "created": self.created, "origin": self.origin}, sort_keys=True)

    @classmethod
    def loads(cls, raw: Any) -> "Epoch | None":
        """The marker in a ``GET`` reply (None: no marker).

        >>> Epoch.loads(b'{"created": 1.5, "id": "e1", "origin": "first start"}')
        Epoch(id='e1', created=1.5, origin='first start')
        >>> Epoch.loads(None) is None
        True
        """
        if raw is None:
            return None
        data = json.loads(raw)
        return cls(str(data["id"]), float(data["created"]), str(data["origin"]))


class EpochMarker:
    """One epoch key in Redis (``key``: :meth:`Keys.ledger_epoch` or :meth:`Keys.ingest_epoch`)."""

    def __init__(self, client: Any, key: str, replication: ReplicationPolicy = NO_REPLICATION) -> None:
        self.client = client
        self.key = key
        self.replication = replication  # redis.min_replicas_acked: create() and confirm() WAIT for replicas

    def confirm(self) -> None:
        """Return once ``redis.min_replicas_acked`` replicas hold the marker (a no-op without replication):
        a write in the marker's slot, then ``WAIT`` on the same connection -- replication is ordered, so the
        replicas then hold every earlier write of that master, the marker included. Raises the transient
        :class:`~stream_dp.replication.NotReplicated` otherwise. A worker that counts (or commits) under a
        marker no replica holds would take a failover that loses the marker for a loss of its state."""
        if not self.replication.replicas:
            return
        fence = f"{self.key}:confirmed"  # the same hash tag: the marker's slot, so its master
        write_then_wait(self.client, self.key, self.replication.replicas, self.replication.timeout_ms,
                        lambda pipe: pipe.set(fence, "1"))

    def read(self) -> Epoch | None:
        return Epoch.loads(self.client.get(self.key))

    def reads(self) -> Reads:
        """The ``GET`` of :meth:`read`, to batch with other reads; parses to the :class:`Epoch` or None."""
        return Reads([(self.key, lambda pipe: pipe.get(self.key))], lambda replies: Epoch.loads(replies[0]))

    def create(self, origin: str) -> Epoch:
        """Write a new marker unless one exists (``SET NX``: concurrent first starts agree on one); returns
        the marker now in Redis."""
        self.client.set(self.key, Epoch(uuid.uuid4().hex, time.time(), origin).dumps(), nx=True)
        self.confirm()
        epoch = self.read()
        if epoch is None:  # pragma: no cover - deleted between the SET and the GET
            raise StateLost(f"the marker {self.key} vanished right after it was written", recovery="a restart")
        return epoch

    def replace(self, origin: str) -> Epoch:
        """Write a new marker in place of any (a rebuild starts a new epoch: workers of the old one stop)."""
        epoch = Epoch(uuid.uuid4().hex, time.time(), origin)
        self.client.set(self.key, epoch.dumps())
        return epoch
